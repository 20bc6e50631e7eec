"""RebatchIterDataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute import IterDataset, MapDataset
from chute.experimental import RebatchIterDataset, assert_equal_output_after_checkpoint


def _batched(n: int, size: int) -> IterDataset[Any]:
    return MapDataset.range(n).to_iter_dataset().batch(size)


def _lists(ds: IterDataset[Any]) -> list[list[int]]:
    return [b.tolist() for b in ds]


@pytest.mark.parametrize(
    ("size", "drop", "expected"),
    [  # Grain's outputs for RebatchIterDataset(range(10).batch(3), size, drop).
        (4, False, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),
        (4, True, [[0, 1, 2, 3], [4, 5, 6, 7]]),
        (2, False, [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]),
        (5, True, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]),
        (10, False, [list(range(10))]),
        (11, False, [list(range(10))]),
        (11, True, []),
        (1, False, [[i] for i in range(10)]),
    ],
)
def test_rebatch_recuts_rows_like_grain(size: int, drop: bool, expected: list[list[int]]) -> None:
    assert _lists(RebatchIterDataset(_batched(10, 3), size, drop)) == expected


def test_rebatch_handles_trees_and_promotes_dtypes_like_grain() -> None:
    rows = MapDataset.range(7).map(lambda x: {"a": x, "b": np.array([x, -x])})
    out = list(RebatchIterDataset(rows.to_iter_dataset().batch(2), 3))
    assert [b["a"].tolist() for b in out] == [[0, 1, 2], [3, 4, 5], [6]]
    assert out[2]["b"].tolist() == [[6, -6]]
    pairs = MapDataset.range(5).map(lambda x: (x, x * 2)).to_iter_dataset().batch(2)
    assert [(a.tolist(), b.tolist()) for a, b in RebatchIterDataset(pairs, 3)] == [
        ([0, 1, 2], [0, 2, 4]),
        ([3, 4], [6, 8]),
    ]
    mixed = MapDataset.source([np.array([1, 2]), np.array([1.5])]).to_iter_dataset()
    (joined,) = RebatchIterDataset(mixed, 3)
    assert joined.tolist() == [1.0, 2.0, 1.5] and joined.dtype == np.float64


def test_rebatch_skips_empty_batches() -> None:
    # Grain raises on a batch of size 0; chute skips it.
    ds = MapDataset.source([np.arange(0), np.arange(3), np.arange(0), np.arange(3, 5)])
    assert _lists(RebatchIterDataset(ds.to_iter_dataset(), 2)) == [[0, 1], [2, 3], [4]]
    assert _lists(RebatchIterDataset(_batched(0, 2), 2)) == []


def test_rebatch_rejects_unbatched_or_inconsistent_elements() -> None:
    with pytest.raises(TypeError, match="leading batch axis"):
        list(RebatchIterDataset(MapDataset.range(5).to_iter_dataset(), 2))
    ragged = MapDataset.source([{"a": np.arange(2), "b": np.arange(3)}]).to_iter_dataset()
    with pytest.raises(ValueError, match="different leading sizes"):
        list(RebatchIterDataset(ragged, 3))
    shapes = MapDataset.range(6).map(lambda x: np.zeros(x // 3 + 1)).to_iter_dataset().batch(3)
    with pytest.raises(ValueError, match="dimension"):
        list(RebatchIterDataset(shapes, 2))
    keys = MapDataset.range(4).map(lambda x: {"a": x} if x < 2 else {"b": x})
    with pytest.raises(ValueError, match="different structures"):
        list(RebatchIterDataset(keys.to_iter_dataset().batch(2), 3))


def test_rebatch_rejects_bad_arguments() -> None:
    for bad in [0, -1]:
        with pytest.raises(ValueError, match="batch_size must be >= 1"):
            RebatchIterDataset(_batched(4, 2), bad)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        RebatchIterDataset(_batched(4, 2), 2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="drop_remainder must be a bool"):
        RebatchIterDataset(_batched(4, 2), 2, drop_remainder="no")  # type: ignore[arg-type]


@pytest.mark.parametrize(("size", "drop"), [(4, False), (5, True), (2, False), (7, False)])
def test_rebatch_restores_from_every_checkpoint(size: int, drop: bool) -> None:
    parent = MapDataset.range(23).shuffle(seed=5).to_iter_dataset().batch(3)
    assert_equal_output_after_checkpoint(RebatchIterDataset(parent, size, drop_remainder=drop))


def test_rebatch_loses_no_rows_when_the_parent_raises() -> None:
    def fail_on_seven(x: int) -> int:
        if x == 7:
            raise KeyError("bad element")
        return x

    parent = MapDataset.range(12).to_iter_dataset().map(fail_on_seven).batch(2)
    ds = RebatchIterDataset(parent, 5)
    it = iter(ds)
    assert next(it).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(KeyError, match="bad element"):
        next(it)  # rows 5 and 6 are kept
    state = it.get_state()
    assert _lists(it) == [[5, 6, 8, 9, 10], [11]]
    restored = iter(ds)
    restored.set_state(state)
    assert _lists(restored) == [[5, 6, 8, 9, 10], [11]]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 40), first=st.integers(1, 7), second=st.integers(1, 9), drop=st.booleans())
def test_rebatch_keeps_every_row_in_order(n: int, first: int, second: int, drop: bool) -> None:
    out = _lists(RebatchIterDataset(_batched(n, first), second, drop_remainder=drop))
    kept = n - n % second if drop else n
    assert [x for b in out for x in b] == list(range(kept))
    assert all(len(b) == second for b in out[:-1])
