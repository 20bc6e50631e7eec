"""InterleaveIterDataset: Grain's order, exact checkpoints, errors, and no stray threads.

Every golden output below was observed from Grain 0.2.18's
``grain.experimental.InterleaveIterDataset`` over the same datasets (dataset
``k`` of length ``n`` is ``range(100 * k, 100 * k + n)``).
"""

from __future__ import annotations

import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chute import (
    CheckpointError,
    IteratorClosedError,
    MapDataset,
    MultiprocessingOptions,
    ReadOptions,
)
from chute._core.dataset import IterDataset
from chute._sources.parquet.iter import ParquetIterDataset
from chute._stages.interleave import InterleaveIterDataset
from chute.experimental import RepeatIterDataset, assert_equal_output_after_checkpoint

JOIN_TIMEOUT = 10
INLINE = ReadOptions(
    num_threads=0, prefetch_buffer_size=0
)  # sub-datasets that start no threads of their own

# (lengths, cycle_length, Grain 0.2.18's output)
GRAIN_ORDERS = [
    ([3, 3, 3], 2, [0, 100, 1, 101, 2, 102, 200, 201, 202]),
    ([3, 3, 3], 3, [0, 100, 200, 1, 101, 201, 2, 102, 202]),
    ([3, 3, 3], 5, [0, 100, 200, 1, 101, 201, 2, 102, 202]),
    ([1, 4, 2, 5], 2, [0, 100, 101, 200, 102, 201, 103, 300, 301, 302, 303, 304]),
    ([0, 2, 0, 3], 2, [100, 101, 300, 301, 302]),
    ([5, 1, 1, 1, 1], 2, [0, 100, 1, 2, 200, 3, 4, 300, 400]),
    ([2, 2, 2, 2], 1, [0, 1, 100, 101, 200, 201, 300, 301]),
    ([0, 0, 0], 2, []),
    ([4, 0, 1, 3, 2], 3, [0, 200, 1, 300, 2, 301, 400, 3, 302, 401]),
    ([6, 2, 4, 1, 3], 3, [0, 100, 200, 1, 101, 201, 2, 202, 3, 300, 203, 4, 5, 400, 401, 402]),
    ([1, 1, 1, 1, 1], 3, [0, 100, 200, 300, 400]),
    ([3, 0, 3], 2, [0, 1, 200, 2, 201, 202]),
    (
        [2, 5, 1, 0, 4, 2, 3],
        3,
        [0, 100, 200, 1, 101, 102, 400, 103, 500, 401, 104, 501, 402, 403, 600, 601, 602],
    ),
]

# How the interleave runs: inline, Grain's defaults, and many threads.
MODES = {
    "inline": {"num_make_iter_threads": 0, "iter_buffer_size": 0},
    "defaults": {},
    "threads": {"num_make_iter_threads": 2, "make_iter_buffer_size": 2, "iter_buffer_size": 3},
}


class BadRecord(Exception):
    pass


def _map_datasets(lengths: list[int]) -> list[MapDataset[int]]:
    return [MapDataset.range(100 * k, 100 * k + n) for k, n in enumerate(lengths)]


def _iter_datasets(lengths: list[int]) -> list[IterDataset[int]]:
    return [ds.to_iter_dataset(INLINE) for ds in _map_datasets(lengths)]


def _ours() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("chute-")}


def _join(thread: threading.Thread) -> None:
    """Joins ``thread``, which a make-iter thread may still be starting."""
    deadline = time.monotonic() + JOIN_TIMEOUT
    while True:
        try:
            thread.join(timeout=JOIN_TIMEOUT)
            return
        except RuntimeError:  # "cannot join thread before it is started": not yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)


def _drain(it: Any) -> list[Any]:
    """Every outcome in order: values, and the exceptions raised in between."""
    out: list[Any] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except (BadRecord, TypeError) as exc:
            out.append(exc)


