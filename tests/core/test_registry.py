"""chute._core.registry: what _core calls up to is installed by importing chute, in workers too."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from chute import MapDataset, MultiprocessingOptions
from chute._core import registry


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
