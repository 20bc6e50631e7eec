"""filter on both dataset kinds."""

from __future__ import annotations

import pytest

from chute import MapDataset, transforms
from chute.experimental import assert_equal_output_after_checkpoint


def test_map_filter_leaves_none_holes() -> None:
    ds = MapDataset.range(6).filter(lambda x: x % 3 == 0)
    assert [ds[i] for i in range(6)] == [0, None, None, 3, None, None]
    assert len(ds) == 6


def test_map_after_filter_keeps_holes() -> None:
    ds = MapDataset.range(6).filter(lambda x: x > 3).map(lambda x: x * 10)
    assert list(ds) == [40, 50]


def test_iter_filter_with_transform_class() -> None:
    class Even(transforms.Filter):
        def filter(self, element: int) -> bool:
            return element % 2 == 0

    assert list(MapDataset.range(7).to_iter_dataset().filter(Even())) == [0, 2, 4, 6]


def test_filter_rejects_non_predicates() -> None:
    with pytest.raises(TypeError, match="Filter or a callable"):
        MapDataset.range(3).filter(transforms.Map(lambda x: x))
    with pytest.raises(TypeError, match="Filter or a callable"):
        MapDataset.range(3).to_iter_dataset().filter("x")  # type: ignore[arg-type]


def test_checkpoints_restore_exactly() -> None:
    assert_equal_output_after_checkpoint(
        MapDataset.range(40).filter(lambda x: x % 3).to_iter_dataset()
    )
    assert_equal_output_after_checkpoint(
        MapDataset.range(40).to_iter_dataset().filter(lambda x: x % 4 == 1)
    )
