"""map, map_with_index and random_map on both dataset kinds."""

from __future__ import annotations

import numpy as np
import pytest

from chute import MapDataset, ReadOptions, transforms
from chute.experimental import assert_equal_output_after_checkpoint


def test_map_applies_a_callable_or_a_transform() -> None:
    class Double(transforms.Map):
        def map(self, element: int) -> int:
            return 2 * element

    assert list(MapDataset.range(4).map(lambda x: x + 1)) == [1, 2, 3, 4]
    assert list(MapDataset.range(4).map(Double())) == [0, 2, 4, 6]
    assert list(MapDataset.range(4).to_iter_dataset().map(Double())) == [0, 2, 4, 6]


def test_map_with_index_gets_the_global_index() -> None:
    ds = MapDataset.range(3).map_with_index(lambda i, x: (i, x))
    assert [ds[i] for i in range(5)] == [(0, 0), (1, 1), (2, 2), (3, 0), (4, 1)]
    shuffled = MapDataset.range(5).shuffle(seed=1).map_with_index(lambda i, x: (i, x))
    assert list(shuffled) == [(0, 1), (1, 2), (2, 3), (3, 0), (4, 4)]


def test_iter_map_with_index_counts_this_stage_input() -> None:
    ds = (
        MapDataset.range(5)
        .filter(lambda x: x % 2)
        .to_iter_dataset()
        .map_with_index(lambda i, x: (i, x))
    )
    assert list(ds) == [(0, 1), (1, 3)]


def test_random_map_is_reproducible_and_per_element(read_options: ReadOptions) -> None:
    ds = MapDataset.range(50).seed(3).random_map(lambda x, rng: int(rng.integers(1_000_000)))
    first = list(ds.to_iter_dataset(read_options))
    assert first == list(ds.to_iter_dataset(read_options))
    assert len(set(first)) > 45
    assert ds[7] == first[7]


def test_random_map_transform_class() -> None:
    class Jitter(transforms.RandomMap):
        def random_map(self, element: int, rng: np.random.Generator) -> float:
            return element + rng.random()

    ds = MapDataset.range(3).random_map(Jitter(), seed=5)
    assert [int(x) for x in ds] == [0, 1, 2]


def test_wrong_transform_kind_names_the_right_method() -> None:
    with pytest.raises(TypeError, match="map, random_map, map_with_index"):
        MapDataset.range(3).map(transforms.RandomMap(lambda x, r: x))
    with pytest.raises(TypeError, match="takes a chute.transforms.Map or a callable"):
        MapDataset.range(3).map(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RandomMap or a callable"):
        MapDataset.range(3).to_iter_dataset().random_map(transforms.Map(lambda x: x), seed=1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MapDataset.range(23).map(lambda x: x * 3).to_iter_dataset(),
        lambda: (
            MapDataset.range(23)
            .seed(1)
            .random_map(lambda x, r: float(r.random()))
            .to_iter_dataset()
        ),
        lambda: MapDataset.range(23).to_iter_dataset().map_with_index(lambda i, x: i * x),
        lambda: (
            MapDataset.range(23)
            .to_iter_dataset()
            .seed(2)
            .random_map(lambda x, r: int(r.integers(9)))
        ),
    ],
)
def test_checkpoints_restore_exactly(make) -> None:  # type: ignore[no-untyped-def]
    assert_equal_output_after_checkpoint(make())
