"""FlatMapMapDataset and FlatMapIterDataset."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest

from chute import MapDataset
from chute.experimental import (
    FlatMapIterDataset,
    FlatMapMapDataset,
    FlatMapTransform,
    assert_equal_output_after_checkpoint,
)
from chute.transforms import FlatMap, Map


class Split(FlatMapTransform):
    """x -> [10x, 10x + 1, ...] with x % 4 pieces."""

    max_fan_out = 3

    def flat_map(self, element: int) -> list[int]:
        return [element * 10 + k for k in range(element % 4)]


class Repeat(FlatMapTransform):
    """x -> [x] * x, which exceeds a fan-out of 2 from x = 3."""

    max_fan_out = 2

    def flat_map(self, element: int) -> list[int]:
        return [element] * element


# Grain's outputs for FlatMapMapDataset(MapDataset.range(6), Split()).
SPLIT_SLOTS = [None, None, None, 10, None, None, 20, 21, None, 30, 31, 32]
SPLIT_SLOTS += [None, None, None, 50, None, None]
SPLIT_ELEMENTS = [10, 20, 21, 30, 31, 32, 50]


def test_map_flat_map_has_max_fan_out_slots_per_element_like_grain() -> None:
    ds = FlatMapMapDataset(MapDataset.range(6), Split())
    assert len(ds) == 18
    assert [ds[i] for i in range(18)] == SPLIT_SLOTS
    assert list(ds) == SPLIT_ELEMENTS
    assert ds[-3] == 50


def test_map_flat_map_reads_later_epochs_of_the_parent_like_grain() -> None:
    ds = FlatMapMapDataset(MapDataset.range(6), Split())
    assert [ds[i] for i in range(18, 40)] == [*SPLIT_SLOTS, None, None, None, 10]
    shuffled = FlatMapMapDataset(MapDataset.range(6).shuffle(seed=3), Split())
    # Grain's output: slot i reads the shuffle's element i // 3, into its second epoch.
    assert shuffled._getitems(list(range(36))) == [
        None, None, None, 30, 31, 32, None, None, None, 10, None, None,
        20, 21, None, 50, None, None, 50, None, None, None, None, None,
        None, None, None, 30, 31, 32, 20, 21, None, 10, None, None,
    ]  # fmt: skip


def test_map_flat_map_splits_each_parent_element_once_per_read() -> None:
    calls: list[int] = []

    class Counting(FlatMapTransform):
        max_fan_out = 4

        def flat_map(self, element: int) -> list[int]:
            calls.append(element)
            return [element] * 4

    ds = FlatMapMapDataset(MapDataset.range(5), Counting())
    assert ds._getitems(list(range(20))) == [x for x in range(5) for _ in range(4)]
    assert calls == [0, 1, 2, 3, 4]


def test_map_flat_map_keeps_holes_and_takes_any_iterable() -> None:
    evens = MapDataset.range(6).filter(lambda x: x % 2 == 0)
    assert list(FlatMapMapDataset(evens, Split())) == [20, 21]

    def pairs(x: int) -> Iterator[tuple[int, int]]:
        yield from ((x, k) for k in range(x % 3))

    ds = FlatMapMapDataset(MapDataset.range(6), FlatMap(pairs, max_fan_out=3))
    assert list(ds) == [(1, 0), (2, 0), (2, 1), (4, 0), (5, 0), (5, 1)]
    rows = FlatMapMapDataset(
        MapDataset.range(2), FlatMap(lambda x: np.full((2, 3), x), max_fan_out=2)
    )
    assert [r.tolist() for r in rows] == [[0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1]]


def test_map_flat_map_raises_when_an_element_exceeds_max_fan_out() -> None:
    ds = FlatMapMapDataset(MapDataset.range(6), Repeat())
    assert ds[0] is None and ds[5] == 2  # elements 0..2 fit
    with pytest.raises(ValueError, match="element 3 split into 3 pieces, more than max_fan_out=2"):
        ds[7]
    with pytest.raises(ValueError, match="max_fan_out"):
        list(ds)


def test_map_flat_map_needs_a_positive_max_fan_out() -> None:
    with pytest.raises(TypeError, match="FlatMap with max_fan_out"):
        FlatMapMapDataset(MapDataset.range(3), lambda x: [x])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="FlatMap with max_fan_out"):
        FlatMapMapDataset(MapDataset.range(3), Map(lambda x: x))  # type: ignore[arg-type]
    for bad in [0, -1]:
        with pytest.raises(ValueError, match="max_fan_out must be >= 1"):
            FlatMapMapDataset(MapDataset.range(3), FlatMap(lambda x: [x], max_fan_out=bad))
    with pytest.raises(TypeError, match="max_fan_out must be an int"):
        FlatMapMapDataset(MapDataset.range(3), FlatMap(lambda x: [x], max_fan_out=2.0))  # type: ignore[arg-type]

    class NoBound(FlatMapTransform):
        def flat_map(self, element: int) -> list[int]:
            return [element]

    with pytest.raises(ValueError, match="max_fan_out"):
        FlatMapMapDataset(MapDataset.range(3), NoBound())


def test_map_flat_map_cannot_be_batched_directly() -> None:
    with pytest.raises(ValueError, match="to_iter_dataset"):
        FlatMapMapDataset(MapDataset.range(3), Split()).batch(2)


def test_iter_flat_map_yields_every_piece_like_grain() -> None:
    # Grain's outputs; the IterDataset version ignores max_fan_out.
    source = MapDataset.range(6).to_iter_dataset()
    assert list(FlatMapIterDataset(source, Split())) == SPLIT_ELEMENTS
    repeated = [1, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5]
    assert list(FlatMapIterDataset(source, Repeat())) == repeated
    assert list(FlatMapIterDataset(MapDataset.range(6), Split())) == SPLIT_ELEMENTS
    assert list(source.apply([Split()])) == SPLIT_ELEMENTS
    assert list(MapDataset.range(6).apply([Split()])) == SPLIT_ELEMENTS


def test_iter_flat_map_takes_plain_functions_and_generators() -> None:
    def pairs(x: int) -> Iterator[tuple[int, int]]:
        yield from ((x, k) for k in range(x % 3))

    source = MapDataset.range(6).to_iter_dataset()
    assert list(FlatMapIterDataset(source, pairs)) == [
        (1, 0),
        (2, 0),
        (2, 1),
        (4, 0),
        (5, 0),
        (5, 1),
    ]
    assert list(FlatMapIterDataset(MapDataset.range(0).to_iter_dataset(), pairs)) == []
    with pytest.raises(TypeError, match="chute.transforms.FlatMap"):
        FlatMapIterDataset(source, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="chute.transforms.FlatMap"):
        FlatMapIterDataset(source, Map(lambda x: [x]))  # type: ignore[arg-type]


def test_flat_map_restores_from_every_checkpoint() -> None:
    source = MapDataset.range(12).shuffle(seed=4)
    assert_equal_output_after_checkpoint(FlatMapIterDataset(source.to_iter_dataset(), Split()))
    assert_equal_output_after_checkpoint(FlatMapMapDataset(source, Split()).to_iter_dataset())
    assert_equal_output_after_checkpoint(FlatMapIterDataset(source.to_iter_dataset(), lambda x: []))


def test_iter_flat_map_error_names_the_stage_and_continues() -> None:
    def explode(x: int) -> list[int]:
        if x == 1:
            raise KeyError("bad element")
        return [x, x]

    ds = FlatMapIterDataset(MapDataset.range(3).to_iter_dataset(), explode)
    it = iter(ds)
    assert [next(it), next(it)] == [0, 0]
    with pytest.raises(KeyError) as info:
        next(it)
    assert any("flat_map(" in note and "index 1" in note for note in info.value.__notes__)
    state = it.get_state()
    assert list(it) == [2, 2]
    restored = iter(ds)
    restored.set_state(state)
    assert list(restored) == [2, 2]


def test_map_flat_map_error_names_the_parent_element() -> None:
    def explode(x: int) -> list[int]:
        raise KeyError("bad element")

    ds = FlatMapMapDataset(MapDataset.range(3), FlatMap(explode, max_fan_out=2))
    with pytest.raises(KeyError) as info:
        ds[5]
    assert any("index 2" in note for note in info.value.__notes__)


def test_map_flat_map_of_an_infinite_dataset_stays_infinite() -> None:
    ds = FlatMapMapDataset(MapDataset.range(3).repeat(), FlatMap(lambda x: [x, x], max_fan_out=2))
    assert len(ds) == sys.maxsize
    assert ds._getitems(list(range(8))) == [0, 0, 1, 1, 2, 2, 0, 0]
