"""ZipMapDataset and ZipIterDataset."""

from __future__ import annotations

import pytest

from chute import MapDataset
from chute.experimental import ZipIterDataset, ZipMapDataset, assert_equal_output_after_checkpoint


def _it(start: int, stop: int):  # type: ignore[no-untyped-def]
    return MapDataset.range(start, stop).to_iter_dataset()


def test_map_zip_gives_tuples_like_grain() -> None:
    # Grain's outputs for the same pipelines.
    ds = ZipMapDataset([MapDataset.range(5), MapDataset.range(10, 15)])
    assert len(ds) == 5
    assert list(ds) == [(0, 10), (1, 11), (2, 12), (3, 13), (4, 14)]
    assert (ds[3], ds[-1], ds[7]) == ((3, 13), (4, 14), (2, 12))
    assert list(ZipMapDataset([MapDataset.range(3)])) == [(0,), (1,), (2,)]


def test_map_zip_reads_later_epochs_of_each_parent() -> None:
    # Grain: index 3 reads index 3 of each parent (the next epoch of the shuffle).
    ds = ZipMapDataset([MapDataset.range(3).shuffle(seed=1), MapDataset.range(3)])
    assert list(ds) == [(1, 0), (2, 1), (0, 2)]
    assert ds[3] == (0, 0)


def test_map_zip_keeps_holes_inside_the_tuple() -> None:
    # Grain's output: a filtered element is a None inside the tuple.
    evens = MapDataset.range(6).filter(lambda x: x % 2 == 0)
    ds = ZipMapDataset([evens, MapDataset.range(6)])
    expected = [(0, 0), (None, 1), (2, 2), (None, 3), (4, 4), (None, 5)]
    assert [ds[i] for i in range(6)] == expected
    assert list(ds) == expected


def test_map_zip_reads_each_parent_once_per_batch() -> None:
    calls: list[int] = []

    class Counting(MapDataset[int]):
        def __init__(self) -> None:
            super().__init__()

        def __len__(self) -> int:
            return 100

        def _getitems(self, indices):  # type: ignore[no-untyped-def]
            calls.append(len(indices))
            return [int(i) for i in indices]

    ds = ZipMapDataset([Counting(), Counting()])
    assert ds._getitems(list(range(50))) == [(i, i) for i in range(50)]
    assert calls == [50, 50]


def test_map_zip_rejects_bad_parents() -> None:
    with pytest.raises(ValueError, match="same length"):
        ZipMapDataset([MapDataset.range(5), MapDataset.range(3)])
    with pytest.raises(ValueError, match="at least one parent"):
        ZipMapDataset([])
    with pytest.raises(TypeError, match="must be a MapDataset"):
        ZipMapDataset([MapDataset.range(3), _it(0, 3)])
    with pytest.raises(TypeError, match="sequence of datasets"):
        ZipMapDataset(3)  # type: ignore[arg-type]


def test_iter_zip_is_strict_like_grain() -> None:
    # Grain raises the same errors (the wording after the first sentence is chute's).
    assert list(ZipIterDataset([_it(0, 3), _it(10, 13)])) == [(0, 10), (1, 11), (2, 12)]
    with pytest.raises(ValueError, match="argument 2 is shorter than argument 1"):
        list(ZipIterDataset([_it(0, 5), _it(10, 13)]))
    with pytest.raises(ValueError, match="argument 2 is longer than argument 1"):
        list(ZipIterDataset([_it(10, 13), _it(0, 5)]))
    with pytest.raises(ValueError, match="argument 3 is shorter than arguments 1-2"):
        list(ZipIterDataset([_it(0, 5), _it(20, 25), _it(10, 13)]))


def test_iter_zip_stops_at_the_shortest_when_not_strict() -> None:
    ds = ZipIterDataset([_it(10, 13), _it(0, 5)], strict=False)
    assert list(ds) == [(10, 0), (11, 1), (12, 2)]
    it = iter(ZipIterDataset([_it(0, 5), _it(10, 12)], strict=False))
    assert list(it) == [(0, 10), (1, 11)]
    with pytest.raises(StopIteration):
        next(it)


def test_iter_zip_takes_map_datasets_and_a_single_parent() -> None:
    ds = ZipIterDataset([MapDataset.range(3), MapDataset.range(3)])
    assert list(ds) == [(0, 0), (1, 1), (2, 2)]
    assert list(ZipIterDataset([_it(0, 2)])) == [(0,), (1,)]


def test_iter_zip_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one parent"):
        ZipIterDataset([])
    with pytest.raises(TypeError, match="strict must be a bool"):
        ZipIterDataset([_it(0, 2)], strict="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="parent 1"):
        ZipIterDataset([_it(0, 2), [1, 2]])  # type: ignore[list-item]


def test_iter_zip_restores_from_every_checkpoint() -> None:
    assert_equal_output_after_checkpoint(ZipIterDataset([_it(0, 7), _it(10, 17)]))
    shuffled = MapDataset.range(9).shuffle(seed=3).to_iter_dataset().batch(2)
    assert_equal_output_after_checkpoint(
        ZipIterDataset([shuffled, _it(0, 20).batch(2), _it(5, 10)], strict=False)
    )
    pairs = ZipMapDataset([MapDataset.range(8), MapDataset.range(8).shuffle(seed=2)])
    assert_equal_output_after_checkpoint(pairs.to_iter_dataset())


def test_iter_zip_loses_nothing_when_a_parent_raises() -> None:
    def fail_on_two(x: int) -> int:
        if x == 2:
            raise KeyError("bad element")
        return x

    ds = ZipIterDataset([_it(0, 5), _it(0, 6).map(fail_on_two)])
    it = iter(ds)
    assert [next(it), next(it)] == [(0, 0), (1, 1)]
    with pytest.raises(KeyError, match="bad element"):
        next(it)  # the first parent's 2 is kept for the next tuple
    state = it.get_state()
    assert list(it) == [(2, 3), (3, 4), (4, 5)]
    restored = iter(ds)
    restored.set_state(state)
    assert list(restored) == [(2, 3), (3, 4), (4, 5)]
