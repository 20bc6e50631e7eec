"""chute's packages stand in layers: each imports only the layers below it.

From the ground up: ``_core`` (the contract) imports no other chute package,
not even inside a function; ``_execution`` and ``_remote`` (machinery) import
``_core``; ``_sources`` and ``_stages`` import those; ``_stats`` and ``_grain``
(Grain-state translation) stand above them, then ``_loader``, then ``_accel``
and ``_cli``; the public modules (``chute``, ``chute.experimental``, ...) sit on
top.  Where a lower layer must call up, it goes through
``chute._core.registry``, which the upper layers fill.

The scan reads every module of ``src/chute`` with ``ast``: imports inside
functions count (they run too), imports under ``if TYPE_CHECKING:`` do not
(they never run).
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "chute"

#: The layers, bottom first.  A package may import the packages of the layers below its own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_core",),
    ("_execution", "_remote"),
    ("_sources", "_stages"),
    ("_stats", "_grain"),
    ("_loader",),
    ("_accel", "_cli"),
)
PUBLIC = "public"  # chute itself and its public modules: on top, they may import anything


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _Imports(ast.NodeVisitor):
    """The modules a module's code imports, wherever the import stands."""

    def __init__(self, module: str, is_package: bool, known: frozenset[str]) -> None:
        self.module, self.is_package, self.known = module, is_package, known
        self.found: list[tuple[str, int]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):  # only for type checkers: never runs
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.extend((alias.name, node.lineno) for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"  # ``from chute import _stages`` imports a module
            self.found.append((submodule if submodule in self.known else base, node.lineno))

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.module.split(".")
        if not self.is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))


def scan(source: str, module: str, known: frozenset[str], is_package: bool = False) -> list:
    """``(imported module, line)`` for each import in ``source``, the code of ``module``."""
    visitor = _Imports(module, is_package, known)
    visitor.visit(ast.parse(source))
    return visitor.found


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ("chute", *path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def package_of(module: str) -> str | None:
    """The private package ``module`` lies in, PUBLIC for the rest of chute, None outside it."""
    parts = module.split(".")
    if parts[0] != "chute":
        return None
    if len(parts) > 1 and parts[1].startswith("_") and (SRC / parts[1]).is_dir():
        return parts[1]
    return PUBLIC


@functools.cache
def imports_between_packages() -> tuple[tuple[str, str, str, str, int], ...]:
    """``(package, imported package, module, imported module, line)`` across packages."""
    modules = _modules()
    known = frozenset(modules)
    edges = []
    for module, path in modules.items():
        source = package_of(module)
        for imported, line in scan(path.read_text(), module, known, path.name == "__init__.py"):
            target = package_of(imported)
            if target is not None and target != source:
                edges.append((source, target, module, imported, line))
    return tuple(edges)


def _layer(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    return len(LAYERS) if package == PUBLIC else -1


def _upward(package: str) -> list[str]:
    """``module:line imports module`` for each import of ``package`` at or above its layer."""
    return [
        f"{module}:{line} imports {imported}"
        for source, target, module, imported, line in imports_between_packages()
        if source == package and _layer(target) >= _layer(package)
    ]


def test_core_imports_no_other_chute_package() -> None:
    upward = _upward("_core")
    assert not upward, "_core must import no other chute package:\n" + "\n".join(upward)


def _packages_above_core() -> list[str]:
    return [package for layer in LAYERS[1:] for package in layer]


@pytest.mark.parametrize("package", _packages_above_core())
def test_each_package_imports_only_the_layers_below_it(package: str) -> None:
    upward = _upward(package)
    assert not upward, f"{package} imports at or above its layer:\n" + "\n".join(upward)


def test_every_package_has_its_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    placed = {package for layer in LAYERS for package in layer}
    assert {p for p in packages if p.startswith("_")} == placed


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_spans_two_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target, *_ in imports_between_packages():
        graph[source].add(target)
    circles = _circles(graph)
    assert not circles, f"these packages import each other in a circle: {circles}"


def test_the_scan_counts_imports_in_functions_and_leaves_out_type_checking_blocks() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import chute._core.errors\n"
        "if TYPE_CHECKING:\n"
        "    from chute._stages import map\n"
        "else:\n"
        "    from chute._sources import range\n"
        "def f():\n"
        "    from .. import _stats\n"
        "    from .tree import stack\n"
    )
    known = frozenset({"chute._stats", "chute._stages.map", "chute._sources.range"})
    found = [module for module, _ in scan(source, "chute._core.example", known)]
    assert found == [
        "typing",
        "chute._core.errors",
        "chute._sources.range",
        "chute._stats",
        "chute._core.tree",
    ]


def test_the_scan_sees_an_upward_import_in_core() -> None:
    known = frozenset({"chute._stages"})
    found = scan("def f():\n    from chute import _stages\n", "chute._core.x", known)
    assert [package_of(module) for module, _ in found] == ["_stages"]


def circles_inside(package: str) -> list[list[str]]:
    """The circles of imports between modules of ``package`` (imports inside functions count)."""
    modules = _modules()
    known = frozenset(modules)
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        if package_of(module) != package:
            continue
        for imported, _ in scan(path.read_text(), module, known, path.name == "__init__.py"):
            if imported in known and imported != module and package_of(imported) == package:
                graph[module].add(imported)
    return _circles(graph)


def test_no_import_circle_inside_core() -> None:
    # node.py holds what both dataset kinds share; iter_dataset.py builds on it alone, and
    # dataset.py (MapDataset, and the re-export of IterDataset) on both.
    circles = circles_inside("_core")
    assert not circles, f"these modules of _core import each other in a circle: {circles}"


#: The circles kept on purpose, each with its reason (docs/architecture.md says more).
DELIBERATE_CIRCLES: dict[str, list[list[str]]] = {
    # ArrayRecordDataSource(path) is Grain's one name for every way of reading the format: its
    # __new__ hands an index file or a bucket path to its subclass IndexedArrayRecordDataSource,
    # which imports its base; the base imports the subclass only inside __new__.
    "_sources": [
        ["chute._sources.array_record.indexed", "chute._sources.array_record.source"],
    ],
}


def _packages() -> list[str]:
    private = (p.name for p in SRC.iterdir() if p.name.startswith("_"))
    return [*sorted(name for name in private if (SRC / name / "__init__.py").is_file()), PUBLIC]


@pytest.mark.parametrize("package", _packages())
def test_no_import_circle_inside_a_package_but_the_deliberate_ones(package: str) -> None:
    circles = circles_inside(package)
    assert circles == DELIBERATE_CIRCLES.get(package, []), (
        f"these modules of {package} import each other in a circle: {circles} (break it at a "
        "small base module, or list it in DELIBERATE_CIRCLES with its reason)"
    )


def test_the_circle_finder_sees_a_circle_of_three_and_not_a_module_that_only_leads_in() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