# -- order --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize(("lengths", "cycle", "expected"), GRAIN_ORDERS)
def test_reads_datasets_in_grains_order(
    lengths: list[int], cycle: int, expected: list[int], mode: str
) -> None:
    for datasets in (_iter_datasets(lengths), _map_datasets(lengths)):
        it = iter(InterleaveIterDataset(datasets, cycle_length=cycle, **MODES[mode]))
        assert list(it) == expected
        it.close()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_map_dataset_of_datasets_reads_like_the_sequence(mode: str) -> None:
    lengths, cycle, expected = GRAIN_ORDERS[-1]

    def as_map(i: int, n: int) -> MapDataset[int]:
        return MapDataset.range(100 * i, 100 * i + n)

    def as_iter(i: int, n: int) -> IterDataset[int]:
        return as_map(i, n).to_iter_dataset(INLINE)

    for make in (as_map, as_iter):
        datasets = MapDataset.source(lengths).map_with_index(make)
        ds = InterleaveIterDataset(datasets, cycle_length=cycle, **MODES[mode])
        assert list(ds) == expected


@pytest.mark.parametrize(
    ("cycle", "expected"),
    [(1, [0, 1, 20, 21, 30, 31, 40, 41]), (2, [0, 20, 1, 21, 30, 40, 31, 41])],
)
def test_filtered_holes_are_skipped_as_in_grain(cycle: int, expected: list[int]) -> None:
    datasets = (
        MapDataset.source([0, 1, 2, 3, 4])
        .filter(lambda i: i != 1)
        .map(lambda i: MapDataset.range(10 * i, 10 * i + 2))
    )
    assert list(InterleaveIterDataset(datasets, cycle_length=cycle)) == expected


def test_each_iterator_starts_over_and_repeat_rewinds_it() -> None:
    ds = InterleaveIterDataset(_map_datasets([3, 5]), cycle_length=2)
    once = [0, 100, 1, 101, 2, 102, 103, 104]  # Grain's output
    assert list(ds) == list(ds) == once
    assert list(RepeatIterDataset(ds, 2)) == once + once


def test_an_empty_map_dataset_of_datasets_yields_nothing() -> None:
    assert list(InterleaveIterDataset(MapDataset.source([]), cycle_length=2)) == []


def test_mp_prefetch_shares_the_datasets_out_among_workers_as_grain_does() -> None:
    # Grain: worker w reads datasets w, w + 2, ... interleaved; the workers in turn.
    expected = [0, 100, 200, 300, 1, 101, 201, 2, 202, 203, 400, 401, 402]
    lengths = [3, 2, 4, 1, 3]
    options = MultiprocessingOptions(num_workers=2)
    for datasets in (_iter_datasets(lengths), _map_datasets(lengths)):
        ds = InterleaveIterDataset(datasets, cycle_length=2).mp_prefetch(options)
        it = iter(ds)
        assert list(it) == expected
        it.close()


# -- checkpoints ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize(("lengths", "cycle"), [([2, 5, 1, 0, 4, 2, 3], 3), ([4, 1, 3], 1)])
def test_checkpoints_restore_exactly(lengths: list[int], cycle: int, mode: str) -> None:
    for datasets in (_iter_datasets(lengths), _map_datasets(lengths)):
        ds = InterleaveIterDataset(datasets, cycle_length=cycle, **MODES[mode])
        assert_equal_output_after_checkpoint(ds)


def test_checkpoints_restore_through_stateful_sub_datasets() -> None:
    datasets = [
        MapDataset.range(100 * k, 100 * k + 7).seed(k).shuffle().to_iter_dataset().batch(2)
        for k in range(4)
    ]
    ds = InterleaveIterDataset(datasets, cycle_length=2).map(lambda b: b.tolist())
    assert_equal_output_after_checkpoint(ds)


def test_state_holds_the_turn_the_next_dataset_and_each_place() -> None:
    ds = InterleaveIterDataset(_iter_datasets([2, 5, 1, 0, 4]), cycle_length=3)
    it = iter(ds)
    assert it.get_state()["places"] == ["waiting", "waiting", "waiting"]
    assert [next(it) for _ in range(6)] == [0, 100, 200, 1, 101, 102]
    state = it.get_state()
    assert (state["stage"], state["turn"], state["next_dataset"]) == ("interleave", 2, 5)
    indices = [place if place is None else place[0] for place in state["places"]]
    assert indices == [4, 1, 3]  # 0 and 2 ended; 3 (empty) and 4 wait for their first turn
    assert state["places"][1][1]["next_index"] == 3
    fresh = iter(ds)
    fresh.set_state(json.loads(json.dumps(state)))
    assert list(fresh) == list(it) == [400, 103, 401, 104, 402, 403]


