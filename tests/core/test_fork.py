"""``ForkCheck``: the one way chute tells per-process state it made from state it inherited."""

from __future__ import annotations

import ast
import os
import pickle
from pathlib import Path

import chute
from chute._core.fork import ForkCheck


def test_a_check_is_forked_only_in_another_process() -> None:
    check = ForkCheck()
    assert not check.forked() and check.pid == os.getpid()
    check.pid = os.getpid() + 1  # as a forked child sees its parent's check
    assert check.forked()
    assert repr(check) == f"ForkCheck(pid={check.pid})"


def test_a_check_unpickled_elsewhere_keeps_the_process_that_made_it() -> None:
    check = ForkCheck()
    copy = pickle.loads(pickle.dumps(check))
    assert copy.pid == check.pid and not copy.forked()


def _compares_getpid(node: ast.AST) -> bool:
    """Whether ``node`` compares ``os.getpid()`` with something (``pid != os.getpid()``)."""
    if not isinstance(node, ast.Compare):
        return False
    for side in (node.left, *node.comparators):
        if (
            isinstance(side, ast.Call)
            and isinstance(side.func, ast.Attribute)
            and side.func.attr == "getpid"
        ):
            return True
    return False


def test_no_module_but_fork_checks_which_process_it_runs_in() -> None:
    root = Path(chute.__file__).parent
    found = [
        f"{path.relative_to(root).as_posix()}:{node.lineno}"
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if _compares_getpid(node)
    ]
    assert len(found) == 1 and found[0].startswith("_core/fork.py:"), found
