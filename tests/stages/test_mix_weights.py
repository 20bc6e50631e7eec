"""Mixture weights that change during a run: Grain's order, schedules, live changes.

Golden lists marked "Grain's output" were produced by Grain 0.2.18 running the
same pipelines (``IterDataset.mix`` with fixed weights, and a state restored
into a mix whose weights changed: Grain goes on with the new weights' pattern
from the saved position, each dataset from its own cursor).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from chute import IterDataset, MapDataset
from chute.experimental import WeightSchedule, set_mix_weights

_M = 10**6  # dataset k of the long runs holds k * _M + (0, 1, 2, ...)


def _iter(start: int, stop: int) -> IterDataset[int]:
    return MapDataset.range(start, stop).to_iter_dataset()


def _take(it: Any, n: int) -> list[Any]:
    """Up to ``n`` elements of ``it``, then ``"stop"`` if it ran out first."""
    out: list[Any] = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            out.append("stop")
            break
    return out


def _saved(it: Any) -> Any:
    """``it``'s state as it comes back from a JSON checkpoint file."""
    return json.loads(json.dumps(it.get_state()))


# --- 1. Grain's behaviour -----------------------------------------------------------


@pytest.mark.parametrize(
    ("sources", "weights", "expected"),
    [
        ([(0, 5), (100, 110)], None, [0, 100, 1, 101, 2, 102, 3, 103, 4, 104]),
        (
            [(0, 5), (100, 110)],
            [1, 2],
            [0, 100, 101, 1, 102, 103, 2, 104, 105, 3, 106, 107, 4, 108, 109],
        ),
        (
            [(0, 5), (100, 110)],
            [0.2, 0.8],
            [0, 100, 101, 102, 103, 1, 104, 105, 106, 107, 2, 108, 109],
        ),
        ([(0, 5), (100, 110)], [2, 1], [0, 1, 100, 2, 3, 101, 4]),
        (
            [(0, 10), (100, 110), (200, 210)],
            [0.5, 0.3, 0.2],
            [0, 100, 1, 101, 2, 200, 3, 102, 4, 201, 5, 103, 6, 104, 7, 202, 8, 105, 9, 203],
        ),
        ([(0, 5), (7, 10)], None, [0, 7, 1, 8, 2, 9, 3]),
        ([(0, 3), (100, 102)], [1, 1], [0, 100, 1, 101, 2]),
    ],
)
def test_fixed_weights_give_grains_elements(
    sources: list[tuple[int, int]], weights: Any, expected: list[int]
) -> None:
    assert list(IterDataset.mix([_iter(a, b) for a, b in sources], weights)) == expected


def test_fixed_weights_give_grains_states() -> None:
    it = iter(IterDataset.mix([_iter(0, 5), _iter(100, 110)], [1, 2]))
    # Grain's output: (index, each dataset's next_index) after 0, 1, 2, 3, 4 elements.
    expected = [(0, [0, 0]), (1, [1, 0]), (2, [1, 1]), (3, [1, 2]), (4, [2, 2])]
    for n, (index, cursors) in enumerate(expected):
        if n:
            next(it)
        state = it.get_state()
        assert (state["index"], state["stop"]) == (index, False)
        assert [p["next_index"] for p in state["parents"]] == cursors
        assert "weights" not in state  # Grain's keys only, while no weights were set live
    assert list(it)[-1] == 109
    state = it.get_state()  # Grain's output: 15 elements, the 16th turn found dataset 0 empty
    assert (state["index"], state["stop"]) == (16, True)
    assert [p["next_index"] for p in state["parents"]] == [5, 10]
    assert _take(it, 2) == ["stop"]


_TWO = [(0, 100), (100, 200)]
# Grain's tail for three datasets restored from [0.5, 0.3, 0.2] into [0.2, 0.3, 0.5] at 10:
_TAIL_3 = [5, 103, 202, 104, 203, 6, 204, 105, 205, 206]
_TAIL_3 += [7, 106, 207, 107, 208, 8, 209, 108, 210, 211]
_THREE = [(0, 100), (100, 200), (200, 300)]