def test_a_restore_opens_only_the_datasets_in_the_cycle() -> None:
    opened: list[int] = []

    def make(i: int, n: int) -> MapDataset[int]:
        opened.append(i)
        return MapDataset.range(100 * i, 100 * i + n)

    datasets = MapDataset.source([3, 3, 3, 3, 3, 3]).map_with_index(make)
    ds = InterleaveIterDataset(datasets, cycle_length=2, num_make_iter_threads=0)
    it = iter(ds)
    assert [next(it) for _ in range(7)] == [0, 100, 1, 101, 2, 102, 200]
    state = it.get_state()
    assert [place[0] for place in state["places"]] == [2, 3]
    opened.clear()
    fresh = iter(ds)
    fresh.set_state(state)
    assert opened == []
    assert [next(fresh), next(fresh), next(fresh)] == [300, 201, 301]
    assert opened == [3, 2]  # each when its turn comes, at its saved position
    assert list(fresh) == [202, 302, 400, 500, 401, 501, 402, 502]


def test_states_move_between_thread_settings() -> None:
    lengths = [4, 2, 6, 3]
    inline = iter(InterleaveIterDataset(_iter_datasets(lengths), cycle_length=2, **MODES["inline"]))
    for _ in range(5):
        next(inline)
    threaded = iter(
        InterleaveIterDataset(_iter_datasets(lengths), cycle_length=2, **MODES["threads"])
    )
    threaded.set_state(inline.get_state())
    assert list(threaded) == list(inline)
    threaded.close()


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"version": 1, "stage": "cache", "position": 0}, "different pipeline"),
        ({"version": 1, "stage": "interleave", "turn": 0}, "lacks"),
        (
            {"version": 1, "stage": "interleave", "turn": 0, "next_dataset": 0, "places": []},
            "reads 0 datasets at once",
        ),
        (
            {
                "version": 1,
                "stage": "interleave",
                "turn": 5,
                "next_dataset": 2,
                "places": [None, None],
            },
            "bad position",
        ),
        (
            {
                "version": 1,
                "stage": "interleave",
                "turn": 0,
                "next_dataset": 1,
                "places": [[3, {}], None],
            },
            "bad place",
        ),
    ],
)
def test_bad_states_are_rejected_clearly(state: dict[str, Any], message: str) -> None:
    it = iter(InterleaveIterDataset(_map_datasets([2, 2, 2]), cycle_length=2))
    with pytest.raises(CheckpointError, match=message):
        it.set_state(state)


# -- errors ----------------------------------------------------------------------------


