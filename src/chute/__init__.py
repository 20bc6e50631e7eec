"""chute: fast, deterministic, checkpointable data loading for ML training.

A drop-in for Grain: ``import chute as grain`` runs Grain code unchanged, with
the same elements in the same order, and faster.

>>> import chute as grain
>>> ds = grain.MapDataset.range(10).seed(42).shuffle().batch(4)
>>> [b.tolist() for b in ds]
[[1, 7, 6, 9], [0, 8, 4, 5], [3, 2]]
"""

from chute import experimental, transforms
from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.errors import (
    CheckpointError,
    ChuteError,
    ErrorBudgetExceededError,
    IteratorClosedError,
)
from chute._core.options import ReadOptions
from chute._core.transforms import Batch
from chute._core.transforms import Filter as FilterTransform
from chute._core.transforms import Map as MapTransform
from chute._core.transforms import MapWithIndex as MapWithIndexTransform
from chute._core.transforms import RandomMap as RandomMapTransform

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "CheckpointError",
    "ChuteError",
    "DatasetIterator",
    "ErrorBudgetExceededError",
    "FilterTransform",
    "IterDataset",
    "IteratorClosedError",
    "MapDataset",
    "MapTransform",
    "MapWithIndexTransform",
    "RandomMapTransform",
    "ReadOptions",
    "experimental",
    "transforms",
]
