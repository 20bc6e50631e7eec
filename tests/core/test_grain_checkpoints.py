"""Checkpoints cross between Grain and chute: Grain's states restore, chute writes Grain's.

Every Grain state and every element after it below was observed from Grain 0.2.18's
iterators of the same pipelines (written here as literals; the tests never import grain).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chute import CheckpointError, IterDataset, MapDataset, MultiprocessingOptions, experimental
from chute.checkpoint import from_grain_state, to_grain_state


def _plain(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, tuple):
        return list(x)
    return x


def _restored_tail(ds: Any, grain_state: Any, count: int | None = None) -> list[Any]:
    it = iter(ds)
    it.set_state(grain_state)
    out = list(it) if count is None else [next(it) for _ in range(count)]
    it.close()
    return [_plain(x) for x in out]


def _grain_state_after(ds: Any, steps: int) -> Any:
    with iter(ds) as it:
        for _ in range(steps):
            next(it)
        return to_grain_state(it)


def _shuffle_map_filter_batch() -> Any:
    ds = MapDataset.range(20).shuffle(seed=3).map(lambda x: x * 2)
    return ds.filter(lambda x: x % 3 != 0).to_iter_dataset().batch(2)


def _iter_map_filter_batch() -> Any:
    ds = MapDataset.range(40).to_iter_dataset().map(lambda x: x + 1)
    return ds.filter(lambda x: x % 2 == 0).batch(3)


def _random_map() -> Any:
    return (
        MapDataset.range(20)
        .to_iter_dataset()
        .random_map(lambda x, rng: int(rng.integers(0, 100)), seed=3)
    )


def _map_with_index() -> Any:
    ds = MapDataset.range(20).to_iter_dataset().filter(lambda x: x % 2 == 0)
    return ds.map_with_index(lambda i, x: (i, x))


def _mix() -> Any:
    parts = [MapDataset.range(10).to_iter_dataset(), MapDataset.range(100, 110).to_iter_dataset()]
    return IterDataset.mix(parts, [0.5, 0.5])


def _limit() -> Any:
    return experimental.LimitIterDataset(MapDataset.range(20).to_iter_dataset(), 10)


def _thread_prefetch() -> Any:
    source = MapDataset.range(20).to_iter_dataset()
    return experimental.ThreadPrefetchIterDataset(source, prefetch_buffer_size=3)


# (pipeline, elements read, Grain's state there, Grain's next elements)
CHAINS = {
    "shuffle_map_filter_batch": (
        _shuffle_map_filter_batch, 3, {"next_index": 6}, [[20, 38], [26, 32], [2, 28], [4]]
    ),
    "iter_map_filter_batch": (
        _iter_map_filter_batch, 3, {"next_index": 18},
        [[20, 22, 24], [26, 28, 30], [32, 34, 36], [38, 40]],
    ),
    "random_map": (
        _random_map, 3, {"parent": {"next_index": 3}, "index_for_rng": 3}, [56, 88, 24, 73]
    ),
    "map_with_index": (
        _map_with_index, 3, {"parent": {"next_index": 5}, "counter": 3},
        [[3, 6], [4, 8], [5, 10], [6, 12]],
    ),
    "mix": (
        _mix, 3, {"parents": [{"next_index": 2}, {"next_index": 1}], "index": 3, "stop": False},
        [101, 2, 102, 3],
    ),
    "limit": (
        _limit, 3, {"parent": {"next_index": 3}, "count_elements_read": 3}, [3, 4, 5]
    ),
    "thread_prefetch": (_thread_prefetch, 3, {"next_index": 3}, [3, 4, 5]),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_grain_state_restores_to_the_elements_grain_yields(name: str) -> None:
    make, _, grain_state, expected = CHAINS[name]
    assert _restored_tail(make(), grain_state, len(expected)) == expected


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_state_written_for_grain_is_the_one_grain_writes(name: str) -> None:
    make, steps, grain_state, _ = CHAINS[name]
    assert _grain_state_after(make(), steps) == grain_state


def test_from_grain_state_gives_a_state_set_state_takes() -> None:
    ds = _iter_map_filter_batch()
    with iter(ds) as it:
        state = from_grain_state(it, {"next_index": 18})
    assert state["stage"] == "batch"
    assert _restored_tail(ds, state, 1) == [[20, 22, 24]]


def _window_shuffle() -> Any:
    source = MapDataset.range(12).to_iter_dataset()
    return experimental.WindowShuffleIterDataset(source, window_size=5, seed=1)


GRAIN_WINDOW_ORDER = [4, 0, 3, 2, 1, 8, 7, 6, 9, 5, 11, 10]


def _window_state(start: int, window: int, pos: int) -> dict[str, Any]:
    return {
        "parent_window_start_state": {"next_index": start},
        "window_index": window,
        "pos_in_window": pos,
    }


# Grain's window shuffle states after `steps` elements: mid-window, a finished window
# (Grain numbers the next window but keeps the old start), a short last window, the end.
WINDOW_STATES = [(3, (0, 0, 3)), (5, (0, 1, 5)), (11, (10, 2, 1)), (12, (10, 3, 2))]


@pytest.mark.parametrize(("steps", "grain"), WINDOW_STATES)
def test_window_shuffle_restores_from_grain_state(steps: int, grain: tuple[int, ...]) -> None:
    tail = _restored_tail(_window_shuffle(), _window_state(*grain))
    assert tail == GRAIN_WINDOW_ORDER[steps:]


@pytest.mark.parametrize(("steps", "grain"), [WINDOW_STATES[0], WINDOW_STATES[2]])
def test_window_shuffle_writes_grain_state_inside_a_window(
    steps: int, grain: tuple[int, ...]
) -> None:
    assert _grain_state_after(_window_shuffle(), steps) == _window_state(*grain)


def test_window_shuffle_writes_grain_state_of_next_window_at_a_boundary() -> None:
    # Grain writes (start 0, window 1, pos 5) here; this equivalent state restores in
    # Grain to the same elements, [8, 7, 6, 9, 5, 11, 10] (observed).
    assert _grain_state_after(_window_shuffle(), 5) == _window_state(5, 1, 0)


def _mp_pipeline(workers: int) -> Any:
    ds = MapDataset.range(20).shuffle(seed=5).to_iter_dataset()
    ds = ds.filter(lambda x: x % 3 != 0).batch(2)
    return ds.mp_prefetch(MultiprocessingOptions(num_workers=workers))


GRAIN_MP_STATE = {
    "next_index_in_cycle": 1,
    "next_index_in_datasets": 2,
    "iterators_in_use_indices": [0, 1],
    "iterators_in_use_states": [{"next_index": 4}, {"next_index": 3}],
    "exhausted": [0, 0],
    "future_states": {},
}


def test_mp_prefetch_restores_from_grain_state_of_same_worker_count() -> None:
    tail = _restored_tail(_mp_pipeline(2), GRAIN_MP_STATE, 4)
    assert tail == [[10, 16], [1, 11], [2], [17, 5]]


def test_mp_prefetch_writes_grain_state() -> None:
    assert _grain_state_after(_mp_pipeline(2), 3) == GRAIN_MP_STATE


def test_mp_prefetch_refuses_grain_state_it_cannot_re_deal() -> None:
    with pytest.raises(CheckpointError, match="saved with 2 worker"):
        _restored_tail(_mp_pipeline(3), GRAIN_MP_STATE, 1)


def _draw(x: int, rng: np.random.Generator) -> list[int]:
    return [x, int(rng.integers(0, 10**6))]


def _mp_random_map(workers: int) -> Any:
    ds = MapDataset.range(16).seed(1).to_iter_dataset().random_map(_draw)
    return ds.mp_prefetch(MultiprocessingOptions(num_workers=workers))


def _grain_random_map_worker(next_index: int) -> dict[str, Any]:
    return {"parent": {"next_index": next_index}, "index_for_rng": next_index}


# Grain 0.2.18's states of _mp_random_map(2) and (3) after 5 elements, and what it gave next
# (with any worker count, the draws of the run without workers).
GRAIN_MP_RANDOM_MAP = {
    2: {
        "next_index_in_cycle": 1,
        "next_index_in_datasets": 2,
        "iterators_in_use_indices": [0, 1],
        "iterators_in_use_states": [_grain_random_map_worker(3), _grain_random_map_worker(2)],
        "exhausted": [0, 0],
        "future_states": {},
    },
    3: {
        "next_index_in_cycle": 2,
        "next_index_in_datasets": 3,
        "iterators_in_use_indices": [0, 1, 2],
        "iterators_in_use_states": [
            _grain_random_map_worker(2),
            _grain_random_map_worker(2),
            _grain_random_map_worker(1),
        ],
        "exhausted": [0, 0, 0],
        "future_states": {},
    },
}
GRAIN_RANDOM_MAP_TAIL = [
    [5, 783068], [6, 654560], [7, 773833], [8, 756058], [9, 971389], [10, 640058],
    [11, 641467], [12, 986891], [13, 641957], [14, 223880], [15, 655055],
]  # fmt: skip


@pytest.mark.parametrize(("saved_with", "restored_into"), [(2, 2), (3, 3), (2, 3), (3, 4)])
def test_mp_random_map_restored_from_grain_goes_on_with_grains_draws(
    saved_with: int, restored_into: int
) -> None:
    tail = _restored_tail(_mp_random_map(restored_into), GRAIN_MP_RANDOM_MAP[saved_with])
    assert tail == GRAIN_RANDOM_MAP_TAIL


@pytest.mark.parametrize("workers", [2, 3])
def test_mp_random_map_writes_the_grain_state_grain_goes_on_from(workers: int) -> None:
    # Grain restored from these states gives GRAIN_RANDOM_MAP_TAIL (observed).
    assert _grain_state_after(_mp_random_map(workers), 5) == GRAIN_MP_RANDOM_MAP[workers]


def test_grain_state_of_another_pipeline_is_refused() -> None:
    with pytest.raises(CheckpointError, match="random_map|index_for_rng"):
        _restored_tail(_random_map(), {"next_index": 3}, 1)


def test_batch_stopped_after_an_error_has_no_grain_state() -> None:
    def fail_on_three(x: int) -> int:
        if x == 3:
            raise ValueError("bad record")
        return x

    it = iter(MapDataset.range(10).to_iter_dataset().map(fail_on_three).batch(2))
    next(it)
    with pytest.raises(ValueError, match="bad record"):
        next(it)
    with pytest.raises(CheckpointError, match="part way"):
        to_grain_state(it)
