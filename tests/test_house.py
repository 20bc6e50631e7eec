"""How chute's modules talk to each other: through named capabilities, not private names.

A stage that needs something from another (its parents, a source's downloads, a
batch stage's shared-memory stacking) asks through a method of the base class
(``Node.with_parents``, ``Node.parents``) or an ``isinstance`` check against a
small Protocol (``chute._core.capabilities``), never by probing a private name
with ``getattr(x, "_name", None)``.  The scan reads every module of
``src/chute`` with ``ast`` and counts:

* probes: ``getattr``/``hasattr`` calls whose attribute is a string literal that
  starts with ``_`` (dunder names such as ``__name__`` are Python's, not ours);
* hand reparenting: an assignment to ``<something>._parents`` other than a
  node's or iterator's own ``self._parents`` (copy the node with
  ``with_parents(...)`` instead).

Run this file as a script to print the counts and every site.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "chute"

#: The most probes of private names chute may keep (this scan found 79 when work on issue 35
#: began; the issue, counting another way, said 97).
MOST_PROBES = 20


def _is_private(name: object) -> bool:
    return (
        isinstance(name, str)
        and name.startswith("_")
        and not (name.startswith("__") and name.endswith("__"))
    )


def probes_in(source: str) -> list[tuple[int, str]]:
    """``(line, call)`` for each ``getattr``/``hasattr`` of a private name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and _is_private(node.args[1].value)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


#: The one module that may set another node's ``_parents``: the base, in ``Node.with_parents``.
NODE_BASE = SRC / "_core" / "node.py"


def reparent_sites_in(source: str) -> list[tuple[int, str]]:
    """``(line, target)`` for each assignment to another object's ``_parents``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for part in ast.walk(target):
                if (
                    isinstance(part, ast.Attribute)
                    and part.attr == "_parents"
                    and not (isinstance(part.value, ast.Name) and part.value.id == "self")
                ):
                    found.append((node.lineno, ast.unparse(part)))
    return found


def _scan(counter: Callable[[str], list[tuple[int, str]]], skip: Path | None = None) -> list[str]:
    return [
        f"{path.relative_to(SRC.parent)}:{line}: {text}"
        for path in sorted(SRC.rglob("*.py"))
        if path != skip
        for line, text in counter(path.read_text())
    ]


def probes() -> list[str]:
    """Every probe of a private name in chute, as ``path:line: call``."""
    return _scan(probes_in)


def reparent_sites() -> list[str]:
    """Every hand reparenting in chute, as ``path:line: target``."""
    return _scan(reparent_sites_in, skip=NODE_BASE)


def test_modules_probe_few_private_names() -> None:
    found = probes()
    assert len(found) <= MOST_PROBES, (
        f"{len(found)} getattr/hasattr probes of private names (at most {MOST_PROBES}); "
        "ask through a method of the base class or an isinstance check against a "
        "Protocol of chute._core.capabilities instead:\n" + "\n".join(found)
    )


def test_no_stage_reparents_a_copy_by_hand() -> None:
    found = reparent_sites()
    assert not found, (
        "copy a node with node.with_parents(...) instead of setting _parents:\n" + "\n".join(found)
    )


#: The modules that name the capabilities, as ``typing.Protocol``s.
CAPABILITY_MODULES = ("_core", "_stages", "_loader")


def _defined_names(skip: set[Path]) -> set[str]:
    """Every function, class attribute and ``x.name = ...`` target in chute but ``skip``."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


@pytest.mark.parametrize("package", CAPABILITY_MODULES)
def test_every_capability_is_offered_somewhere(package: str) -> None:
    # A capability's members are private names: renaming one on the side that offers it
    # would quietly turn the feature off, so each must still be defined outside its Protocol.
    capabilities = importlib.import_module(f"chute.{package}.capabilities")
    defined = _defined_names({SRC / package / "capabilities.py" for package in CAPABILITY_MODULES})
    missing = [
        f"{name}.{member}"
        for name in capabilities.__all__
        for member in _members(getattr(capabilities, name))
        if member not in defined
    ]
    assert not missing, f"nothing in chute offers {missing}"


def _members(protocol: type) -> list[str]:
    """The names a Protocol asks for: its methods and its annotated attributes."""
    own = {k for k in vars(protocol) if k.startswith("_") and not k.startswith("__")}
    own |= set(getattr(protocol, "__annotations__", {}))
    return sorted(k for k in own if not k.startswith(("_abc_", "_is_")))


def test_the_scan_counts_private_probes_and_leaves_out_dunders() -> None:
    source = (
        "getattr(x, '_source', None)\n"
        "hasattr(x, '_fn')\n"
        "getattr(x, '__name__', '')\n"
        "getattr(x, 'public', None)\n"
        "getattr(x, name)\n"
    )
    assert [line for line, _ in probes_in(source)] == [1, 2]


def test_the_scan_sees_a_copy_reparented_by_hand_and_not_a_nodes_own_parents() -> None:
    source = (
        "class A:\n"
        "    def __init__(self, p):\n"
        "        self._parents = (p,)\n"
        "def rewrite(node, p):\n"
        "    copied = copy.copy(node)\n"
        "    copied._parents = (p,)\n"
    )
    assert reparent_sites_in(source) == [(6, "copied._parents")]


if __name__ == "__main__":
    for title, found in (("probes", probes()), ("reparent sites", reparent_sites())):
        print(f"{len(found)} {title}")
        print("\n".join(f"  {line}" for line in found))