def _fails_on(*bad: int) -> Any:
    def fragile(x: int) -> int:
        if x in bad:
            raise BadRecord(f"bad {x}")
        return x

    return fragile


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_dataset_error_keeps_its_note_and_the_next_call_reads_that_dataset_on(mode: str) -> None:
    datasets = [
        MapDataset.range(100 * k, 100 * k + 3).map(_fails_on(1, 101)).to_iter_dataset(INLINE)
        for k in range(2)
    ]
    out = _drain(iter(InterleaveIterDataset(datasets, cycle_length=2, **MODES[mode])))
    # Grain 0.2.18 gives the same up to 102, then breaks down with an IndexError.
    assert [x if isinstance(x, int) else str(x) for x in out] == [
        0, 100, "bad 1", 2, "bad 101", 102
    ]  # fmt: skip
    assert any("fragile) while processing element index 1" in n for n in out[2].__notes__)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_state_right_after_a_dataset_error_resumes_after_the_failed_element(mode: str) -> None:
    datasets = [
        MapDataset.range(100 * k, 100 * k + 4).map(_fails_on(101)).to_iter_dataset(INLINE)
        for k in range(3)
    ]
    ds = InterleaveIterDataset(datasets, cycle_length=2, **MODES[mode])
    it = iter(ds)
    assert [next(it), next(it), next(it)] == [0, 100, 1]
    with pytest.raises(BadRecord):
        next(it)
    fresh = iter(ds)
    fresh.set_state(json.loads(json.dumps(it.get_state())))
    assert list(fresh) == list(it) == [102, 2, 103, 3, 200, 201, 202, 203]
    fresh.close()
    it.close()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_dataset_that_fails_to_open_raises_once_and_is_skipped(mode: str) -> None:
    def make(i: int) -> MapDataset[int]:
        if i == 1:
            raise BadRecord("no such file")
        return MapDataset.range(10 * i, 10 * i + 2)

    datasets = MapDataset.source([0, 1, 2, 3, 4]).map(make)
    it = iter(InterleaveIterDataset(datasets, cycle_length=2, **MODES[mode]))
    out = _drain(it)
    assert [x for x in out if isinstance(x, int)] == [0, 20, 1, 21, 30, 40, 31, 41]
    (error,) = [x for x in out if not isinstance(x, int)]
    assert str(error) == "no such file"
    assert any("opening dataset 1" in note for note in error.__notes__)


def test_the_state_after_an_open_error_resumes_there() -> None:
    def make(i: int) -> MapDataset[int]:
        if i == 2:
            raise BadRecord("broken")
        return MapDataset.range(10 * i, 10 * i + 2)

    ds = InterleaveIterDataset(MapDataset.source(range(5)).map(make), cycle_length=2)
    it = iter(ds)
    assert [next(it), next(it), next(it), next(it)] == [0, 10, 1, 11]
    with pytest.raises(BadRecord):
        next(it)
    fresh = iter(ds)
    fresh.set_state(it.get_state())
    assert list(fresh) == list(it) == [30, 40, 31, 41]


def test_an_element_that_is_not_a_dataset_raises_a_type_error_naming_it() -> None:
    ds = InterleaveIterDataset(MapDataset.source([MapDataset.range(2), 7]), cycle_length=2)
    out = _drain(iter(ds))
    assert out[1:] == [0, 1]
    assert isinstance(out[0], TypeError) and "element 1 of datasets" in str(out[0])


# -- threads -----------------------------------------------------------------------------


def test_upcoming_datasets_are_opened_on_the_make_iter_threads() -> None:
    where: list[str] = []

    def make(n: int) -> MapDataset[int]:
        where.append(threading.current_thread().name)
        return MapDataset.range(n)

    datasets = MapDataset.source([1, 2, 3, 4]).map(make)
    assert sorted(InterleaveIterDataset(datasets, cycle_length=2)) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 3]
    assert len(where) == 4 and all(name.startswith("chute-interleave-") for name in where)
    where.clear()
    assert len(list(InterleaveIterDataset(datasets, cycle_length=2, num_make_iter_threads=0))) == 10
    assert where == [threading.current_thread().name] * 4


@pytest.mark.parametrize("mode", ["defaults", "threads"])
def test_close_stops_and_joins_every_thread(mode: str) -> None:
    before = set(threading.enumerate())
    it = iter(InterleaveIterDataset(_iter_datasets([50] * 6), cycle_length=3, **MODES[mode]))
    assert [next(it) for _ in range(4)] == [0, 100, 200, 1]
    assert _ours() - before  # read-ahead and make-iter threads are running
    it.close()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(IteratorClosedError):
        next(it)


def test_set_state_stops_the_threads_of_the_old_position() -> None:
    before = set(threading.enumerate())
    it = iter(InterleaveIterDataset(_iter_datasets([50] * 6), cycle_length=3, **MODES["threads"]))
    start = it.get_state()
    for _ in range(5):
        next(it)
    it.set_state(start)
    assert set(threading.enumerate()) - before == set()
    assert [next(it) for _ in range(4)] == [0, 100, 200, 1]
    it.close()
    assert set(threading.enumerate()) - before == set()


