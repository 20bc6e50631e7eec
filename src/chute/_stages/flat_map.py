"""Placeholder: filled in by its own change."""

from typing import Any

from chute._core.dataset import IterDataset, MapDataset


class FlatMapMapDataset(MapDataset[Any]):
    def __len__(self) -> int:
        raise NotImplementedError

    def _getitems(self, indices: Any) -> list[Any]:
        raise NotImplementedError


class FlatMapIterDataset(IterDataset[Any]):
    def __iter__(self) -> Any:
        raise NotImplementedError