@pytest.mark.parametrize(
    ("sources", "old", "k", "new", "head", "tail"),
    [
        (
            _TWO,
            [1, 1],
            4,
            [1, 3],
            [0, 100, 1, 101],
            [2, 102, 103, 104, 3, 105, 106, 107, 4, 108, 109, 110, 5, 111, 112, 113],
        ),
        (
            _TWO,
            [1, 1],
            5,
            [1, 3],
            [0, 100, 1, 101, 2],
            [102, 103, 104, 3, 105, 106, 107, 4, 108, 109, 110, 5, 111, 112, 113, 6],
        ),
        (
            _TWO,
            [1, 2],
            3,
            [2, 1],
            [0, 100, 101],
            [1, 2, 102, 3, 4, 103, 5, 6, 104, 7, 8, 105, 9, 10, 106],
        ),
        (
            _TWO,
            [0.2, 0.8],
            7,
            [0.8, 0.2],
            [0, 100, 101, 102, 103, 1, 104],
            [2, 3, 105, 4, 5, 6, 7, 106, 8, 9, 10, 11, 107, 12, 13],
        ),
        (
            _TWO,
            [1, 2],
            6,
            [1, 2],
            [0, 100, 101, 1, 102, 103],
            [2, 104, 105, 3, 106, 107, 4, 108, 109],
        ),
        (
            _THREE,
            [0.5, 0.3, 0.2],
            10,
            [0.2, 0.3, 0.5],
            [0, 100, 1, 101, 2, 200, 3, 102, 4, 201],
            _TAIL_3,
        ),
        (
            _THREE,
            [1, 1, 1],
            6,
            [1, 0.001, 1],
            [0, 100, 200, 1, 101, 201],
            [2, 202, 3, 203, 4, 204, 5, 205, 6, 206, 7, 207],
        ),
    ],
)
def test_a_state_restored_into_other_weights_goes_on_as_grain(
    sources: list[tuple[int, int]],
    old: list[float],
    k: int,
    new: list[float],
    head: list[int],
    tail: list[int],
) -> None:
    it = iter(IterDataset.mix([_iter(a, b) for a, b in sources], old))
    assert _take(it, k) == head  # Grain's output
    state = _saved(it)
    resumed = iter(IterDataset.mix([_iter(a, b) for a, b in sources], new))
    resumed.set_state(state)
    assert _take(resumed, len(tail)) == tail  # Grain's output: new pattern from position k


def _named(*names: str) -> dict[str, IterDataset[int]]:
    ranges = {"ds1": (0, 10), "ds2": (10, 20), "ds3": (20, 30), "ds4": (30, 40)}
    return {name: _iter(*ranges[name]) for name in names}


_A = {"ds1": 0.2, "ds2": 0.3, "ds3": 0.5}


@pytest.mark.parametrize(
    ("before", "weights", "head", "after", "new", "tail"),
    [
        (
            ("ds1", "ds2", "ds3"),
            _A,
            [0, 10, 20, 11, 21, 1, 22, 12, 23, 24],
            ("ds1", "ds2", "ds3"),
            _A,
            [2, 13, 25, 14, 26, 3, 27, 15, 28, 29, 4, 16, "stop"],
        ),
        (
            ("ds1", "ds2", "ds3"),
            _A,
            [0, 10, 20, 11, 21, 1, 22, 12, 23, 24],
            ("ds1", "ds2", "ds3"),
            {"ds1": 0.5, "ds2": 0.3, "ds3": 0.2},
            [2, 13, 3, 14, 4, 25, 5, 15, 6, 26, 7, 16, 8, 17, 9, 27, "stop"],
        ),
        (
            ("ds1", "ds2", "ds3"),
            _A,
            [0, 10, 20, 11, 21, 1, 22, 12, 23, 24],
            ("ds1", "ds2", "ds3"),
            {"ds1": 1, "ds2": 1, "ds3": 1},
            [13, 25, 2, 14, 26, 3, 15, 27, 4, 16, 28, 5, 17, 29, 6, 18, "stop"],
        ),
        (
            ("ds1", "ds2", "ds3"),
            _A,
            [0, 10, 20, 11, 21, 1, 22, 12, 23, 24],
            ("ds1", "ds2"),
            {"ds1": 0.2, "ds2": 0.3},
            [2, 13, 3, 14, 15, 4, 16, 5, 17, 18, 6, 19, 7, "stop"],
        ),
        (
            ("ds1", "ds2"),
            None,
            [0, 10, 1, 11, 2, 12, 3, 13, 4, 14],
            ("ds1", "ds2", "ds3"),
            None,
            [15, 20, 5, 16, 21, 6, 17, 22, 7, 18, 23, 8, 19, 24, 9, "stop"],
        ),
        (
            ("ds1", "ds2", "ds3"),
            None,
            [0, 10, 20, 1, 11, 21, 2, 12, 22, 3],
            ("ds2", "ds4"),
            {"ds2": 0.6, "ds4": 0.4},
            [13, 14, 30, 15, 31, 16, 17, 32, 18, 33, 19, "stop"],
        ),
    ],
)
def test_named_datasets_restore_by_name_into_other_weights_as_grain(
    before: tuple[str, ...],
    weights: Any,
    head: list[int],
    after: tuple[str, ...],
    new: Any,
    tail: list[int],
) -> None:
    it = iter(IterDataset.mix(_named(*before), weights))
    assert _take(it, 10) == head  # Grain's output
    state = _saved(it)
    resumed = iter(IterDataset.mix(_named(*after), new))
    resumed.set_state(state)
    assert _take(resumed, len(tail) + 3) == tail  # Grain's output


