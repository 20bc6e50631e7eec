"""Thread prefetch: order, exact checkpoints, errors in order, and no stray threads.

The ``multithread_prefetch`` goldens are the outputs of Grain 0.2.18's
``grain.experimental.multithread_prefetch`` for the same pipelines.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import CheckpointError, IteratorClosedError, MapDataset
from chute._core.dataset import DatasetIterator, IterDataset
from chute._stages.multithread_prefetch import multithread_prefetch
from chute._stages.thread_prefetch import ThreadPrefetchIterDataset
from chute.experimental import assert_equal_output_after_checkpoint

PREFIX = "chute-thread-prefetch-"
JOIN_TIMEOUT = 10


class BadRecord(Exception):
    pass


def _prefetch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(PREFIX)}


def _threads_of(it: Any) -> list[threading.Thread]:
    names = {f"{PREFIX}{id(x):x}" for x in [it, *getattr(it, "_parents", ())]}
    return [t for t in threading.enumerate() if t.name in names]


def _assert_all_stopped(threads: Any) -> None:
    for thread in threads:
        thread.join(timeout=JOIN_TIMEOUT)
    assert not [t.name for t in threads if t.is_alive()]


def _drain(it: Any) -> list[Any]:
    """Every outcome in order: values, and the exceptions raised in between."""
    out: list[Any] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except BadRecord as exc:
            out.append(exc)


def _fails_on(*bad: int) -> Callable[[int], int]:
    def fragile(x: int) -> int:
        if x in bad:
            raise BadRecord(f"bad {x}")
        return x

    return fragile


def _tp(ds: Any, size: int = 3) -> ThreadPrefetchIterDataset:
    return ThreadPrefetchIterDataset(ds, prefetch_buffer_size=size)


# -- ThreadPrefetchIterDataset: output and state -----------------------------------------


@pytest.mark.parametrize("size", [0, 1, 3, 100])
def test_yields_the_parent_elements_in_order(size: int) -> None:
    parent = MapDataset.range(50).seed(4).shuffle().to_iter_dataset().map(lambda x: x * 2)
    assert list(_tp(parent, size)) == list(parent)


def test_a_map_dataset_parent_is_read_in_order() -> None:
    assert list(_tp(MapDataset.range(5).map(lambda x: x + 1))) == [1, 2, 3, 4, 5]


def test_state_is_the_parent_state_after_the_last_returned_element() -> None:
    read_ahead = threading.Event()

    def watch(x: int) -> int:
        if x == 8:
            read_ahead.set()
        return x

    it = iter(_tp(MapDataset.range(100).to_iter_dataset().map(watch), size=10))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    assert read_ahead.wait(JOIN_TIMEOUT)  # the thread has read well past element 2
    state = it.get_state()
    assert state["stage"] == "thread_prefetch"
    assert state["parent"]["parent"]["next_index"] == 3
    fresh = iter(_tp(MapDataset.range(100).to_iter_dataset().map(watch), size=10))
    fresh.set_state(json.loads(json.dumps(state)))
    assert next(fresh) == 3
    it.close()
    fresh.close()


@pytest.mark.parametrize("size", [0, 2])
def test_checkpoints_restore_exactly(size: int) -> None:
    parent = MapDataset.range(40).seed(1).shuffle().filter(lambda x: x % 5).to_iter_dataset()
    assert_equal_output_after_checkpoint(_tp(parent.batch(3), size))


def test_states_move_between_buffer_sizes() -> None:
    parent = MapDataset.range(20).to_iter_dataset()
    inline = iter(_tp(parent, 0))
    for _ in range(7):
        next(inline)
    threaded = iter(_tp(parent, 4))
    threaded.set_state(inline.get_state())
    assert list(threaded) == list(range(7, 20))


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("parent=3", "takes the dict returned by get_state"),
        ({"version": 1, "stage": "batch", "parent": {}}, "different pipeline"),
        ({"version": 1, "stage": "thread_prefetch"}, r"lacks \['parent'\]"),
    ],
)
def test_bad_states_are_rejected_clearly(state: Any, message: str) -> None:
    it = iter(_tp(MapDataset.range(5)))
    with pytest.raises(CheckpointError, match=message):
        it.set_state(state)


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 4])
def test_parent_errors_surface_in_order_unchanged_and_iteration_goes_on(size: int) -> None:
    raised: dict[int, BadRecord] = {}

    def fragile(x: int) -> int:
        if x in (2, 5):
            raised[x] = BadRecord(f"bad {x}")
            raise raised[x]
        return x

    out = _drain(iter(_tp(MapDataset.range(8).to_iter_dataset().map(fragile), size)))
    assert out[:2] + out[3:5] + out[6:] == [0, 1, 3, 4, 6, 7]
    assert out[2] is raised[2] and out[5] is raised[5]
    assert any(
        "fragile) while processing element index 2" in n for n in getattr(out[2], "__notes__", [])
    )


def test_the_state_after_an_error_resumes_after_the_failed_element() -> None:
    ds = _tp(MapDataset.range(10).to_iter_dataset().map(_fails_on(3)))
    it = iter(ds)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(BadRecord):
        next(it)
    fresh = iter(ds)
    fresh.set_state(it.get_state())
    assert list(fresh) == list(it) == list(range(4, 10))


class Fatal(BaseException):
    pass


def test_a_base_exception_is_raised_and_reading_restarts_where_it_was() -> None:
    failures = [Fatal("stop")]

    def once(x: int) -> int:
        if x == 2 and failures:
            raise failures.pop()
        return x

    it = iter(_tp(MapDataset.range(6).to_iter_dataset().map(once)))
    assert [next(it), next(it)] == [0, 1]
    with pytest.raises(Fatal):
        next(it)
    assert list(it) == [2, 3, 4, 5]


# -- thread lifecycle -------------------------------------------------------------------------


def test_the_thread_is_named_and_started_lazily() -> None:
    it = iter(_tp(MapDataset.range(1000), size=2))
    assert not _threads_of(it)
    next(it)
    assert [t.name for t in _threads_of(it)] == [f"{PREFIX}{id(it):x}"]
    it.close()


def test_no_thread_without_a_buffer() -> None:
    before = _prefetch_threads()
    it = iter(_tp(MapDataset.range(10), size=0))
    next(it)
    assert _prefetch_threads() == before


def test_close_stops_a_thread_blocked_on_a_full_buffer() -> None:
    it = iter(_tp(MapDataset.range(10).repeat(), size=1))  # endless: the buffer stays full
    next(it)
    threads = _threads_of(it)
    assert threads
    it.close()
    _assert_all_stopped(threads)
    with pytest.raises(IteratorClosedError, match="was closed"):
        next(it)


def test_garbage_collection_stops_the_thread() -> None:
    it = iter(_tp(MapDataset.range(10).repeat(), size=2))
    next(it)
    threads = _threads_of(it)
    del it
    gc.collect()
    _assert_all_stopped(threads)


def test_exhaustion_stops_the_thread() -> None:
    it = iter(_tp(MapDataset.range(30)))
    next(it)
    threads = _threads_of(it)
    assert list(it) == list(range(1, 30))
    _assert_all_stopped(threads)
    with pytest.raises(StopIteration):
        next(it)


def test_set_state_stops_the_thread_and_restarts_lazily() -> None:
    it = iter(_tp(MapDataset.range(30)))
    next(it)
    threads = _threads_of(it)
    it.set_state(it.get_state())
    _assert_all_stopped(threads)
    assert next(it) == 1


def _loop(ds: Any, stop_at: int, *, fail: bool, seen: set[threading.Thread]) -> None:
    for x in ds:
        if x == stop_at:
            seen.update(_prefetch_threads())
            if fail:
                raise KeyError(x)
            break


@pytest.mark.parametrize("fail", [False, True], ids=["break", "exception"])
def test_leaving_a_for_loop_early_stops_the_thread(fail: bool) -> None:
    before, seen = _prefetch_threads(), set[threading.Thread]()
    if fail:
        with pytest.raises(KeyError):
            _loop(_tp(MapDataset.range(10).repeat()), 5, fail=True, seen=seen)
    else:
        _loop(_tp(MapDataset.range(10).repeat()), 5, fail=False, seen=seen)
    assert seen - before
    _assert_all_stopped(seen - before)


def test_close_from_another_thread_wakes_a_waiting_consumer() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(x: int) -> int:
        if x == 1:
            entered.set()
            release.wait(JOIN_TIMEOUT)
        return x

    it = iter(_tp(MapDataset.range(5).to_iter_dataset().map(slow)))
    next(it)
    outcome: list[BaseException] = []
    consumer = threading.Thread(target=lambda: outcome.append(_next_error(it)))
    consumer.start()
    assert entered.wait(JOIN_TIMEOUT)
    threads = _threads_of(it)
    closer = threading.Thread(target=it.close)
    closer.start()
    consumer.join(JOIN_TIMEOUT)  # woken by close() while the parent is still busy
    assert [type(e) for e in outcome] == [IteratorClosedError]
    release.set()
    closer.join(JOIN_TIMEOUT)
    _assert_all_stopped([closer, *threads])


def _next_error(it: Any) -> BaseException:
    try:
        next(it)
    except BaseException as exc:
        return exc
    raise AssertionError("next() returned instead of raising")


def test_threads_never_block_interpreter_exit() -> None:
    script = textwrap.dedent(
        """
        import threading
        from chute import MapDataset
        from chute._stages.thread_prefetch import ThreadPrefetchIterDataset

        never = threading.Event()

        def stuck(x):
            if x == 2:
                never.wait()
            return x

        full = iter(ThreadPrefetchIterDataset(MapDataset.range(9).repeat(), prefetch_buffer_size=1))
        busy = iter(ThreadPrefetchIterDataset(
            MapDataset.range(9).to_iter_dataset().map(stuck), prefetch_buffer_size=4))
        print(next(full), next(busy), next(busy), flush=True)
        """
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": src},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "1"]


# -- bad arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parent", "size", "error", "message"),
    [
        (MapDataset.range(3), -1, ValueError, "prefetch_buffer_size must be >= 0"),
        (MapDataset.range(3), "2", TypeError, "prefetch_buffer_size must be an int"),
        (MapDataset.range(3), True, TypeError, "prefetch_buffer_size must be an int"),
        ([1, 2, 3], 2, TypeError, "reads an IterDataset or a MapDataset"),
    ],
)
def test_bad_arguments_fail_when_built(parent: Any, size: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        ThreadPrefetchIterDataset(parent, prefetch_buffer_size=size)


# -- multithread_prefetch ------------------------------------------------------------------------


def _as_lists(values: list[Any]) -> list[Any]:
    return [v.tolist() if isinstance(v, np.ndarray) else v for v in values]


PIPELINES: dict[str, Callable[[], IterDataset[Any]]] = {
    "range10": lambda: MapDataset.range(10).to_iter_dataset(),
    "range7": lambda: MapDataset.range(7).to_iter_dataset(),
    "shuffle_map": lambda: (
        MapDataset.range(10).shuffle(seed=1).to_iter_dataset().map(lambda x: x * 10)
    ),
    "source": lambda: MapDataset.source(list("abcdefghij")).to_iter_dataset(),
    "iter_batch": lambda: MapDataset.range(11).to_iter_dataset().batch(2),
    "iter_filter": lambda: MapDataset.range(20).to_iter_dataset().filter(lambda x: x % 3 == 0),
    "strided_range": lambda: MapDataset.range(3, 20, 2).to_iter_dataset(),
    "short": lambda: MapDataset.range(2).to_iter_dataset(),
}

# (pipeline, num_threads, sequential_slice, Grain 0.2.18's output)
GRAIN_GOLDENS = [
    ("range10", 3, False, list(range(10))),
    ("range7", 4, False, list(range(7))),
    ("shuffle_map", 3, False, [50, 70, 60, 0, 40, 80, 90, 20, 10, 30]),
    ("iter_batch", 2, False, [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9]]),
    ("iter_filter", 3, False, [0, 3, 6, 9, 12, 15, 18]),
    ("short", 4, False, [0, 1]),
    ("range10", 3, True, [0, 4, 7, 1, 5, 8, 2, 6, 9, 3]),
    ("range7", 3, True, [0, 3, 5, 1, 4, 6, 2]),
    ("range7", 4, True, [0, 2, 4, 6, 1, 3, 5]),
    ("source", 3, True, list("aehbficgjd")),
    ("iter_batch", 2, True, [[0, 1], [6, 7], [2, 3], [8, 9], [4, 5], [10]]),
    ("iter_filter", 3, True, [0, 9, 15, 3, 12, 18, 6]),
    ("strided_range", 3, True, [3, 9, 15, 5, 11, 17, 7, 13, 19]),
    ("short", 4, True, [0, 1]),
    ("range7", 1, True, list(range(7))),
]


@pytest.mark.parametrize(("name", "threads", "sequential", "expected"), GRAIN_GOLDENS)
@pytest.mark.parametrize("buffer_size", [0, 2])
def test_output_order_is_grains(
    name: str, threads: int, sequential: bool, expected: list[Any], buffer_size: int
) -> None:
    ds = multithread_prefetch(PIPELINES[name](), threads, buffer_size, sequential)
    assert _as_lists(list(ds)) == expected


def test_sequential_slices_below_a_shuffle_as_grain_does() -> None:
    ds = multithread_prefetch(PIPELINES["shuffle_map"](), 3, 2, sequential_slice=True)
    assert list(ds) == [10, 50, 80, 20, 60, 90, 30, 40, 70, 0]


def test_errors_keep_the_turn_as_in_grain() -> None:
    ds = multithread_prefetch(MapDataset.range(8).to_iter_dataset().map(_fails_on(2, 5)), 2, 2)
    out = [x if isinstance(x, int) else str(x) for x in _drain(iter(ds))]
    assert out == [0, 1, "bad 2", 4, 3, 6, "bad 5", 7]


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("buffer_size", [0, 2])
def test_multithread_checkpoints_restore_exactly(sequential: bool, buffer_size: int) -> None:
    parent = MapDataset.range(23).seed(5).shuffle().to_iter_dataset().filter(lambda x: x % 4)
    assert_equal_output_after_checkpoint(multithread_prefetch(parent, 3, buffer_size, sequential))


def test_no_threads_returns_the_dataset_itself() -> None:
    ds = MapDataset.range(4).to_iter_dataset()
    assert multithread_prefetch(ds, 0, 4) is ds


def test_a_map_dataset_is_read_through_to_iter_dataset() -> None:
    assert list(multithread_prefetch(MapDataset.range(5), 2, 2)) == [0, 1, 2, 3, 4]


def test_close_stops_every_thread() -> None:
    it = iter(multithread_prefetch(MapDataset.range(100).repeat().to_iter_dataset(), 3, 1))
    next(it)
    threads = _threads_of(it)
    assert len(threads) == 3
    it.close()
    _assert_all_stopped(threads)
    with pytest.raises(IteratorClosedError):
        next(it)


def test_garbage_collection_and_exhaustion_stop_every_thread() -> None:
    it = iter(multithread_prefetch(MapDataset.range(100).repeat().to_iter_dataset(), 3, 1))
    next(it)
    threads = _threads_of(it)
    del it
    gc.collect()
    _assert_all_stopped(threads)
    it = iter(multithread_prefetch(MapDataset.range(10).to_iter_dataset(), 3, 2))
    next(it)
    threads = _threads_of(it)
    assert list(it) == list(range(1, 10))
    _assert_all_stopped(threads)


class _Counter(IterDataset[int]):
    """An IterDataset that reads no MapDataset, so it cannot be sliced."""

    def __init__(self) -> None:
        super().__init__()

    def __iter__(self) -> DatasetIterator[int]:
        return _CounterIterator()


class _CounterIterator(DatasetIterator[int]):
    def __init__(self) -> None:
        super().__init__()
        self._n = 0

    def __next__(self) -> int:
        if self._n >= 3:
            raise StopIteration
        self._n += 1
        return self._n - 1

    def get_state(self) -> dict[str, Any]:
        return self._state(n=self._n)

    def set_state(self, state: dict[str, Any]) -> None:
        self._n = self._check_state(state, "n")["n"]


def test_a_pipeline_without_a_map_dataset_runs_on_one_thread_only() -> None:
    assert list(multithread_prefetch(_Counter().map(lambda x: x + 1), 1, 2)) == [1, 2, 3]
    with pytest.raises(ValueError, match="does not read a MapDataset"):
        multithread_prefetch(_Counter().map(lambda x: x + 1), 2, 2)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((-1, 2), ValueError, "num_threads must be >= 0"),
        (("2", 2), TypeError, "num_threads must be an int"),
        ((2, -1), ValueError, "buffer_size must be >= 0"),
        ((0, -1), ValueError, "buffer_size must be >= 0"),
        ((2, 1.5), TypeError, "buffer_size must be an int"),
        ((2, 2, "yes"), TypeError, "sequential_slice must be a bool"),
    ],
)
def test_multithread_bad_arguments_fail_when_built(args: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        multithread_prefetch(MapDataset.range(4).to_iter_dataset(), *args)
    with pytest.raises(TypeError, match=r"multithread_prefetch\(\) reads an IterDataset"):
        multithread_prefetch([1, 2], 2, 2)  # type: ignore[arg-type]


_ABANDON_AT_EXIT = """
import gc, sys
import pyarrow as pa, pyarrow.parquet as pq
import chute
paths = []
for f in range(4):
    path = f"{sys.argv[1]}/part-{f}.parquet"
    pq.write_table(pa.table({"x": list(range(f * 5000, (f + 1) * 5000))}), path,
                   row_group_size=100)
    paths.append(path)
files = chute.MapDataset.source(paths).map(chute.experimental.ParquetIterDataset)
ds = chute.experimental.InterleaveIterDataset(files, cycle_length=2).batch(8)
it = iter(ds)
for _ in range(300):
    next(it)
del it  # abandoned mid-stream: its threads are still reading when the script ends
gc.collect()
print("done")
"""


def test_threads_left_reading_arrow_files_do_not_abort_the_exit(tmp_path: Any) -> None:
    pytest.importorskip("pyarrow")
    script = tmp_path / "abandon.py"
    script.write_text(_ABANDON_AT_EXIT)
    for _ in range(4):  # the abort this guards against came in about 2 runs of 5
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "done"