def test_the_end_of_the_data_stops_every_thread() -> None:
    before = set(threading.enumerate())
    it = iter(InterleaveIterDataset(_iter_datasets([3, 1, 2]), cycle_length=2, **MODES["threads"]))
    assert list(it) == [0, 100, 1, 2, 200, 201]
    assert set(threading.enumerate()) - before == set()


def test_garbage_collection_stops_the_threads() -> None:
    before = _ours()
    it = iter(InterleaveIterDataset(_iter_datasets([50] * 6), cycle_length=3, **MODES["threads"]))
    next(it)
    started = _ours() - before
    assert started
    del it
    gc.collect()
    for thread in started:
        _join(thread)
    assert not [t.name for t in started if t.is_alive()]


# -- Parquet files --------------------------------------------------------------------------


@pytest.fixture
def parquet_paths(tmp_path: Path) -> list[str]:
    paths = []
    for k, rows in enumerate([3, 5, 0, 2, 4]):
        path = str(tmp_path / f"part-{k}.parquet")
        ids = pa.array([100 * k + i for i in range(rows)], pa.int64())
        pq.write_table(pa.table({"id": ids}), path, row_group_size=2)
        paths.append(path)
    return paths


@pytest.mark.parametrize(
    ("cycle", "expected"),
    [  # Grain's order for datasets of the same lengths
        (2, [0, 100, 1, 101, 2, 102, 103, 104, 300, 301, 400, 401, 402, 403]),
        (3, [0, 100, 1, 101, 300, 2, 102, 301, 103, 400, 104, 401, 402, 403]),
    ],
)
def test_interleaves_parquet_files(
    parquet_paths: list[str], cycle: int, expected: list[int]
) -> None:
    files = MapDataset.source(parquet_paths).map(ParquetIterDataset)
    ds = InterleaveIterDataset(files, cycle_length=cycle).map(lambda row: int(row["id"]))
    assert list(ds) == expected
    assert_equal_output_after_checkpoint(ds)


# -- bad arguments -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cycle_length": 0}, ValueError, "cycle_length must be >= 1"),
        ({"cycle_length": -1}, ValueError, "cycle_length must be >= 1"),
        ({"cycle_length": 1.5}, TypeError, "does not autotune"),
        ({"cycle_length": None}, TypeError, "cycle_length must be an int"),
        ({"cycle_length": "2"}, TypeError, "cycle_length must be an int"),
        ({"cycle_length": True}, TypeError, "cycle_length must be an int"),
        ({"cycle_length": 2, "num_make_iter_threads": -1}, ValueError, "num_make_iter_threads"),
        ({"cycle_length": 2, "make_iter_buffer_size": -1}, ValueError, "make_iter_buffer_size"),
        ({"cycle_length": 2, "iter_buffer_size": -1}, ValueError, "iter_buffer_size"),
        ({"cycle_length": 2, "iter_buffer_size": 1.0}, TypeError, "iter_buffer_size"),
    ],
)
def test_bad_arguments_are_rejected_when_built(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        InterleaveIterDataset(_map_datasets([2]), **kwargs)


@pytest.mark.parametrize(
    ("datasets", "error", "message"),
    [
        ([], ValueError, "datasets is empty"),
        ([1, 2], TypeError, r"datasets\[0\] must be an IterDataset or a MapDataset"),
        ([MapDataset.range(2), [1]], TypeError, r"datasets\[1\]"),
        ("files", TypeError, "must be a sequence of datasets"),
        (MapDataset.range(3).to_iter_dataset(), TypeError, "must be a sequence of datasets"),
        (7, TypeError, "must be a sequence of datasets"),
    ],
)
def test_bad_datasets_are_rejected_when_built(
    datasets: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        InterleaveIterDataset(datasets, cycle_length=2)


def test_a_numpy_integer_cycle_length_is_accepted() -> None:
    ds = InterleaveIterDataset(_map_datasets([2, 2]), cycle_length=np.int64(2))
    assert list(ds) == [0, 100, 1, 101]


def test_cycle_length_is_required() -> None:
    with pytest.raises(TypeError, match="cycle_length"):
        InterleaveIterDataset(_map_datasets([2]))  # type: ignore[call-arg]