@pytest.mark.parametrize(
    ("names", "weights", "tail"),
    [
        (("a", "b"), None, [2, 102, 3, 103, 4, 104, 5, 105, 6, 106, 7, 107]),
        (("a", "c"), {"a": 1, "c": 3}, [202, 203, 2, 204, 205, 206, 3, 207, 208, 209, 4, 210]),
        (("x", "y"), None, [0, 200, 1, 201, 2, 202, 3, 203, 4, 204, 5, 205]),  # both anew
    ],
)
def test_a_named_state_restores_into_fewer_or_renamed_datasets_as_grain(
    names: tuple[str, ...], weights: Any, tail: list[int]
) -> None:
    def three() -> dict[str, IterDataset[int]]:
        return {"a": _iter(0, 100), "b": _iter(100, 200), "c": _iter(200, 300)}

    it = iter(IterDataset.mix(three()))
    assert _take(it, 6) == [0, 100, 200, 1, 101, 201]
    state = _saved(it)
    sources = three()
    if names == ("x", "y"):
        sources = {"x": sources["a"], "y": sources["c"]}
    resumed = iter(IterDataset.mix({name: sources[name] for name in names}, weights))
    resumed.set_state(state)
    assert _take(resumed, len(tail)) == tail  # Grain's output


# --- the order: Grain's pattern at each position, for the weights in force there ----


def _props(weights: list[float]) -> list[int]:
    """Grain's integer proportions: the smallest weight becomes 100, the rest scale."""
    scale = 100 / min(weights)
    return [int(w * scale) for w in weights]


