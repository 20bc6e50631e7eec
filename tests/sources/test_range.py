"""RangeDataSource: Grain's range source, exact for any int and read in batches."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from chute import MapDataset
from chute.sources import RangeDataSource


@pytest.mark.parametrize(
    ("start", "stop", "step"),
    [(0, 10, 1), (0, 10, 3), (5, 6, 1), (3, 3, 1), (10, 0, -3), (-7, 8, 4), (0, 1, 100)],
)
def test_reads_like_python_range(start: int, stop: int, step: int) -> None:
    source = RangeDataSource(start, stop, step)
    expected = list(range(start, stop, step))
    assert len(source) == len(expected)
    assert [source[i] for i in range(len(source))] == expected
    assert source.__getitems__(list(range(len(source)))) == expected
    assert list(source) == expected


def test_elements_are_python_ints() -> None:
    source = RangeDataSource(np.int64(2), np.int32(9), np.int8(2))
    assert all(type(x) is int for x in [source[0], *source.__getitems__([1, 2])])
    assert repr(source) == "RangeDataSource(start=2, stop=9, step=2)"


def test_step_defaults_to_one() -> None:
    assert list(RangeDataSource(2, 5)) == [2, 3, 4]


def test_repr_is_complete_and_matches_grain() -> None:
    assert repr(RangeDataSource(0, 10, 2)) == "RangeDataSource(start=0, stop=10, step=2)"
    assert repr(RangeDataSource(10, 0, -3)) == "RangeDataSource(start=10, stop=0, step=-3)"
    assert repr(RangeDataSource(0, 10, 2)) != repr(RangeDataSource(0, 11, 2))


@pytest.mark.parametrize("index", [-1, -5, 5, 100])
def test_negative_and_out_of_range_indices_raise(index: int) -> None:
    source = RangeDataSource(0, 10, 2)
    with pytest.raises(IndexError, match=f"index {index} is out of range for length 5"):
        source[index]
    with pytest.raises(IndexError, match=f"index {index} is out of range for length 5"):
        source.__getitems__([0, index])


def test_empty_range_has_no_valid_index() -> None:
    source = RangeDataSource(4, 4, 1)
    assert len(source) == 0
    assert source.__getitems__([]) == []
    with pytest.raises(IndexError, match="the source is empty"):
        source[0]


def test_getitems_takes_numpy_indices_in_any_order() -> None:
    source = RangeDataSource(100, 200, 5)
    assert source.__getitems__(np.array([3, 0, 3, 19])) == [115, 100, 115, 195]
    assert source[np.int64(2)] == 110


def test_huge_ranges_stay_exact() -> None:
    start = 10**20
    source = RangeDataSource(start, start + 10**19, 3)
    assert len(source) == len(range(start, start + 10**19, 3))
    assert source.__getitems__([0, 1, len(source) - 1]) == [
        start,
        start + 3,
        range(start, start + 10**19, 3)[-1],
    ]


def test_rejects_non_int_arguments() -> None:
    with pytest.raises(TypeError, match="start must be an int"):
        RangeDataSource(0.5, 10, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stop must be an int"):
        RangeDataSource(0, "10", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step must be an int"):
        RangeDataSource(0, 10, True)


def test_rejects_zero_step_and_backward_ranges() -> None:
    with pytest.raises(ValueError, match="step must not be zero"):
        RangeDataSource(0, 10, 0)
    with pytest.raises(ValueError, match="use step=-1 or swap start and stop"):
        RangeDataSource(5, 0, 1)
    with pytest.raises(ValueError, match="use step=2"):
        RangeDataSource(0, 5, -2)


def test_rejects_non_int_indices() -> None:
    source = RangeDataSource(0, 10, 1)
    with pytest.raises(TypeError, match="index must be an int"):
        source[1.0]  # type: ignore[index]
    with pytest.raises(TypeError, match="flat sequence of ints"):
        source.__getitems__([0.0, 1.0])  # type: ignore[list-item]


def test_pickles_to_an_equal_source() -> None:
    source = RangeDataSource(3, 30, 4)
    copy = pickle.loads(pickle.dumps(source))
    assert repr(copy) == repr(source)
    assert list(copy) == list(source)


def test_feeds_a_shuffled_pipeline() -> None:
    ds = MapDataset.source(RangeDataSource(0, 10, 1)).seed(42).shuffle()
    assert list(ds) == [1, 7, 6, 9, 0, 8, 4, 5, 3, 2]
