"""Grain's legacy namespace: ``import chute.python as grain`` runs ``grain.python`` code.

The same objects as the top level of ``chute`` and its submodules, under the
names ``grain.python`` used (``PyGrainDatasetIterator`` is the DataLoader's
iterator, ``PyGrainCheckpointHandler`` the checkpoint handler, and so on).

>>> import chute.python as grain
>>> loader = grain.DataLoader(
...     data_source=grain.RangeDataSource(0, 4, 1),
...     sampler=grain.SequentialSampler(4, grain.NoSharding()),
...     operations=[grain.MapTransform(lambda x: x * 10)],
... )
>>> list(loader)
[0, 10, 20, 30]
>>> isinstance(iter(loader), grain.PyGrainDatasetIterator)
True
"""

from typing import Any

from chute import experimental
from chute._accel.checkpointing import CheckpointHandler as PyGrainCheckpointHandler
from chute._core.config import config
from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.options import MultiprocessingOptions, ReadOptions
from chute._core.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from chute._core.transforms import Batch, Transformation, Transformations
from chute._core.transforms import Filter as FilterTransform
from chute._core.transforms import Map as MapTransform
from chute._core.transforms import MapWithIndex as MapWithIndexTransform
from chute._core.transforms import RandomMap as RandomMapTransform
from chute._execution.shared_memory_array import SharedMemoryArray
from chute._loader.data_loader import DataLoader, load
from chute._loader.data_loader import DataLoaderIterator as PyGrainDatasetIterator
from chute._loader.operations import (
    BatchOperation,
    FilterOperation,
    MapOperation,
    Operation,
    RandomMapOperation,
)
from chute._loader.record import Record, RecordMetadata
from chute._loader.samplers import IndexSampler, Sampler, SequentialSampler
from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.protocol import RandomAccessDataSource
from chute._sources.range import RangeDataSource
from chute._sources.shared_memory import SharedMemoryDataSource as InMemoryDataSource
from chute._stages.mix import DatasetSelectionMap
from chute.constants import (
    DATASET_INDEX,
    EPOCH,
    INDEX,
    META_FEATURES,
    RECORD,
    RECORD_KEY,
    SEED,
)

__all__ = [
    "ArrayRecordDataSource",
    "Batch",
    "BatchOperation",
    "DATASET_INDEX",
    "DataLoader",
    "DatasetIterator",
    "DatasetSelectionMap",
    "EPOCH",
    "FilterOperation",
    "FilterTransform",
    "INDEX",
    "InMemoryDataSource",
    "IndexSampler",
    "IterDataset",
    "META_FEATURES",
    "MapDataset",
    "MapOperation",
    "MapTransform",
    "MapWithIndexTransform",
    "MultiprocessingOptions",
    "NoSharding",
    "Operation",
    "PyGrainCheckpointHandler",
    "PyGrainCheckpointRestore",
    "PyGrainCheckpointSave",
    "PyGrainDatasetIterator",
    "RECORD",
    "RECORD_KEY",
    "RandomAccessDataSource",
    "RandomMapOperation",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "SEED",
    "Sampler",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "SharedMemoryArray",
    "Transformation",
    "Transformations",
    "config",
    "experimental",
    "load",
]


def __getattr__(name: str) -> Any:
    # Orbax is imported only when its argument classes are asked for.
    if name in ("PyGrainCheckpointSave", "PyGrainCheckpointRestore"):
        from chute import checkpoint

        return getattr(checkpoint, name.removeprefix("PyGrain"))
    raise AttributeError(f"module 'chute.python' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
