"""Stage records: exact figures however many threads add to one record at once."""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from chute import MapDataset, ReadOptions
from chute._stats.records import StageRecord
from chute.experimental import (
    DatasetOptions,
    ExecutionTrackingMode,
    WithOptionsIterDataset,
    execution_summary,
)

THREADS, CALLS = 8, 2_000
CHUNK = [[b"x"] * 50 for _ in range(100)]  # a chunk whose first element holds 50 bytes


@pytest.fixture
def switch_threads_often() -> Iterator[None]:
    """Threads switch between any two bytecodes, so a read-modify-write race shows."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _in_threads(work: Callable[[int], None], count: int = THREADS) -> None:
    start = threading.Barrier(count)

    def run(k: int) -> None:
        start.wait()
        work(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _add_chunks(record: StageRecord, k: int) -> None:
    for i in range(CALLS):
        record.add(3, 5, len(CHUNK), CHUNK, 10_000 * k + i)
        record.fill(i % 2, 4)


@pytest.mark.usefixtures("switch_threads_often")
def test_threads_adding_to_one_record_give_exact_totals() -> None:
    for _ in range(5):
        record = StageRecord()
        _in_threads(functools.partial(_add_chunks, record))
        figures = record.snapshot()
        total = THREADS * CALLS
        assert figures["calls"] == figures["fill_samples"] == total
        assert figures["elements"] == total * len(CHUNK)
        assert (figures["self_ns"], figures["inclusive_ns"]) == (3 * total, 5 * total)
        assert figures["fill_total"] == figures["empty"] == total // 2
        assert figures["capacity"] == 4 and figures["min_ns"] == figures["max_ns"] == 0
        assert figures["bytes_samples"] > 0
        assert figures["bytes_total"] == 50 * figures["bytes_samples"]  # no sample lost
        assert figures["wall_ns"] == 10_000 * (THREADS - 1) + CALLS - 1 + 5


@pytest.mark.usefixtures("switch_threads_often")
def test_one_thread_runs_each_deadline_however_many_pass_it() -> None:
    record = StageRecord()
    runs: list[int] = []
    others_done = threading.Event()
    finished = [0]
    lock = threading.Lock()

    def on_deadline(now: int) -> None:
        runs.append(now)
        others_done.wait(timeout=10)  # every other thread passes the deadline meanwhile
        record.deadline_ns = 1 << 62

    record.on_deadline, record.deadline_ns = on_deadline, 0

    def work(k: int) -> None:
        for i in range(100):
            record.add(1, 1, 1, i, 1 + i)
        with lock:
            finished[0] += 1
            if finished[0] == THREADS - 1:
                others_done.set()

    _in_threads(work)
    assert len(runs) == 1
    assert record.snapshot()["calls"] == THREADS * 100


def test_a_source_read_by_many_threads_counts_each_element_once() -> None:
    threads: set[str] = set()

    def double(x: int) -> int:
        threads.add(threading.current_thread().name)
        return x * 2

    options = ReadOptions(num_threads=4, prefetch_buffer_size=64, autotune=False)
    ds = MapDataset.range(5_000).map(double).to_iter_dataset(options)
    tracked = WithOptionsIterDataset(
        ds, DatasetOptions(execution_tracking_mode=ExecutionTrackingMode.STAGE_TIMING)
    )
    with iter(tracked) as it:
        assert list(it) == list(range(0, 10_000, 2))
        stages = {s.name: s for s in execution_summary(it).stages}
    assert len(threads) > 1  # the source and the map ran on several threads at once
    assert stages["range"].elements == stages["map(double)"].elements == 5_000
    assert stages["to_iter_dataset"].elements == 5_000
