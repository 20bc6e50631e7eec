"""apply_transformations and select_from_datasets; outputs observed from Grain 0.2.18."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chute import MapDataset, transforms
from chute._core.transforms import apply_transformations
from chute._stages.mix import DatasetSelectionMap


class Times10(transforms.Map):
    def map(self, x: int) -> int:
        return x * 10


class Every20(transforms.Filter):
    def filter(self, x: int) -> bool:
        return x % 20 == 0


class Draw(transforms.RandomMap):
    def random_map(self, x: int, rng: np.random.Generator) -> int:
        return int(rng.integers(0, 100))


class Split(transforms.FlatMap):
    max_fan_out = 2

    def flat_map(self, x: int) -> list[int]:
        return [x, -x]


def _plain(ds: Any) -> list[Any]:
    return [np.asarray(x).tolist() for x in ds]


def test_applies_one_or_many_transforms_like_grain() -> None:
    assert _plain(apply_transformations(MapDataset.range(6), Times10())) == [0, 10, 20, 30, 40, 50]
    assert _plain(apply_transformations(MapDataset.range(6), (Times10(), Every20()))) == [0, 20, 40]
    assert _plain(apply_transformations(MapDataset.range(6).seed(3), [Draw()])) == [
        38,
        54,
        62,
        51,
        52,
        27,
    ]
    assert _plain(apply_transformations(MapDataset.range(3).to_iter_dataset(), [Split()])) == [
        0,
        0,
        1,
        -1,
        2,
        -2,
    ]
    batched = apply_transformations(MapDataset.range(7), [transforms.Batch(3, drop_remainder=True)])
    assert _plain(batched) == [[0, 1, 2], [3, 4, 5]]
    ds = MapDataset.range(7)
    assert apply_transformations(ds, []) is ds


def test_refuses_what_is_not_a_dataset_or_a_transform() -> None:
    with pytest.raises(TypeError, match="MapDataset or an IterDataset"):
        apply_transformations([1, 2], Times10())
    with pytest.raises(TypeError, match="chute.transforms"):
        apply_transformations(MapDataset.range(3), lambda x: x)


class Alternate(DatasetSelectionMap):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index % 2, index // 2


def test_select_from_datasets_matches_grain() -> None:
    ds = MapDataset.select_from_datasets(
        [MapDataset.range(3), MapDataset.range(10, 12)], Alternate()
    )
    assert len(ds) == 6
    assert list(ds) == [0, 10, 1, 11, 2, 10]
    assert [ds[i] for i in range(6, 9)] == [0, 11, 1]  # later epochs go on past len
    assert ds[100] == 2
    assert list(ds[1:4]) == [10, 1, 11]
    with pytest.raises(TypeError):
        DatasetSelectionMap()  # type: ignore[abstract]
