"""Every public callable of chute documents itself: a summary line, and Args when it takes any.

The test walks the public modules' ``__all__``, the classes they export and
those classes' public methods and properties (including inherited ones that
chute defines), so ``help(chute.MapDataset.shuffle)`` and the API reference
always say what a method does and what each argument means.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

PUBLIC_MODULES = (
    "chute",
    "chute.checkpoint",
    "chute.experimental",
    "chute.monitoring",
    "chute.multiprocessing",
    "chute.samplers",
    "chute.sharding",
    "chute.sources",
    "chute.transforms",
)

# Intentionally terse, by full public name (e.g. "chute.experimental.Foo.bar"): keep it short,
# and remove an entry once its docstring is whole (a test below insists).  Empty today.
TERSE: frozenset[str] = frozenset()


def _own(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("chute")


def _takes_arguments(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name not in ("self", "cls") for p in params)


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """Public methods and properties of ``cls`` that chute itself defines."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not _own(klass):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property) or inspect.isfunction(attr):
                yield name, attr


def _problem(obj: Any) -> str | None:
    doc = inspect.getdoc(obj.fget if isinstance(obj, property) else obj) or ""
    if not doc.strip():
        return "has no docstring"
    if not doc.splitlines()[0].strip().endswith((".", ":")):
        return "has no one-line summary ending in '.'"
    if inspect.isclass(obj):  # a class documents its constructor's Args here or in __init__
        init = vars(obj).get("__init__") or next(
            (vars(k)["__init__"] for k in obj.__mro__ if "__init__" in vars(k)), None
        )
        if init is None or not _own(init) or not _takes_arguments(init):
            return None
        doc += inspect.getdoc(init) or ""
    elif isinstance(obj, property) or not _takes_arguments(obj):
        return None
    return None if "Args:" in doc else "takes arguments but has no 'Args:' section"


def _public_callables() -> Iterator[tuple[str, Any]]:
    """(qualified name, object) for everything public, each object once."""
    done: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or id(obj) in done or not callable(obj) or not _own(obj):
                continue
            done.add(id(obj))
            yield f"{module_name}.{name}", obj
            if inspect.isclass(obj) and not issubclass(obj, enum.Enum):
                for member_name, member in _members(obj):
                    if id(member) not in done:
                        done.add(id(member))
                        yield f"{module_name}.{name}.{member_name}", member


def _missing() -> list[str]:
    """What fails the rule, outside the allow-list."""
    out = []
    for name, obj in _public_callables():
        if name in TERSE:
            continue
        problem = _problem(obj)
        if problem:
            out.append(f"{name} {problem}")
    return out


def test_every_public_callable_has_summary_and_args() -> None:
    missing = _missing()
    assert not missing, "\n".join(missing)


def test_allow_list_holds_only_public_names_that_still_need_it() -> None:
    found = {name: obj for name, obj in _public_callables()}
    for name in TERSE:
        assert name in found, f"{name} is in TERSE but not public"
        assert _problem(found[name]), f"{name} is documented now: take it off TERSE"


@pytest.mark.parametrize(
    "path",
    [
        "chute.MapDataset.shuffle",
        "chute.IterDataset.mp_prefetch",
        "chute.DataLoader",
        "chute.ReadOptions",
        "chute.MultiprocessingOptions",
        "chute.experimental.DatasetOptions",
    ],
)
def test_core_docstrings_have_a_running_example(path: str) -> None:
    module_name, _, attr = path.partition(".")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    assert ">>> " in (inspect.getdoc(obj) or ""), f"{path} has no doctest example"