def _source_at(weights: list[float], k: int) -> int:
    """The dataset of mix position ``k`` in Grain's pattern (a reference, one index)."""
    props = _props(weights)
    left, a, b = sum(props), k, k + 1  # positions before k, before k + 1
    for i, p in enumerate(props[:-1]):
        got_a, got_b = -(-a * p // left), -(-b * p // left)  # ceil(a * p / left)
        if got_b != got_a:
            return i
        a, b, left = a - got_a, b - got_b, left - p
    return len(props) - 1


@pytest.mark.parametrize(
    ("weights", "pattern"),
    [  # Grain's output: the dataset of positions 0 .. 19
        ([1, 2], [0, 1, 1] * 6 + [0, 1]),
        ([0.2, 0.8], [0, 1, 1, 1, 1] * 4),
        ([0.5, 0.3, 0.2], [0, 1, 0, 1, 0, 2, 0, 1, 0, 2, 0, 1, 0, 1, 0, 2, 0, 1, 0, 2]),
        ([3, 1], [0, 0, 0, 1] * 5),
        ([0.7, 0.3], [0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1]),
    ],
)
def test_the_reference_pattern_is_grains(weights: list[float], pattern: list[int]) -> None:
    assert [_source_at(weights, k) for k in range(20)] == pattern
    ds = IterDataset.mix([_iter(k * _M, (k + 1) * _M) for k in range(len(weights))], weights)
    assert [x // _M for x in _take(iter(ds), 20)] == pattern


def _sources(n: int) -> list[IterDataset[int]]:
    return [_iter(k * _M, (k + 1) * _M) for k in range(n)]


def _ids(out: list[int]) -> np.ndarray:
    return np.asarray(out, dtype=np.int64) // _M


def _named_sources(names: str) -> dict[str, IterDataset[int]]:
    return {name: _iter(k * _M, (k + 1) * _M) for k, name in enumerate(names)}


def _run(
    make: Callable[[], IterDataset[int]],
    n: int,
    live: dict[int, Any] | None = None,
    save_at: tuple[int, ...] = (),
) -> list[int]:
    """``n`` elements; ``live[s]`` is set before element s; at each ``save_at`` step
    the state goes through JSON into a freshly built iterator, which goes on."""
    it = iter(make())
    out = []
    for step in range(n):
        if live and step in live:
            set_mix_weights(it, live[step])
        if step in save_at:
            state = _saved(it)
            it = iter(make())
            it.set_state(state)
            assert it.get_state()["index"] == step
        out.append(next(it))
    return out


def _check_in_order(out: list[int]) -> None:
    """Each dataset's elements come out in order, none left out or repeated."""
    ids = [x // _M for x in out]
    for i in set(ids):
        assert [x - i * _M for x in out if x // _M == i] == list(range(ids.count(i)))


def _check_order(out: list[int], weights_at: Callable[[int], list[float]]) -> None:
    """Element k comes from Grain's pattern at k for the weights in force at k (fixed
    weights, points of a schedule, live weights), and nothing is lost or repeated."""
    ids = [x // _M for x in out]
    assert ids == [_source_at(weights_at(k), k) for k in range(len(out))]
    _check_in_order(out)


def _ramp(step: int) -> list[float]:
    t = min(step / 1000, 1.0)
    return [1.0 - 0.8 * t, 0.5, 0.2 + 0.8 * t]


_CURRICULUM = {0: [0.8, 0.2], 1000: [0.2, 0.8], 1600: [0.5, 0.5]}
_SAVES = (0, 1, 499, 999, 1000, 1001, 1599, 1600, 1601, 1999)


def _curriculum_at(k: int) -> list[float]:
    return _CURRICULUM[max(s for s in _CURRICULUM if s <= k)]


def test_a_piecewise_schedule_resumes_before_at_and_after_each_change() -> None:
    def make() -> IterDataset[int]:
        return IterDataset.mix(_sources(2), WeightSchedule(_CURRICULUM))

    whole = _run(make, 2100)
    _check_order(whole, _curriculum_at)
    for save in _SAVES:
        assert _run(make, 2100, save_at=(save,)) == whole, save
    assert _run(make, 2100, save_at=_SAVES) == whole


@pytest.mark.parametrize("every", [1, 50])
def test_a_function_schedule_resumes_anywhere(every: int) -> None:
    def make() -> IterDataset[int]:
        return IterDataset.mix(_sources(3), WeightSchedule(fn=_ramp, every=every))

    whole = _run(make, 1300)
    _check_in_order(whole)
    assert _ids(whole[-300:]).tolist().count(2) > 2 * _ids(whole[:300]).tolist().count(2)
    saves = (0, 1, 49, 50, 51, 99, 100, 777, 999, 1000, 1001, 1250)
    for save in saves:
        assert _run(make, 1300, save_at=(save,)) == whole, save
    assert _run(make, 1300, save_at=saves) == whole


def test_a_plain_callable_is_a_schedule_evaluated_every_step() -> None:
    def make(weights: Any) -> Callable[[], IterDataset[int]]:
        return lambda: IterDataset.mix(_sources(3), weights)

    whole = _run(make(_ramp), 1200, save_at=(3, 600, 1000))
    assert whole == _run(make(WeightSchedule(fn=_ramp, every=1)), 1200)
    _check_in_order(whole)


def test_a_live_change_before_a_save_holds_after_the_restore() -> None:
    live = {300: [0.1, 0.9], 1200: None, 1700: [2, 1]}

    def make() -> IterDataset[int]:
        return IterDataset.mix(_sources(2), WeightSchedule(_CURRICULUM))

    def weights_at(k: int) -> list[float]:
        if 300 <= k < 1200:
            return [0.1, 0.9]
        return [2, 1] if k >= 1700 else _curriculum_at(k)  # None: the schedule again

    whole = _run(make, 2000, live)
    _check_order(whole, weights_at)
    for save in (300, 301, 1000, 1199, 1200, 1201, 1700, 1900):
        assert _run(make, 2000, live, save_at=(save,)) == whole, save
    it = iter(make())
    set_mix_weights(it, [0.1, 0.9])
    _take(it, 5)
    resumed: Any = iter(make())  # the mix's iterator: weights, set_weights
    resumed.set_state(_saved(it))
    assert resumed.weights == [0.1, 0.9]
    assert resumed.get_state()["weights"] == [0.1, 0.9]
    set_mix_weights(resumed, None)
    assert resumed.weights == [0.8, 0.2]
    assert "weights" not in resumed.get_state()  # Grain's keys again


def test_a_live_change_replaces_fixed_weights_and_none_restores_them() -> None:
    live = {10: [1, 4], 40: None}
    whole = _run(lambda: IterDataset.mix(_sources(2), [3, 1]), 80, live, save_at=(10, 25, 40))
    _check_order(whole, lambda k: [1, 4] if 10 <= k < 40 else [3, 1])


def test_named_datasets_take_named_schedules_and_live_changes() -> None:
    points = {0: {"c": 1, "a": 3, "b": 1}, 500: {"a": 1, "b": 1, "c": 2}}
    live = {700: {"b": 5, "c": 1, "a": 1}, 900: None}

    def make() -> IterDataset[int]:
        return IterDataset.mix(_named_sources("abc"), WeightSchedule(points))

    def weights_at(k: int) -> list[float]:
        if 700 <= k < 900:
            return [1, 5, 1]
        return [3, 1, 1] if k < 500 else [1, 1, 2]

    whole = _run(make, 1100, live)
    _check_order(whole, weights_at)
    for save in (499, 500, 700, 701, 899, 900, 1000):
        assert _run(make, 1100, live, save_at=(save,)) == whole, save
    it = iter(make())
    set_mix_weights(it, {"a": 1, "b": 2, "c": 3})
    assert it.get_state()["weights"] == [1, 2, 3]  # in the datasets' order

    def by_function(step: int) -> dict[str, float]:
        return {"a": 1.0, "b": 1.0 + step / 100, "c": 1.0}

    def ramp() -> IterDataset[int]:
        return IterDataset.mix(_named_sources("abc"), by_function)

    whole = _run(ramp, 400)
    assert _run(ramp, 400, save_at=(77, 301)) == whole
    _check_in_order(whole)
    assert _ids(whole[-100:]).tolist().count(1) > 60  # b's weight grew from 1/3 to 5/7


# --- 3. nothing lost or repeated ----------------------------------------------------


def _wave(step: int) -> list[float]:
    return [1.0 + math.sin(step / 997 + k) for k in range(5)]


@pytest.mark.parametrize("by", ["points", "function"])
def test_long_runs_with_changes_lose_and_repeat_nothing(by: str) -> None:
    rng = np.random.default_rng(37)
    n = 5
    points = {0: [1] * n, 7_000: [0.05, 0.1, 0.15, 0.2, 0.5], 19_000: [0.5, 0.2, 0.1, 0.1, 0.1]}
    schedule = WeightSchedule(points) if by == "points" else WeightSchedule(fn=_wave, every=3)
    live: dict[int, Any] = {
        int(s): [float(w) for w in rng.uniform(0.05, 1, n)] for s in rng.integers(0, 30_000, 6)
    }
    live[25_000] = None
    saves = tuple(int(s) for s in rng.integers(0, 30_000, 5))

    def make() -> IterDataset[int]:
        return IterDataset.mix(_sources(n), schedule)

    out = _run(make, 30_000, live, save_at=saves)
    for i in range(n):
        mine = [x - i * _M for x in out if x // _M == i]
        assert mine == list(range(len(mine)))
        assert len(mine) > 1000
    assert out == _run(make, 30_000, live)


def _short_second(weights: Any) -> IterDataset[int]:
    return IterDataset.mix([_iter(0, 1000), _iter(_M, _M + 40)], weights)


def test_the_mix_stops_when_the_chosen_dataset_runs_out_as_grain() -> None:
    it = iter(_short_second(WeightSchedule({0: [3, 1], 60: [1, 3]})))
    out = _take(it, 2000)
    assert out[-1] == "stop"
    out = out[:-1]
    ids = [x // _M for x in out]
    assert ids.count(1) == 40  # all of the short dataset, none twice
    _check_order(out, lambda k: [3, 1] if k < 60 else [1, 3])
    # The turn after the last element was the short dataset's, which had run out.
    assert _source_at([1, 3], len(out)) == 1
    state = _saved(it)
    assert (state["stop"], state["index"]) == (True, len(out) + 1)
    assert _take(it, 3) == ["stop"]
    resumed = iter(_short_second(WeightSchedule({0: [3, 1], 60: [1, 3]})))
    resumed.set_state(state)
    assert _take(resumed, 3) == ["stop"]  # Grain's: a stopped state stays stopped


def test_a_live_change_towards_an_exhausted_dataset_stops_the_mix() -> None:
    it = iter(_short_second([9, 1]))
    first = _take(it, 100)
    assert sum(x >= _M for x in first) == 10
    set_mix_weights(it, [1, 1])
    rest = _take(it, 2000)
    assert rest[-1] == "stop"
    _check_order(first + rest[:-1], lambda k: [9, 1] if k < 100 else [1, 1])
    assert sorted(x for x in first + rest[:-1] if x != "stop" and x >= _M) == list(
        range(_M, _M + 40)
    )
    assert it.get_state()["stop"] is True


# --- 4. proportions in every window -------------------------------------------------

_WINDOW = 1000


def _window_deviation(ids: np.ndarray, shares: np.ndarray, constant_only: bool) -> float:
    """Worst |share of a dataset in a window - its (mean) weight there|, in points.

    ``shares[k]`` is the normalised weights in force at element k.  With
    ``constant_only``, only windows that lie within one constant-weight stretch count.
    """
    n = shares.shape[1]
    got = np.vstack([np.zeros(n), np.cumsum(np.eye(n)[ids], axis=0)])
    want = np.vstack([np.zeros(n), np.cumsum(shares, axis=0)])
    dev = np.abs((got[_WINDOW:] - got[:-_WINDOW]) - (want[_WINDOW:] - want[:-_WINDOW])) / _WINDOW
    if constant_only:
        changes = np.concatenate([[0], np.any(shares[1:] != shares[:-1], axis=1)])
        inside = np.concatenate([[0], np.cumsum(changes)])
        # window [i, i + W) is constant when no change happens at i + 1 .. i + W - 1
        keep = inside[_WINDOW:] - inside[1 : len(inside) - _WINDOW + 1] == 0
        assert keep.sum() >= 1000  # enough windows to mean something
        dev = dev[keep]
    return float(dev.max() * 100)


def _normalised(weights: list[float]) -> list[float]:
    return [w / sum(weights) for w in weights]


def _piecewise_cases() -> list[tuple[str, dict[int, list[float]]]]:
    return [
        ("2 sources", {0: [0.5, 0.5], 3000: [0.05, 0.95], 7000: [0.3, 0.7]}),
        ("3 sources", {0: [0.5, 0.3, 0.2], 2500: [0.2, 0.3, 0.5], 6000: [0.1, 0.7, 0.2]}),
        (
            "5 sources",
            {
                0: [0.05, 0.1, 0.15, 0.2, 0.5],
                3000: [0.2] * 5,
                5500: [0.5, 0.2, 0.1, 0.1, 0.1],
                8000: [0.06, 0.44, 0.25, 0.1, 0.15],
            },
        ),
        ("8 sources", {0: [1] * 8, 4000: [0.05] * 4 + [0.2] * 4, 8000: [0.3] + [0.1] * 7}),
    ]


@pytest.mark.parametrize(("name", "points"), _piecewise_cases())
def test_every_window_of_a_piecewise_schedule_holds_its_weights(
    name: str, points: dict[int, list[float]]
) -> None:
    n = len(points[0])
    out = _run(lambda: IterDataset.mix(_sources(n), WeightSchedule(points)), 11_000)
    at = sorted(points)
    shares = np.array([_normalised(points[max(s for s in at if s <= k)]) for k in range(11_000)])
    worst = _window_deviation(_ids(out), shares, True)
    print(f"worst window deviation, piecewise {name}: {worst:.3f} pp")
    assert worst <= 1.0


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_every_window_after_live_changes_holds_the_live_weights(n: int) -> None:
    rng = np.random.default_rng(n)
    live = {}
    for s in (1500, 4000, 4200, 4400, 6000, 9000):
        spread = rng.dirichlet([1.0] * n)
        if s == 1500:  # one dataset at the 5% floor
            spread[0] = 0.0
            spread /= spread.sum()
        live[s] = [float(w) for w in 0.05 + (1 - 0.05 * n) * spread]
    out = _run(lambda: IterDataset.mix(_sources(n)), 11_000, live)
    current, rows = [1.0] * n, []
    for k in range(11_000):
        current = live.get(k, current)
        rows.append(_normalised(current))
    assert min(min(r) for r in rows) >= 0.045
    worst = _window_deviation(_ids(out), np.array(rows), True)
    print(f"worst window deviation, live changes, {n} sources: {worst:.3f} pp")
    assert worst <= 1.0


def _linear(w0: list[float], w1: list[float], steps: int) -> Callable[[int], list[float]]:
    def weights(step: int) -> list[float]:
        t = min(step / steps, 1.0)
        return [(1 - t) * a + t * b for a, b in zip(w0, w1)]

    return weights


_RAMPS = [
    ([0.5, 0.5], [0.2, 0.8]),
    ([0.1, 0.3, 0.6], [0.6, 0.3, 0.1]),
    ([0.2] * 5, [0.05, 0.1, 0.15, 0.2, 0.5]),
    ([0.125] * 8, [0.3] + [0.1] * 7),
]


def _ramp_deviation(w0: list[float], w1: list[float], every: int) -> float:
    fn = _linear(w0, w1, 20_000)
    out = _run(
        lambda: IterDataset.mix(_sources(len(w0)), WeightSchedule(fn=fn, every=every)), 22_000
    )
    shares = np.array([_normalised(fn(k - k % every)) for k in range(22_000)])
    return _window_deviation(_ids(out), shares, False)


@pytest.mark.parametrize(("w0", "w1"), _RAMPS)
def test_every_window_of_a_ramp_evaluated_every_50_steps_holds_its_mean_weight(
    w0: list[float], w1: list[float]
) -> None:
    worst = _ramp_deviation(w0, w1, 50)
    print(f"worst window deviation, linear ramp every=50, {len(w0)} sources: {worst:.3f} pp")
    assert worst <= 1.0


@pytest.mark.parametrize(("w0", "w1"), _RAMPS)
def test_every_window_of_a_ramp_evaluated_every_step_holds_its_mean_weight(
    w0: list[float], w1: list[float]
) -> None:
    worst = _ramp_deviation(w0, w1, 1)
    print(f"worst window deviation, linear ramp every=1, {len(w0)} sources: {worst:.3f} pp")
    assert worst <= 1.0


def test_the_state_does_not_grow_with_the_elements_read() -> None:
    it = iter(IterDataset.mix(_sources(5), WeightSchedule(fn=_ramp_of_5, every=7)))
    _take(it, 1000)
    set_mix_weights(it, [0.1, 0.2, 0.3, 0.2, 0.2])
    early = it.get_state()
    _take(it, 99_000)
    late = it.get_state()
    assert late["index"] == 100_000
    small, big = len(json.dumps(early)), len(json.dumps(late))
    print(f"state size: {small} bytes at 1e3 elements, {big} bytes at 1e5")
    assert _shape(late) == _shape(early)  # the same keys and lists, only numbers differ
    assert big <= small + 40  # a few more digits, nothing per element read


def _shape(state: Any) -> Any:
    """``state`` with every number replaced by 0."""
    if isinstance(state, dict):
        return {k: _shape(v) for k, v in state.items()}
    if isinstance(state, list):
        return [_shape(v) for v in state]
    return 0 if isinstance(state, (int, float)) and not isinstance(state, bool) else state


def _ramp_of_5(step: int) -> list[float]:
    return [1.0, 1.0 + step % 1000 / 1000, 1.0, 2.0, 1.0]


# --- 6. bad input: a clear error, and nothing changed ---------------------------------

_NAN, _INF = float("nan"), float("inf")
_BAD = [
    ([-1, 2], ValueError, r"finite and > 0 \(weights\[0\] is -1\)"),
    ([1, _NAN], ValueError, r"finite and > 0 \(weights\[1\] is nan\)"),
    ([_INF, 1], ValueError, r"finite and > 0 \(weights\[0\] is inf\)"),
    ([0, 0], ValueError, r"Must specify all non-zero proportions.*weights\[0\] is 0"),
    ([0.0, 1], ValueError, r"Must specify all non-zero proportions.*weights\[0\] is 0"),
    ([1, 2, 3], ValueError, "got 3 weights for 2 datasets"),
    ([1], ValueError, "got 1 weights for 2 datasets"),
    ([1, "2"], TypeError, r"weights\[1\] must be a number \(got '2'\)"),
    ("12", TypeError, "must be a list of numbers"),
]


def _pair() -> list[IterDataset[int]]:
    return _sources(2)


@pytest.mark.parametrize(("weights", "error", "match"), _BAD)
def test_bad_fixed_weights_are_refused_when_building(weights: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as caught:
        IterDataset.mix(_pair(), weights)
    assert "IterDataset.mix(): " in str(caught.value)


@pytest.mark.parametrize(("weights", "error", "match"), _BAD)
def test_bad_weights_in_a_schedules_points_are_refused_when_building(
    weights: Any, error: type, match: str
) -> None:
    with pytest.raises(error, match=match) as caught:
        IterDataset.mix(_pair(), WeightSchedule({0: [1, 1], 500: weights}))
    assert "IterDataset.mix(): the schedule at step 500: " in str(caught.value)


def test_named_points_that_name_an_unknown_dataset_are_refused_when_building() -> None:
    points = {0: {"a": 1, "b": 1}, 9: {"a": 1, "c": 2}}
    with pytest.raises(ValueError, match=r"step 9: the weights name \['c'\] unknown.*leave out"):
        IterDataset.mix(_named_sources("ab"), WeightSchedule(points))


@pytest.mark.parametrize(
    ("points", "fn", "every", "error", "match"),
    [
        (None, None, 1, TypeError, "either points"),
        ({0: [1, 1]}, lambda s: [1, 1], 1, TypeError, "either points"),
        ({}, None, 1, TypeError, "non-empty mapping"),
        ({5: [1, 1]}, None, 1, ValueError, "must start at step 0"),
        ({0: [1, 1], -3: [1, 2]}, None, 1, ValueError, "step of points"),
        ({0: [1, 1], 2.5: [1, 2]}, None, 1, TypeError, "step of points"),
        (None, 3, 1, TypeError, "fn"),
        (None, lambda s: [1, 1], 0, ValueError, "every"),
    ],
)
def test_a_bad_schedule_is_refused(
    points: Any, fn: Any, every: int, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        WeightSchedule(points, fn, every=every)


class _FailsOnce:
    """Weights that ramp, except that the first call for step ``bad`` returns ``wrong``."""

    def __init__(self, bad: int, wrong: Any) -> None:
        self.bad, self.wrong, self.failed = bad, wrong, False

    def __call__(self, step: int) -> Any:
        if step == self.bad and not self.failed:
            self.failed = True
            return self.wrong
        return [1.0, 1.0 + step / 100]


@pytest.mark.parametrize("every", [1, 50])
@pytest.mark.parametrize(("weights", "error", "match"), _BAD[:-1])
def test_a_function_that_returns_bad_weights_fails_that_step_and_changes_nothing(
    every: int, weights: Any, error: type, match: str
) -> None:
    bad = 150  # a step where the function is called with every=1 and every=50

    def make(fn: Any) -> IterDataset[int]:
        return IterDataset.mix(_pair(), WeightSchedule(fn=fn, every=every))

    good = _take(iter(make(_FailsOnce(-1, None))), 300)
    it = iter(make(_FailsOnce(bad, weights)))
    head = _take(it, bad)
    before = it.get_state()
    with pytest.raises(error, match=match) as caught:
        next(it)
    assert f"mix weights at step {bad}: " in str(caught.value)
    assert it.get_state() == before
    assert head + _take(it, 300 - bad) == good  # as if it had never failed


@pytest.mark.parametrize(("weights", "error", "match"), _BAD[:-1])
def test_bad_live_weights_are_refused_and_change_nothing(
    weights: Any, error: type, match: str
) -> None:
    def make() -> IterDataset[int]:
        return IterDataset.mix(_pair(), WeightSchedule({0: [1, 1], 20: [1, 3]}))

    good = _run(make, 60, {10: [3, 1]})
    it: Any = iter(make())  # the mix's iterator: weights, set_weights
    head = _take(it, 10)
    set_mix_weights(it, [3, 1])
    before = it.get_state()
    with pytest.raises(error, match=match) as caught:
        set_mix_weights(it, weights)
    assert "mix weights set on the mix: " in str(caught.value)
    with pytest.raises(error, match=match):
        it.set_weights(weights)
    assert it.get_state() == before
    assert it.weights == [3, 1]
    assert head + _take(it, 50) == good


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ({"a": 1, "c": 2}, r"name \['c'\] unknown dataset\(s\) and leave out \['b'\]"),
        ({"a": 1, "b": 2, "c": 3}, r"name \['c'\] unknown dataset\(s\) and leave out none"),
        ({"a": 1}, r"leave out \['b'\]"),
        ({"a": 1, "b": -2}, r"finite and > 0 \(weights\[1\] is -2\)"),
    ],
)
def test_a_live_change_naming_an_unknown_dataset_is_refused_and_changes_nothing(
    weights: dict[str, float], match: str
) -> None:
    def make() -> IterDataset[int]:
        return IterDataset.mix(_named_sources("ab"), {"a": 1, "b": 2})

    good = _take(iter(make()), 40)
    it = iter(make())
    head = _take(it, 7)
    before = it.get_state()
    with pytest.raises(ValueError, match=match):
        set_mix_weights(it, weights)
    assert it.get_state() == before
    assert head + _take(it, 33) == good


def test_live_weights_for_a_list_of_datasets_cannot_be_a_mapping() -> None:
    it = iter(IterDataset.mix(_pair()))
    with pytest.raises(TypeError, match="a mapping only when datasets is one too"):
        set_mix_weights(it, {"a": 1, "b": 2})
    assert "weights" not in it.get_state()


def test_set_mix_weights_needs_exactly_one_mix_in_this_process() -> None:
    with pytest.raises(ValueError, match="runs 0 mix stages"):
        set_mix_weights(iter(_pair()[0]), [1, 2])
    inner = IterDataset.mix(_pair())
    two = iter(IterDataset.mix([inner, IterDataset.mix(_pair())]))
    with pytest.raises(ValueError, match="runs 3 mix stages.*one mix's own iterator"):
        set_mix_weights(two, [1, 2])


def test_a_function_schedule_that_returns_none_raises_at_that_step() -> None:
    def fn(step: int) -> list[int] | None:
        return [9, 1] if step < 4 else None

    with iter(IterDataset.mix(_pair(), fn)) as it:
        head = [next(it) for _ in range(4)]
        state = it.get_state()
        with pytest.raises(TypeError, match="at step 4: got None"):
            next(it)
        assert it.get_state() == state  # nothing changed
    assert len(head) == 4


@pytest.mark.parametrize("seed", range(5))
def test_due_date_turns_are_the_same_in_python_and_in_numpy(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._stages.mix_weights import Credits

    rng = np.random.default_rng(seed)
    count = int(rng.integers(2, 9))
    weights = list(rng.uniform(0.05, 1.0, count))
    running = sorted(rng.choice(count, size=max(2, count - 1), replace=False).tolist())
    base = list(rng.uniform(-0.9, 0.9, count))
    plans = []
    for numpy_from in (10**9, 2):  # all in Python, then all in numpy
        monkeypatch.setattr(Credits, "_NUMPY_FROM", numpy_from)
        credits = Credits(count)
        credits.reset(base, 0)
        credits.plan(weights, running, 300)
        plans.append((list(credits.turns), credits.at(300)))
    assert plans[0] == plans[1]
    assert len(plans[0][0]) == 300 and set(plans[0][0]) <= set(running)
