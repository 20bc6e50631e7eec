"""chute: fast, deterministic, checkpointable data loading for ML training.

A drop-in for Grain: ``import chute as grain`` runs Grain code unchanged, with
the same elements in the same order, and faster.

>>> import chute as grain
>>> ds = grain.MapDataset.range(10).seed(42).shuffle().batch(4)
>>> [b.tolist() for b in ds]
[[1, 7, 6, 9], [0, 8, 4, 5], [3, 2]]
"""

# Beside JAX, whose runtime makes forking unsafe, workers come from a fork server: start it first,
# in the background, so that it has loaded by the time the first pipeline iterates.
from chute._execution import processes as _processes

_processes.prepare(only_beside_jax=True)

# _grain, _stages and _stats install what _core calls up to (chute._core.registry): the stages
# that the fluent methods build, the statistics hooks, the Grain-state translation.  A worker
# process imports chute too (its fork server preloads it), so it gets them as well.
from chute import (  # noqa: F401
    _grain,
    _stages,
    _stats,
    checkpoint,
    constants,
    experimental,
    monitoring,
    multiprocessing,
    samplers,
    sharding,
    sources,
    transforms,
)
from chute._core.config import config
from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.errors import (
    CheckpointError,
    ChuteError,
    CredentialsNotFoundError,
    ErrorBudgetExceededError,
    FileChangedError,
    FilterThresholdError,
    IteratorClosedError,
    ObjectStoreError,
    SourceChangedError,
    WorkerDiedError,
)
from chute._core.options import MultiprocessingOptions, RayExecutor, ReadOptions
from chute._core.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from chute._core.transforms import Batch
from chute._core.transforms import Filter as FilterTransform
from chute._core.transforms import Map as MapTransform
from chute._core.transforms import MapWithIndex as MapWithIndexTransform
from chute._core.transforms import RandomMap as RandomMapTransform
from chute._loader.data_loader import DataLoader, DataLoaderIterator, load
from chute._loader.operations import (
    BatchOperation,
    FilterOperation,
    MapOperation,
    RandomMapOperation,
)
from chute._loader.record import Record, RecordMetadata
from chute._loader.samplers import IndexSampler, SequentialSampler
from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.protocol import RandomAccessDataSource
from chute._sources.range import RangeDataSource
from chute._sources.shared_memory import SharedMemoryDataSource
from chute._sources.shared_memory import SharedMemoryDataSource as InMemoryDataSource
from chute._stages.mix import DatasetSelectionMap

__version__ = "0.1.0"

__all__ = [
    "ArrayRecordDataSource",
    "Batch",
    "BatchOperation",
    "CheckpointError",
    "ChuteError",
    "CredentialsNotFoundError",
    "DataLoader",
    "DataLoaderIterator",
    "DatasetIterator",
    "DatasetSelectionMap",
    "ErrorBudgetExceededError",
    "FileChangedError",
    "FilterOperation",
    "FilterThresholdError",
    "FilterTransform",
    "InMemoryDataSource",
    "IndexSampler",
    "IterDataset",
    "IteratorClosedError",
    "MapDataset",
    "MapOperation",
    "MapTransform",
    "MapWithIndexTransform",
    "MultiprocessingOptions",
    "NoSharding",
    "ObjectStoreError",
    "RandomAccessDataSource",
    "RandomMapOperation",
    "RandomMapTransform",
    "RangeDataSource",
    "RayExecutor",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "SharedMemoryDataSource",
    "SourceChangedError",
    "WorkerDiedError",
    "checkpoint",
    "config",
    "constants",
    "experimental",
    "load",
    "monitoring",
    "multiprocessing",
    "samplers",
    "sharding",
    "sources",
    "transforms",
]
