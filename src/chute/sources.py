"""Data sources: random-access readers that ``MapDataset.source`` and the DataLoader start from.

Any object with ``__len__`` and ``__getitem__`` is a source (see
``RandomAccessDataSource``); these are the ones chute ships.
``SharedMemoryDataSource`` is also available under Grain's legacy name
``InMemoryDataSource``.
"""

from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.parquet.source import ParquetDataSource
from chute._sources.protocol import RandomAccessDataSource
from chute._sources.range import RangeDataSource
from chute._sources.shared_memory import SharedMemoryDataSource

__all__ = [
    "ArrayRecordDataSource",
    "ParquetDataSource",
    "RandomAccessDataSource",
    "RangeDataSource",
    "SharedMemoryDataSource",
]
