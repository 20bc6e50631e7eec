"""Placeholder: filled in by its own change."""

from typing import Any

from chute._core.dataset import IterDataset, MapDataset


class MixedMapDataset(MapDataset[Any]):
    pass


class ConcatenateMapDataset(MapDataset[Any]):
    pass


class SelectionMapDataset(MapDataset[Any]):
    pass


class MixedIterDataset(IterDataset[Any]):
    pass
