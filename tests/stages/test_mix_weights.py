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
            [5, 103, 202, 104, 203, 6, 204, 105, 205, 206, 7, 106, 207, 107, 208, 8, 209, 108]
            + [210, 211],
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
