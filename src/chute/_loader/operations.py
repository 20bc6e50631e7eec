"""Grain's legacy DataLoader operations, as thin forms of the transforms.

``MapOperation(fn)`` is ``transforms.Map(fn)``, ``RandomMapOperation(fn)`` is
``transforms.RandomMap(fn)``, ``FilterOperation(fn)`` is
``transforms.Filter(fn)`` and ``BatchOperation(...)`` is ``transforms.Batch(...)``,
so the DataLoader runs them on the same machinery.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from chute._core.transforms import Batch, Filter, Map, RandomMap
from chute._core.tree import StructureMismatchError, describe, stack
from chute._loader.legacy_operation import records_out
from chute._loader.record import Record


class MapOperation(Map):
    """Applies ``map_function`` to every record's data.

    Args:
        map_function: A function of a record's data that returns the new data.

    Also callable as Grain's legacy operations are, over an iterator of records:

    >>> from chute._loader.record import RecordMetadata
    >>> records = [Record(RecordMetadata(index=i, record_key=i), i) for i in range(3)]
    >>> [r.data for r in MapOperation(lambda x: x * 10)(iter(records))]
    [0, 10, 20]
    """

    def __init__(self, map_function: Callable[[Any], Any]) -> None:
        super().__init__(map_function)

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        return records_out(input_iterator, lambda r: self.map(r.data), repr(self))


class RandomMapOperation(RandomMap):
    """Applies ``random_map_function(data, rng)`` with the record's RNG.

    Args:
        random_map_function: A function of a record's data and its ``numpy.random.Generator``.
    """

    def __init__(self, random_map_function: Callable[[Any, np.random.Generator], Any]) -> None:
        super().__init__(random_map_function)

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        """Over an iterator of records, each with its ``metadata.rng``."""
        return records_out(input_iterator, self._on_record, repr(self))

    def _on_record(self, record: Record) -> Any:
        rng = record.metadata.rng
        if rng is None:
            raise ValueError(
                f"record {record.metadata.index} has no rng: RandomMapOperation needs records "
                "from a sampler with a seed (e.g. IndexSampler(..., seed=0))."
            )
        return self.random_map(record.data, rng)


class FilterOperation(Filter):
    """Keeps the records whose data ``condition_function`` accepts.

    Args:
        condition_function: A predicate of a record's data; records where it is false are
            dropped.
    """

    def __init__(self, condition_function: Callable[[Any], bool]) -> None:
        super().__init__(condition_function)

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        """The records of an iterator whose data the condition accepts."""
        kept = (r for r in input_iterator if self.filter(r.data))
        return records_out(kept, lambda r: r.data, repr(self))


@dataclasses.dataclass(frozen=True)
class BatchOperation(Batch):
    """Batches ``batch_size`` records (``batch_fn`` combines their data).

    Args:
        batch_size: Records per batch (positive).
        drop_remainder: Drop the last batch when it is short.
        batch_fn: Combines a list of records' data instead of stacking.
    """

    def _grains_low_size(self) -> str:
        return f"batch_size must be a positive integer. Got {self.batch_size}."

    def __call__(self, input_iterator: Iterable[Record]) -> Iterator[Record]:
        """Batches of an iterator's records, each with the metadata of its last record.

        Records of different structures raise ``StructureMismatchError`` (a
        ``TypeError``, as in Grain, and a ``ValueError``) with Grain's sentence.
        """
        batch: list[Record] = []
        for record in input_iterator:
            batch.append(record)
            if len(batch) == self.batch_size:
                yield Record(record.metadata.remove_record_key(), self._combine(batch))
                batch = []
        if batch and not self.drop_remainder:
            yield Record(batch[-1].metadata.remove_record_key(), self._combine(batch))

    def _combine(self, records: list[Record]) -> Any:
        data = [r.data for r in records]
        if self.batch_fn is not None:
            return self.batch_fn(data)
        try:
            return stack(data)
        except StructureMismatchError:
            raise _records_mismatch(data) from None


def _records_mismatch(data: list[Any]) -> StructureMismatchError:
    """Grain's sentence naming the records unlike the first, then chute's advice."""
    first = _structure(data[0])
    others = [p for p, d in enumerate(data) if _structure(d) != first]
    return StructureMismatchError(
        f"Record structures do not match. Record at position 0 has structure "
        f"{describe(data[0])}, while records at positions {others} have structures "
        f"[{', '.join(describe(data[p]) for p in others)}]. chute: BatchOperation stacks "
        "the data of records with one structure; make every record's data the same "
        "structure, or pass batch_fn= to combine them yourself."
    )


def _structure(tree: Any) -> Any:
    """What must match for records to stack: containers and keys, not the leaves."""
    if isinstance(tree, Mapping):
        return ("mapping", sorted((repr(k), _structure(v)) for k, v in tree.items()))
    if isinstance(tree, (list, tuple)):
        return (type(tree), [_structure(v) for v in tree])
    return None if tree is None else "leaf"


@typing.runtime_checkable
class Operation(typing.Protocol):
    """Grain's legacy protocol for a DataLoader operation: records in, records out.

    ``op(iterator_of_records)`` returns an iterator of ``Record``.  Annotations
    in code written for Grain use it; chute's own operations are the classes
    above.
    """

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]: ...
