"""Malformed states are refused before ``set_state()`` changes anything.

Hypothesis takes a state at a random step of a pipeline, damages it in one
place (a key removed or added, a value of another type, a negative or huge
number, another version, a nested part set to None, JSON cut short) and hands
it to an iterator at another random step.  ``set_state()`` must raise
``CheckpointError`` naming the key (or the stage), and the iterator must then
yield exactly what it would have yielded.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chute
from chute import (
    CheckpointError,
    DataLoader,
    IndexSampler,
    IterDataset,
    MapDataset,
    MultiprocessingOptions,
    NoSharding,
    ReadOptions,
)
from chute.checkpoint import allow_pipeline_change
from chute.experimental import (
    ConcatThenSplitIterDataset,
    FirstFitPackIterDataset,
    FlatMapIterDataset,
    InterleaveIterDataset,
    LimitIterDataset,
    RebatchIterDataset,
    RepeatIterDataset,
    WindowShuffleIterDataset,
    ZipIterDataset,
)

THREADS = ReadOptions(num_threads=2, prefetch_buffer_size=4, autotune=False)
Path = tuple[Any, ...]
DELETE, ADD, TRUNCATE = object(), object(), object()
# Values no chute state holds where an int, a bool or a nested state belongs.
FOR_INT = [-1, 10**30, 2**63, "7", 2.5, True, None, [], {}]
FOR_BOOL = [None, "yes", 2.5, 1, [], {}]
FOR_PART = [None, "state", 5, [], {}]
# Keys that states saved by older chute lack, and so may be missing.
OPTIONAL = {"fingerprint", "shard_options"}
OPTIONAL_IN = {"first_fit_pack": {"failed", "pulls"}, "cache": {"failed"}}


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x.tolist() if hasattr(x, "tolist") else x


def _tokens() -> IterDataset[Any]:
    return (
        MapDataset.source([np.arange(n % 5 + 1) + 10 * n for n in range(24)])
        .map(lambda a: {"t": a})
        .to_iter_dataset()
    )


def _built_on_demand() -> MapDataset[Any]:
    """Four datasets, each built by a function when the interleave opens it."""
    return MapDataset.range(4).map(lambda i: MapDataset.range(10 * i, 10 * i + 6))


def _loader(workers: int) -> Callable[[], Any]:
    def make() -> Any:
        sampler = IndexSampler(30, NoSharding(), shuffle=True, num_epochs=1, seed=3)
        operations = [chute.Batch(4)]
        return iter(DataLoader(data_source=list(range(30)), sampler=sampler,
                               operations=operations, worker_count=workers))  # fmt: skip

    return make


IN_PROCESS: dict[str, Callable[[], Any]] = {
    "chain": lambda: (
        MapDataset.range(40)
        .seed(1)
        .shuffle()
        .map(lambda x: x * 3)
        .to_iter_dataset(THREADS)
        .filter(lambda x: x % 4 != 1)
        .map_with_index(lambda i, x: (i, x))
    ),
    "batch": lambda: MapDataset.range(30).to_iter_dataset().map(lambda x: x + 1).batch(4),
    "window_repeat": lambda: RepeatIterDataset(
        WindowShuffleIterDataset(MapDataset.range(12).to_iter_dataset(), window_size=5, seed=2),
        num_epochs=2,
    ),
    "packing": lambda: FirstFitPackIterDataset(
        _tokens(), length_struct={"t": 8}, num_packing_bins=3
    ),
    "concat_split": lambda: ConcatThenSplitIterDataset(_tokens(), length_struct={"t": 6}),
    "mix": lambda: IterDataset.mix(
        [MapDataset.range(20).to_iter_dataset(), MapDataset.range(100, 120).to_iter_dataset()],
        [0.5, 0.5],
    ),
    "interleave": lambda: InterleaveIterDataset(
        [MapDataset.range(10 * i, 10 * i + 6).to_iter_dataset() for i in range(4)],
        cycle_length=2,
    ),
    "interleave_on_demand": lambda: InterleaveIterDataset(_built_on_demand(), cycle_length=2),
    "zip_limit": lambda: LimitIterDataset(
        ZipIterDataset(
            [MapDataset.range(30).to_iter_dataset(), MapDataset.range(30).to_iter_dataset()]
        ),
        count=20,
    ),
    "flat_map_rebatch": lambda: RebatchIterDataset(
        FlatMapIterDataset(MapDataset.range(12).to_iter_dataset(), lambda x: [x] * (x % 3)).batch(
            2
        ),
        batch_size=3,
    ),
}
_REFERENCES: dict[str, list[Any]] = {}


def _reference(name: str, make: Callable[[], Any]) -> list[Any]:
    if name not in _REFERENCES:
        it = make()
        _REFERENCES[name] = [_plain(x) for x in it]
        it.close()
    return _REFERENCES[name]


# -- damaging a state ------------------------------------------------------------------


def _in_a_place(path: Path) -> int:
    """How deep ``path`` goes below an interleave place (0: not in one)."""
    return len(path) - path.index("places") - 1 if "places" in path else 0


def _skipped(path: Path, *, places_checked: bool) -> bool:
    """Parts whose damage is checked elsewhere, or later on purpose."""
    if "fingerprint" in path:  # compared by tests/core/test_fingerprint.py
        return True
    # Over datasets built on demand, a place's own state is checked when its dataset
    # opens (test_a_damaged_place_state_raises_when_its_dataset_opens_and_keeps_the_place).
    return not places_checked and _in_a_place(path) > 2


def _wrong(path: Path, values: list[Any]) -> Iterator[Any]:
    """``(path, value)`` for each value; None is right for a place (closed) or its state (fresh)."""
    none_is_right = _in_a_place(path) in (1, 2)
    return ((path, value) for value in values if not (none_is_right and value is None))


def _damages(
    state: Any, path: Path = (), stages: list[str] | None = None, *, places_checked: bool = True
) -> Iterator[Any]:
    """Every (path, damage) of ``state`` that no get_state() could write."""
    stages = [*(stages or []), state.get("stage", "")] if isinstance(state, dict) else stages or []
    if _skipped(path, places_checked=places_checked):
        return
    deeper = {"places_checked": places_checked}
    if isinstance(state, dict):
        optional = OPTIONAL | OPTIONAL_IN.get(stages[-1] if stages else "", set())
        inside = not _skipped((*path, "key"), places_checked=places_checked)
        for key, value in state.items():
            if key not in optional and inside:
                yield (*path, key), DELETE
            yield from _damages(value, (*path, key), stages, **deeper)
        if inside:
            yield (*path, "unknown_key"), ADD
        if path:
            yield from _wrong(path, FOR_PART)
    elif isinstance(state, list):
        for k, value in enumerate(state):
            yield from _damages(value, (*path, k), stages, **deeper)
        if state and path[-1] not in ("failed", "pending"):
            yield path, TRUNCATE
        yield from _wrong(path, [None, "list", 5, {}])
    elif isinstance(state, bool):
        yield from ((path, bad) for bad in FOR_BOOL)
    elif isinstance(state, int):
        yield from ((path, bad) for bad in FOR_INT)
    elif isinstance(state, str) and path and path[-1] == "stage":
        yield from ((path, bad) for bad in ("another_stage", None, 3))


def _damaged(state: Any, path: Path, damage: Any) -> Any:
    state = copy.deepcopy(state)
    node = state
    for key in path[:-1]:
        node = node[key]
    if damage is DELETE:
        del node[path[-1]]
    elif damage is ADD:
        node[path[-1]] = 1
    elif damage is TRUNCATE:
        node[path[-1]] = node[path[-1]][:-1]
    else:
        node[path[-1]] = damage
    return state


def _refused_and_unchanged(
    make: Callable[[], Any], reference: list[Any], at: int, bad: Any, path: Path
) -> None:
    it = make()
    try:
        for _ in range(at):
            next(it)
        with pytest.raises(CheckpointError) as refused:
            it.set_state(bad)
        message = str(refused.value)
        named = [str(key) for key in path if isinstance(key, str)]
        assert any(key in message for key in named) or "different pipeline" in message, message
        assert [_plain(x) for x in it] == reference[at:]
    finally:
        it.close()


@pytest.mark.parametrize("name", sorted(IN_PROCESS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_state_is_refused_and_changes_nothing(name: str, data: st.DataObject) -> None:
    def make() -> Any:
        return iter(IN_PROCESS[name]())

    reference = _reference(name, make)
    saved_at = data.draw(st.integers(0, len(reference)), label="saved at")
    it = make()
    for _ in range(saved_at):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    damages = list(_damages(state, places_checked=name != "interleave_on_demand"))
    path, damage = data.draw(st.sampled_from(damages), label="damage")
    at = data.draw(st.integers(0, len(reference)), label="restored at")
    _refused_and_unchanged(make, reference, at, _damaged(state, path, damage), path)


@pytest.mark.forks
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_mp_prefetch_state_is_refused_before_a_worker_moves(data: st.DataObject) -> None:
    ds = MapDataset.range(30).to_iter_dataset().map(lambda x: x * 2).batch(3)
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    reference = _reference("mp_prefetch", lambda: iter(ds))
    saved_at = data.draw(st.integers(0, len(reference)), label="saved at")
    it = iter(ds)
    for _ in range(saved_at):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    path, damage = data.draw(st.sampled_from(list(_damages(state))), label="damage")
    at = data.draw(st.integers(0, len(reference)), label="restored at")
    _refused_and_unchanged(lambda: iter(ds), reference, at, _damaged(state, path, damage), path)


@pytest.mark.forks
@pytest.mark.parametrize("workers", [0, 2])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_data_loader_state_is_refused_before_a_worker_stops(
    workers: int, data: st.DataObject
) -> None:
    make = _loader(workers)
    reference = _reference(f"loader{workers}", make)
    saved_at = data.draw(st.integers(0, len(reference)), label="saved at")
    it = make()
    for _ in range(saved_at):
        next(it)
    saved = it.get_state()
    it.close()
    at = data.draw(st.integers(0, len(reference)), label="restored at")
    if data.draw(st.booleans(), label="cut short"):
        cut = data.draw(st.integers(0, len(saved) - 1), label="cut at")
        _refused_and_unchanged(make, reference, at, saved[:cut], ("state",))
        return
    state = json.loads(saved)
    path, damage = data.draw(st.sampled_from(list(_damages(state))), label="damage")
    bad = json.dumps(_damaged(state, path, damage)).encode()
    _refused_and_unchanged(make, reference, at, bad, path)


# -- the cases named in the issue, and what the checks leave to the replay -------------------


def test_a_huge_parent_position_is_refused_naming_stage_and_key() -> None:
    ds = MapDataset.range(30).to_iter_dataset().map(lambda x: x).batch(4)
    it = iter(ds)
    next(it)
    state = it.get_state()
    state["parent"]["parent"]["next_index"] = 10**30
    with pytest.raises(CheckpointError, match=r"to_iter_dataset.*next_index.*<= 30") as refused:
        it.set_state(state)
    assert "state['parent']['parent']['next_index']" in str(refused.value)
    assert next(it).tolist() == [4, 5, 6, 7]


def test_a_position_past_the_epochs_a_pipeline_reaches_is_refused() -> None:
    it = iter(MapDataset.range(10).repeat(3).to_iter_dataset())
    state = it.get_state()
    with pytest.raises(CheckpointError, match=r"<= 30"):
        it.set_state({**state, "next_index": 31})
    it.set_state({**state, "next_index": 30})  # the end of the third epoch
    assert list(it) == []


def test_a_batched_state_with_a_part_set_to_none_is_refused() -> None:
    it = iter(MapDataset.range(30).to_iter_dataset().batch(4))
    next(it)
    with pytest.raises(CheckpointError, match=r"NoneType.*state\['parent'\]"):
        it.set_state({**it.get_state(), "parent": None})
    assert next(it).tolist() == [4, 5, 6, 7]


def test_a_state_whose_replay_runs_out_is_refused_and_the_iterator_goes_back() -> None:
    ds = MapDataset.range(10).to_iter_dataset().batch(4)
    it = iter(ds)
    next(it)
    end = iter(ds)
    list(end)
    state = {**end.get_state(), "pulls": 3}  # three elements past the end: passes the checks
    with pytest.raises(CheckpointError, match="parent ended") as refused:
        it.set_state(state)
    assert any("back where it was" in note for note in refused.value.__notes__)
    assert [b.tolist() for b in it] == [[4, 5, 6, 7], [8, 9]]


def test_allow_pipeline_change_takes_positions_past_the_new_length() -> None:
    it = iter(MapDataset.range(100).to_iter_dataset())
    for _ in range(50):
        next(it)
    state = it.get_state()
    shorter = allow_pipeline_change(iter(MapDataset.range(20).to_iter_dataset()))
    shorter.set_state(state)
    assert list(shorter) == []
    with pytest.raises(CheckpointError, match="next_index must be an int"):
        shorter.set_state({**state, "next_index": -1})


def test_a_damaged_place_state_raises_when_its_dataset_opens_and_keeps_the_place() -> None:
    ds = InterleaveIterDataset(_built_on_demand(), cycle_length=2)
    it = iter(ds)
    assert [next(it) for _ in range(3)] == [0, 10, 1]
    state = it.get_state()
    state["places"][0][1]["next_index"] = 10**30
    fresh = iter(ds)
    fresh.set_state(state)  # a restore opens no dataset: the place's state waits for its turn
    assert next(fresh) == 11
    for _ in range(2):  # the place is kept, so nothing is skipped after the refusal
        with pytest.raises(CheckpointError, match="next_index"):
            next(fresh)


def test_a_grain_state_is_translated_then_checked() -> None:
    it = iter(MapDataset.range(10).to_iter_dataset().batch(2))
    next(it)
    with pytest.raises(CheckpointError, match="next_index"):
        it.set_state({"next_index": 10**30})
    assert next(it).tolist() == [2, 3]
    it.set_state({"next_index": 6})
    assert next(it).tolist() == [6, 7]


def test_a_damaged_place_state_of_listed_datasets_is_refused_at_once() -> None:
    ds = InterleaveIterDataset(
        [MapDataset.range(10 * i, 10 * i + 6).to_iter_dataset() for i in range(4)],
        cycle_length=2,
    )
    it = iter(ds)
    assert [next(it) for _ in range(3)] == [0, 10, 1]
    state = it.get_state()
    state["places"][0][1]["next_index"] = 10**30
    with pytest.raises(CheckpointError, match=r"state\['places'\]\[0\]\[1\]\['next_index'\]"):
        it.set_state(state)
    assert list(it) == [
        11,
        2,
        12,
        3,
        13,
        4,
        14,
        5,
        15,
        20,
        30,
        21,
        31,
        22,
        32,
        23,
        33,
        24,
        34,
        25,
        35,
    ]
