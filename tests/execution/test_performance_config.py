"""pick_performance_config: workers and read-ahead whose elements fit a RAM budget."""

from __future__ import annotations

import time

import numpy as np
import pytest

from chute import MapDataset, MultiprocessingOptions, ReadOptions
from chute._execution import performance
from chute.experimental import PerformanceConfig, pick_performance_config


def _slow_megabyte(i: int) -> np.ndarray:
    time.sleep(0.005)  # far slower than a handoff: the count is up to the bounds
    return np.full(1 << 20, i % 256, np.uint8)


def _megabytes(n: int = 50):  # type: ignore[no-untyped-def]
    return MapDataset.range(n).map(_slow_megabyte).to_iter_dataset()


def test_the_budget_covers_every_worker_and_its_waiting_elements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(performance, "usable_cores", lambda: 8)
    config = pick_performance_config(
        _megabytes(), ram_budget_mb=100, max_workers=4, max_buffer_size=None
    )
    workers = config.multiprocessing_options.num_workers
    ahead = config.read_options.prefetch_buffer_size
    waiting = config.multiprocessing_options.per_worker_buffer_size
    assert workers == 4
    assert workers * (ahead + waiting + 1) <= 100  # 1 MiB elements in a 100 MiB budget
    assert workers * (ahead + 1 + waiting + 1) > 100  # and no smaller than it needs to be


def test_small_elements_read_ahead_up_to_the_cap_and_want_no_workers() -> None:
    ds = MapDataset.range(10).to_iter_dataset()
    config = pick_performance_config(ds, ram_budget_mb=512, max_workers=2, max_buffer_size=64)
    assert config.read_options == ReadOptions(num_threads=16, prefetch_buffer_size=64)
    assert config.multiprocessing_options == MultiprocessingOptions(
        num_workers=0, per_worker_buffer_size=1
    )


def test_a_budget_smaller_than_one_element_per_worker_still_reads_one_ahead() -> None:
    config = pick_performance_config(
        _megabytes(), ram_budget_mb=1, max_workers=2, max_buffer_size=8
    )
    assert config.multiprocessing_options.num_workers == 1  # the budget holds less than one
    assert config.read_options.prefetch_buffer_size == 1
    assert config.read_options.num_threads == 1


def test_the_config_feeds_the_pipeline_and_keeps_its_output() -> None:
    config = pick_performance_config(_megabytes(8), ram_budget_mb=64, max_workers=2,
                                     max_buffer_size=None)  # fmt: skip
    assert isinstance(config, PerformanceConfig)
    ds = MapDataset.range(8).to_iter_dataset(config.read_options)
    with iter(ds.mp_prefetch(config.multiprocessing_options)) as it:
        assert sorted(it) == list(range(8))


def test_bad_bounds_and_empty_datasets_are_refused() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        pick_performance_config(_megabytes(), ram_budget_mb=10, max_workers=0, max_buffer_size=1)
    with pytest.raises(ValueError, match="no elements"):
        pick_performance_config(
            MapDataset.range(0).to_iter_dataset(), ram_budget_mb=10, max_workers=1,
            max_buffer_size=1,
        )  # fmt: skip
