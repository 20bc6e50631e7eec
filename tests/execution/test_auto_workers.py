"""num_workers="auto", the worker count pick_performance_config measures, and growing buffers."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import chute as grain
from chute import MultiprocessingOptions
from chute._execution import performance
from chute._execution.buffer_sizing import MAX_BUFFER, BufferSizer, grown_buffer
from chute.experimental import pick_performance_config


def slow(x: int) -> int:
    time.sleep(0.005)
    return x


def pipeline(workers: int | str, **options: Any) -> Any:
    """Filters and batches in the workers: the order depends on the worker count."""
    return (
        grain.MapDataset.range(40)
        .seed(7)
        .shuffle()
        .map(slow)
        .filter(lambda x: x % 4)
        .to_iter_dataset()
        .batch(2)
        .mp_prefetch(MultiprocessingOptions(num_workers=workers, **options))  # type: ignore[arg-type]
    )


def batches(it: Any) -> list[list[int]]:
    return [b.tolist() for b in it]


def pick(monkeypatch: pytest.MonkeyPatch, *counts: int) -> list[int]:
    """Makes "auto" pick ``counts`` in turn; returns the list of counts asked for so far."""
    asked: list[int] = []

    def picker(ds: Any, budget: Any, buffer: int) -> int:
        asked.append(counts[len(asked)])
        return asked[-1]

    monkeypatch.setattr(performance, "auto_worker_count", picker)
    return asked


@pytest.mark.usefixtures("start_method")
def test_auto_reads_the_same_order_as_the_count_it_picked() -> None:
    auto = pipeline("auto")
    with iter(auto) as it:
        got = batches(it)
        count = len(it.get_state()["workers"])
    assert count >= 1
    with iter(pipeline(count)) as it:
        assert got == batches(it)


def test_auto_measures_once_and_takes_nothing_from_the_stream() -> None:
    ds = pipeline("auto")
    first = batches(ds)
    assert first == batches(ds)  # a second epoch: the same count, no new measuring
    assert sorted(x for b in first for x in b) == [x for x in range(40) if x % 4]


def test_an_auto_checkpoint_restores_with_its_count_whatever_auto_picks_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pick(monkeypatch, 2, 3)
    with iter(pipeline(2)) as it:
        expected = batches(it)
    with iter(pipeline("auto")) as it:
        head = [next(it).tolist() for _ in range(4)]
        state = it.get_state()
    assert len(state["workers"]) == 2 and head == expected[:4]
    with iter(pipeline("auto")) as resumed:  # this one picks 3 workers
        assert len(resumed.get_state()["workers"]) == 3
        resumed.set_state(state)
        assert batches(resumed) == expected[4:]
        assert len(resumed.get_state()["workers"]) == 2


def test_an_explicit_count_checkpoint_restores_into_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    pick(monkeypatch, 1)
    with iter(pipeline(3)) as it:
        expected = batches(it)
    with iter(pipeline(3)) as it:
        for _ in range(3):
            next(it)
        state = it.get_state()
    with iter(pipeline("auto")) as resumed:
        resumed.set_state(state)
        assert batches(resumed) == expected[3:]


def test_auto_that_measures_nothing_still_starts_one_worker() -> None:
    empty = (
        grain.MapDataset.range(0)
        .to_iter_dataset()
        .mp_prefetch(MultiprocessingOptions(num_workers="auto"))
    )
    with iter(empty) as it:
        assert list(it) == []
        assert len(it.get_state()["workers"]) == 1


def test_zero_workers_still_means_no_workers() -> None:
    ds = grain.MapDataset.range(3).to_iter_dataset()
    assert ds.mp_prefetch(MultiprocessingOptions(num_workers=0)) is ds


@pytest.mark.parametrize(
    ("value", "error"),
    [("two", ValueError), ("AUTO", ValueError), (2.0, TypeError), (True, TypeError),
     (None, TypeError), (-1, ValueError)],
)  # fmt: skip
def test_bad_worker_counts_name_the_accepted_values(value: Any, error: type) -> None:
    with pytest.raises(error, match=r"num_workers must be .*'auto'"):
        MultiprocessingOptions(num_workers=value)


def test_ram_budget_is_checked_kept_out_of_the_repr_and_compared() -> None:
    with pytest.raises(ValueError, match="ram_budget_mb"):
        MultiprocessingOptions(num_workers=2, ram_budget_mb=0)
    with pytest.raises(TypeError, match="ram_budget_mb"):
        MultiprocessingOptions(num_workers=2, ram_budget_mb="1G")  # type: ignore[arg-type]
    options = MultiprocessingOptions(num_workers="auto", ram_budget_mb=512)
    assert repr(options) == (
        "MultiprocessingOptions(num_workers='auto', per_worker_buffer_size=1, "
        "enable_profiling=False)"
    )
    assert options != MultiprocessingOptions(num_workers="auto")
    assert MultiprocessingOptions(2) == MultiprocessingOptions(2, ram_budget_mb=None)


def test_the_data_loader_refuses_auto_with_a_type_error() -> None:
    source = grain.sources.RangeDataSource(0, 4, 1)
    sampler = grain.IndexSampler(4, grain.NoSharding(), num_epochs=1, shuffle=False)
    with pytest.raises(TypeError, match="worker_count"):
        grain.DataLoader(data_source=source, sampler=sampler, worker_count="auto")  # type: ignore[arg-type]


def test_pick_performance_config_wants_no_workers_for_trivial_elements() -> None:
    ds = grain.MapDataset.range(50).to_iter_dataset()
    config = pick_performance_config(ds, ram_budget_mb=64, max_workers=4, max_buffer_size=None,
                                     samples_to_check=9)  # fmt: skip
    assert config.multiprocessing_options.num_workers == 0


def test_pick_performance_config_wants_workers_for_slow_elements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ds = grain.MapDataset.range(50).map(slow).to_iter_dataset()
    config = pick_performance_config(ds, ram_budget_mb=64, max_workers=4, max_buffer_size=None)
    assert 1 <= config.multiprocessing_options.num_workers <= min(4, performance.usable_cores())
    monkeypatch.setattr(performance, "usable_cores", lambda: 1)
    config = pick_performance_config(ds, ram_budget_mb=64, max_workers=4, max_buffer_size=None)
    assert config.multiprocessing_options.num_workers == 1  # never more than the cores


def test_the_fewest_workers_rule() -> None:
    def fewest(seconds: float, size: int = 100, most: int = 64, budget: int = 2**30) -> int:
        return performance.fewest_workers(performance.Measurement(size, seconds), most, 3, budget)

    assert fewest(10e-6) == 0  # made faster than handed over
    assert fewest(1e-3, size=2**30) == 0  # a 1 GiB element costs more to hand over
    cores = performance.usable_cores()
    assert fewest(120e-6) == min(3, cores)  # ceil(120 / 50)
    assert fewest(1.0, most=2) == min(2, cores)
    assert fewest(1.0, size=2**20, budget=6 * 2**20) == min(2, cores)  # 3 MiB per worker
    assert fewest(1.0, size=2**20, budget=2**20) == 1  # a pipeline that wants workers gets one


def test_buffers_grow_only_when_often_not_ready_and_within_the_budget() -> None:
    mib = 2**20

    def grown(buffer: int, misses: int, held: int, budget_mb: int, cap: int = MAX_BUFFER) -> int:
        return grown_buffer(buffer, misses=misses, turns=32, element_bytes=mib, held=held,
                            budget_bytes=budget_mb * mib, cap=cap)  # fmt: skip

    assert grown(1, misses=8, held=4, budget_mb=1024) == 2  # 1 in 4 turns: often
    assert grown(1, misses=7, held=4, budget_mb=1024) == 1  # less often: as it is
    assert grown(4, misses=32, held=10, budget_mb=1024) == 8  # doubles ...
    assert grown(12, misses=32, held=30, budget_mb=1024) == MAX_BUFFER  # ... up to the cap
    assert grown(MAX_BUFFER, misses=32, held=40, budget_mb=1024) == MAX_BUFFER
    assert grown(4, misses=32, held=10, budget_mb=12) == 6  # only what the budget holds
    assert grown(4, misses=32, held=10, budget_mb=10) == 4
    assert grown(4, misses=32, held=10, budget_mb=8) == 4  # over budget: never shrinks
    assert grown(20, misses=32, held=42, budget_mb=1024, cap=20) == 20  # the user's size stays


class _FakeWorker:
    def __init__(self, buffer: int) -> None:
        self.buffer_size = buffer

    def grant(self, extra: int) -> None:
        self.buffer_size += extra


def test_the_sizer_decides_every_few_turns_and_grants_within_the_budget() -> None:
    workers = [_FakeWorker(1), _FakeWorker(1)]
    element = np.zeros(2**20, np.uint8)
    sizer = BufferSizer(2, budget_bytes=8 * 2**20, least=1)
    due = [sizer.turn(0, ready=False) for _ in range(32)]
    assert due == [False] * 31 + [True]
    sizer.decide(0, element, workers)
    assert [w.buffer_size for w in workers] == [2, 1]
    for _ in range(3):  # grows 2 -> 4 -> 5: a doubling at most, what 8 MiB of credits hold
        for _ in range(32):
            sizer.turn(0, ready=False)
        sizer.decide(0, element, workers)
    assert [w.buffer_size for w in workers] == [5, 1]  # 6 + 2 credits of 1 MiB = 8 MiB: full
    for _ in range(32):
        sizer.turn(1, ready=True)
    sizer.decide(1, element, workers)
    assert workers[1].buffer_size == 1


def test_buffers_never_grow_past_a_small_budget_and_the_order_stays() -> None:
    def big(x: int) -> np.ndarray:
        time.sleep(0.001)
        return np.full(1 << 19, x, np.uint8)  # 0.5 MiB: 2 workers x 2 credits fill 2 MiB

    def ds(**options: Any) -> Any:
        return (
            grain.MapDataset.range(80)
            .map(big)
            .to_iter_dataset()
            .mp_prefetch(MultiprocessingOptions(num_workers=2, **options))
        )

    with iter(ds(ram_budget_mb=2)) as it:
        got = [int(x[0]) for x in it]
        assert [w.buffer_size for w in it._parents] == [1, 1]
    assert got == list(range(80))
    with iter(ds(ram_budget_mb=1024, per_worker_buffer_size=2)) as it:
        assert [int(x[0]) for x in it] == list(range(80))
        assert all(2 <= w.buffer_size <= MAX_BUFFER for w in it._parents)
