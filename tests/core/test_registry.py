"""chute._core.registry: what _core calls up to is installed by importing chute, in workers too."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chute import MapDataset, MultiprocessingOptions
from chute._core import dataset as dataset_module
from chute._core import iter_dataset as iter_dataset_module
from chute._core import registry
from chute._stages import registered


def test_importing_any_chute_module_fills_the_registry() -> None:
    code = (
        "from chute._core import registry\n"
        "print(registry.stages.MapMapDataset.__module__, registry.stats.__name__,\n"
        "      registry.from_grain.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "chute._stages.map",
        "chute._stats.instrument",
        "chute._grain.state",
    ]


def test_a_stage_nobody_registered_says_to_import_chute() -> None:
    with pytest.raises(AttributeError, match=r"no stage 'NoSuchStage'.*import chute"):
        registry.stages.NoSuchStage  # noqa: B018


def _in_the_worker(x: int) -> Any:
    """Builds a pipeline with fluent methods and restores it from a Grain state."""
    it = iter(MapDataset.range(10).to_iter_dataset().map(lambda v: v * 10))
    it.set_state({"next_index": x})  # as Grain's iterator saves it
    return next(it), getattr(registry.stats, "__name__", None)


@pytest.mark.parametrize("start_method", ["fork", "forkserver"], indirect=True)
def test_a_worker_process_builds_stages_and_reads_grain_states(start_method: str) -> None:
    ds = MapDataset.range(3).map(_in_the_worker).to_iter_dataset()
    got = list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    stats = "chute._stats.instrument"
    assert got == [(0, stats), (10, stats), (20, stats)]


def _fluent_methods() -> list[tuple[str, str, str]]:
    """``(method, annotated return, stage it builds)`` for each method returning ``_s.X(...)``."""
    found = []
    for module in (dataset_module, iter_dataset_module):
        tree = ast.parse(inspect.getsource(module))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                returned = fn.body[-1]
                if not (
                    isinstance(returned, ast.Return)
                    and isinstance(returned.value, ast.Call)
                    and isinstance(returned.value.func, ast.Attribute)
                    and ast.unparse(returned.value.func.value) == "_s"
                ):
                    continue
                annotation = ast.unparse(fn.returns) if fn.returns else ""
                found.append((f"{cls.name}.{fn.name}", annotation, returned.value.func.attr))
    return found


def test_each_fluent_method_is_annotated_with_the_stage_class_it_builds() -> None:
    methods = _fluent_methods()
    # 14 fluent methods of MapDataset, 8 of IterDataset, and the _flat_map of each for apply()
    assert len(methods) == 24
    for method, annotation, stage in methods:
        if stage in ("mp_prefetch", "prefetch"):  # with no workers, the dataset itself
            assert annotation == "IterDataset[T]", method
        else:
            assert annotation.split("[")[0] == stage, f"{method} -> {annotation}, builds {stage}"
        assert stage in registered.__all__  # what type checkers see as registry.stages


def test_importing_chute_registers_exactly_the_stages_listed_for_type_checkers() -> None:
    for name in registered.__all__:
        assert getattr(registry.stages, name) is getattr(registered, name)


_TYPED_PIPELINE = """
from chute import MapDataset

def to_text(x: int) -> str:
    return str(x)

reveal_type(MapDataset.range(3).map(to_text).batch(2))
reveal_type(MapDataset.range(3).seed(1).shuffle().filter(bool).map(to_text))
reveal_type(MapDataset.range(3).map(to_text).to_iter_dataset().map(len).mp_prefetch())
count: int = MapDataset.range(3).map(to_text)
MapDataset.range(3).map(to_text).slice([0]).map(lambda s: s.upper() + 1)
"""


def test_type_checkers_see_the_stage_classes_and_element_types_of_a_fluent_pipeline(
    tmp_path: Path,
) -> None:
    from mypy import api

    (tmp_path / "pipeline.py").write_text(_TYPED_PIPELINE)
    config = Path(__file__).parents[2] / "pyproject.toml"
    out, err, _ = api.run(
        [
            f"--config-file={config}",
            f"--cache-dir={tmp_path / 'cache'}",
            "--hide-error-context",
            "--no-error-summary",
            str(tmp_path / "pipeline.py"),
        ]
    )
    # mypy writes builtins.str or str, depending on its version
    lines = [line.split(".py:", 1)[1].replace("builtins.", "") for line in out.splitlines()]
    assert lines == [
        '7: note: Revealed type is "chute._stages.batch.BatchMapDataset"',
        '8: note: Revealed type is "chute._stages.map.MapMapDataset[str]"',
        '9: note: Revealed type is "chute._core.iter_dataset.IterDataset[int]"',
        "10: error: Incompatible types in assignment (expression has type "
        '"MapMapDataset[str]", variable has type "int")  [assignment]',
        '11: error: Unsupported operand types for + ("str" and "int")  [operator]',
    ], err
