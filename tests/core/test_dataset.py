"""The base-class contract: user subclasses, immutability, apply/pipe, repr."""

from __future__ import annotations

import inspect
import pydoc
import sys
from typing import Any

import pytest

import chute
from chute import DatasetIterator, IterDataset, MapDataset, transforms
from chute.experimental import ZipMapDataset


class Squares(MapDataset[int]):
    """A user MapDataset written against Grain's API (only __len__/__getitem__)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        return (index % self._n) ** 2


class Countdown(IterDataset[int]):
    def __init__(self, start: int) -> None:
        super().__init__()
        self._start = start

    def __iter__(self) -> DatasetIterator[int]:
        return CountdownIterator(self._start)


class CountdownIterator(DatasetIterator[int]):
    def __init__(self, start: int) -> None:
        super().__init__()
        self._value = start

    def __next__(self) -> int:
        if self._value <= 0:
            raise StopIteration
        self._value -= 1
        return self._value + 1

    def get_state(self) -> dict[str, Any]:
        return {"value": self._value}

    def set_state(self, state: dict[str, Any]) -> None:
        self._value = state["value"]


def test_user_map_dataset_with_only_getitem_works_in_pipelines() -> None:
    ds = Squares(5).map(lambda x: x + 1).batch(2)
    assert [b.tolist() for b in ds] == [[1, 2], [5, 10], [17]]
    assert Squares(5)[1:3][1] == 4


def test_user_iter_dataset_composes_and_checkpoints() -> None:
    ds = Countdown(5).map(lambda x: x * 10).batch(2)
    assert [b.tolist() for b in ds] == [[50, 40], [30, 20], [10]]
    chute.experimental.assert_equal_output_after_checkpoint(ds)


def test_forgetting_super_init_is_caught() -> None:
    class Broken(MapDataset[int]):
        def __init__(self) -> None:
            pass

        def __len__(self) -> int:
            return 1

        def __getitem__(self, index: Any) -> int:
            return 0

    with pytest.raises(TypeError, match=r"must call super\(\).__init__"):
        Broken()


def test_a_map_dataset_without_getitem_is_rejected() -> None:
    class NoItems(MapDataset[int]):
        def __len__(self) -> int:
            return 1

    with pytest.raises(TypeError, match="must implement __getitem__"):
        NoItems()


def test_negative_and_past_the_end_indices_are_other_epochs() -> None:
    ds = MapDataset.range(10)
    assert ds[-1] == 9
    assert ds[13] == 3
    assert ds[-11] == 9  # epoch -2, as in Grain (tests/core/test_indices.py has the table)


def test_datasets_are_immutable_recipes() -> None:
    base = MapDataset.range(4)
    doubled = base.map(lambda x: 2 * x)
    assert list(base) == [0, 1, 2, 3]
    assert list(doubled) == [0, 2, 4, 6]
    assert list(doubled) == list(doubled)


def test_with_parents_copies_a_stage_over_new_parents_and_leaves_it_unchanged() -> None:
    base = MapDataset.range(4).seed(3)
    doubled = base.map(lambda x: 2 * x)
    other = MapDataset.range(10, 13)
    copied = doubled.with_parents(other)
    assert type(copied) is type(doubled) and copied.parents == (other,)
    assert list(copied) == [20, 22, 24]
    assert doubled.parents == (base,) and list(doubled) == [0, 2, 4, 6]
    zipped = ZipMapDataset([MapDataset.range(2), MapDataset.range(2)])
    rezipped = zipped.with_parents(MapDataset.range(5, 7), MapDataset.range(7, 9))
    assert list(rezipped) == [(5, 7), (6, 8)] and list(zipped) == [(0, 0), (1, 1)]


def test_apply_runs_transforms_in_order() -> None:
    class AddOne(transforms.Map):
        def map(self, element: int) -> int:
            return element + 1

    steps = [
        AddOne(),
        transforms.Filter(lambda x: x % 2 == 0),
        transforms.MapWithIndex(lambda i, x: (i, x)),
    ]
    assert list(MapDataset.range(5).apply(steps)) == [(1, 2), (3, 4)]
    batched = (
        MapDataset.range(5)
        .to_iter_dataset()
        .apply([AddOne(), transforms.Batch(2, drop_remainder=True)])
    )
    assert [b.tolist() for b in batched] == [[1, 2], [3, 4]]
    draws = (
        MapDataset.range(3)
        .seed(1)
        .apply(transforms.RandomMap(lambda x, rng: int(rng.integers(100))))
    )
    assert list(draws) == [0, 33, 81]


def test_apply_rejects_things_that_are_not_transforms() -> None:
    with pytest.raises(TypeError, match=r"Wrap a plain function as chute.transforms.Map"):
        MapDataset.range(3).apply([lambda x: x])


def test_pipe_passes_the_dataset_first() -> None:
    ds = MapDataset.range(6).pipe(lambda d, k: d.slice(slice(0, k)), 2)
    assert list(ds) == [0, 1]


def test_transforms_need_a_function() -> None:
    with pytest.raises(TypeError, match=r"needs a function"):
        transforms.Map()
    with pytest.raises(TypeError, match=r"takes a callable"):
        transforms.Map(3)  # type: ignore[arg-type]
    assert chute.MapTransform(lambda x: x + 1).map(1) == 2
    assert "lambda" in repr(transforms.Map(lambda x: x))


def test_repr_shows_the_pipeline() -> None:
    text = repr(MapDataset.range(10).seed(42).shuffle().batch(2))
    assert "BatchMapDataset" in text and "ShuffleMapDataset" in text and "seed=42" in text


def test_repeat_without_count_is_maxsize_long() -> None:
    ds = MapDataset.range(10).repeat().batch(128, drop_remainder=True)
    assert len(MapDataset.range(10).repeat()) == sys.maxsize
    assert len(ds) == sys.maxsize // 128
    assert ds[10**15].shape == (128,)


def test_iterating_a_map_dataset_skips_filtered_elements() -> None:
    ds = MapDataset.range(10).filter(lambda x: x % 2)
    assert ds[0] is None and ds[1] == 1
    assert list(ds) == [1, 3, 5, 7, 9]
    assert list(ds.to_iter_dataset(allow_nones=True))[:2] == [None, 1]


def test_help_and_inspect_show_the_constructor_signature() -> None:
    # Grain shows the same for MapDataset (not the metaclass's *args, **kwargs).
    assert (
        str(inspect.signature(MapDataset)) == "(parents: 'MapDataset | Sequence[MapDataset]' = ())"
    )
    assert str(inspect.signature(ZipMapDataset)) == "(parents: 'Sequence[MapDataset[Any]]')"
    assert list(inspect.signature(type(MapDataset.range(3).map(str))).parameters) == [
        "parent",
        "transform",
    ]
    assert list(inspect.signature(DatasetIterator).parameters) == ["parents"]
    page = pydoc.render_doc(MapDataset, renderer=pydoc.plaintext)
    assert "MapDataset(parents: 'MapDataset | Sequence[MapDataset]' = ())" in page
    assert "*args" not in page.split("\n", 5)[3]
