"""The DataLoader's per-worker pipeline, built from the dataset engine.

A DataLoader reads a *stream* of sampler positions: an explicit list of
``pending`` positions followed by every position from ``tail`` up to the
sampler's length.  A fresh loader's stream is just ``0, 1, 2, ...``; a loader
restored with a different number of workers carries the positions the old
layout left half-read in ``pending``.  Worker ``w`` of ``W`` reads
``stream[w::W]``: positions become record keys (the sampler's vectorised
lookup), keys become data (the source's batched ``__getitems__`` when it has
one), and the operations run on ``Record(metadata, data)``.  Element-wise
operations before the first batch run inside the chunked MapDataset reads;
the rest run as IterDataset stages.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chute._core.dataset import Indices, IterDataset, MapDataset
from chute._core.errors import Origin
from chute._core.options import ReadOptions
from chute._core.seeding import KeyedRng
from chute._core.transforms import (
    TRANSFORM_TYPES,
    Batch,
    Filter,
    FlatMap,
    Map,
    MapWithIndex,
    RandomMap,
    TfRandomMap,
)
from chute._core.tree import stack
from chute._loader import none_records
from chute._loader.capabilities import ActsOnRecords, BuildsLoaderStage, KnowsRecordKeys
from chute._loader.legacy_operation import RecordOperation
from chute._loader.none_records import UnboxingBatch, boxed
from chute._loader.record import Record, RecordMetadata
from chute._stages._origin import function_name, locate
from chute._stages.batch import BatchIterDataset, leaves_stacked_by
from chute._stages.capabilities import WrapsFunction
from chute._stages.flat_map import FlatMapIterDataset
from chute._stages.map import MapIterDataset
from chute._stages.source_block import mark_internal
from chute._stages.source_dataset import SourceMapDataset
from chute._stages.streams import Stream, StreamMapDataset


class _ReadMapDataset(MapDataset[Any]):
    """Sampler positions to data read from the source, or to ``Record``s with metadata."""

    def __init__(
        self,
        positions: MapDataset[int],
        sampler: Any,
        source: SourceMapDataset,
        shard: tuple[int, int],
        *,
        records: bool,
    ) -> None:
        super().__init__(positions)
        self._sampler, self._source, self._shard = sampler, source, shard
        self._records = records
        self._keys = sampler._record_keys if isinstance(sampler, KnowsRecordKeys) else None

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        positions = self._positions(indices)
        if self._keys is not None:
            keys = np.asarray(self._keys(np.asarray(positions, dtype=np.int64))).tolist()
            if not self._records:
                return boxed(self._source._getitems(keys))
            metas = [RecordMetadata(p, k) for p, k in zip(positions, keys)]
        else:
            metas = [self._sampler[p] for p in positions]
            keys = [m.record_key for m in metas]
        data = self._source._getitems(keys)
        if not self._records:
            return boxed(data)
        return [Record(m, d) for m, d in zip(metas, data)]

    def _positions(self, indices: Indices) -> list[int]:
        """The sampler positions that ``indices`` read."""
        positions = self._parent._getitems(indices)
        shard_index, shard_count = self._shard
        if shard_count > 1:
            positions = [shard_index + shard_count * p for p in positions]
        return positions

    def _parent_index(self, index: int) -> Origin | None:
        """The source record element ``index`` reads: its sampler record key (error notes)."""
        [position] = self._positions([index])
        if self._keys is not None:
            key = int(np.asarray(self._keys(np.asarray([position], dtype=np.int64)))[0])
        else:
            key = int(self._sampler[position].record_key)
        return locate(self._source, key)


class _OnData:
    """Applies a user function to a record's data (the function's name shows in errors).

    A random map draws from one ``KeyedRng`` per thread: chunks of records are read
    ahead on several threads, and a generator shared between them would hand one
    record the numbers of another.
    """

    def __init__(self, fn: Callable[..., Any], kind: str, seed: int | None) -> None:
        self._fn, self._kind, self._seed = fn, kind, seed
        self.__qualname__ = function_name(fn)
        self._rngs = threading.local()

    def __call__(self, record: Record) -> Any:
        kind = self._kind
        if kind == "filter":
            return self._fn(record.data)
        if kind == "map":
            record.data = self._fn(record.data)
        elif kind == "map_with_index":
            record.data = self._fn(record.metadata.index, record.data)
        else:
            record.data = self._fn(record.data, self._element_rng(record.metadata))
        return record

    def _element_rng(self, metadata: RecordMetadata) -> np.random.Generator:
        if metadata.rng is not None:
            return metadata.rng
        if self._seed is None:
            raise ValueError(
                "a RandomMap operation needs a seeded sampler: pass seed=... to the "
                "sampler (e.g. IndexSampler(..., seed=0))."
            )
        rng = getattr(self._rngs, "rng", None)
        if rng is None:
            rng = self._rngs.rng = KeyedRng()
        return rng.at(self._seed + metadata.index)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_rngs": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._rngs = threading.local()


def _element_wise(op: Any, seed: int | None) -> tuple[str, _OnData] | None:
    """(how to apply, function) for a per-record operation, or None."""
    for kind, method, cls in (
        ("map", "map", Map),
        ("random_map", "random_map", RandomMap),
        ("random_map", "np_random_map", TfRandomMap),
        ("map_with_index", "map_with_index", MapWithIndex),
        ("filter", "filter", Filter),
    ):
        if isinstance(op, cls):
            return ("filter" if kind == "filter" else "map"), _OnData(
                getattr(op, method), kind, seed
            )
    return None


def _batch_records(
    batch_fn: Callable[[Sequence[Any]], Any],
) -> Callable[[Sequence[Record]], Record]:
    def combine(records: Sequence[Record]) -> Record:
        return Record(records[-1].metadata, batch_fn([r.data for r in records]))

    combine._fn = batch_fn  # type: ignore[attr-defined]  # named in error notes
    return combine


def _split_record(fn: Callable[[Any], Any]) -> Callable[[Record], list[Record]]:
    def split(record: Record) -> list[Record]:
        return [Record(record.metadata, piece) for piece in fn(record.data)]

    return split


def needs_records(operations: Sequence[Any]) -> bool:
    """Whether any operation reads record metadata (its index or its RNG)."""
    return any(
        isinstance(op, (RandomMap, TfRandomMap, MapWithIndex))
        or not isinstance(op, TRANSFORM_TYPES)
        for op in operations
    )


def worker_dataset(
    stream: Stream,
    worker: int,
    worker_count: int,
    sampler: Any,
    source: SourceMapDataset,
    operations: Sequence[Any],
    read_options: ReadOptions | None,
    seed: int | None,
    shard: tuple[int, int] = (0, 1),
) -> IterDataset[Any]:
    """What worker ``worker`` of ``worker_count`` produces, in its order.

    When no operation reads record metadata, the operations run on the data
    itself; otherwise on ``Record``s, unwrapped at the end.
    """
    positions: MapDataset[int] = StreamMapDataset(stream)
    if worker_count > 1:
        positions = mark_internal(positions.slice(slice(worker, None, worker_count)))
    if not needs_records(operations):
        return _apply(
            _ReadMapDataset(positions, sampler, source, shard, records=False),
            operations,
            read_options,
            on_data=True,
        )
    records = _ReadMapDataset(positions, sampler, source, shard, records=True)
    wrapped = [_on_records(op, seed) for op in operations]
    return _apply(records, wrapped, read_options).map(_data_of)


def _data_of(record: Record) -> Any:
    return record.data


def stacked_by(dataset: IterDataset[Any], leaves_fn: Callable[[list[Any]], Any]) -> Any:
    """A worker's pipeline whose default batches combine their leaves with ``leaves_fn``.

    What ``leaves_stacked_by`` does for a pipeline that ends in a batch, done also
    for one whose records (the operations need their RNG or index) are batched
    last and unwrapped after: the batch of data is still the element sent next, so
    a worker can stack it straight into its shared memory.
    """
    if (
        isinstance(dataset, BatchIterDataset)
        and isinstance(dataset._batch_fn, UnboxingBatch)
        and dataset._batch_fn._fn is stack
    ):
        batched = copy.copy(dataset)  # data batched last: None records given back as None
        batched._batch_fn = UnboxingBatch(functools.partial(stack, leaves_fn=leaves_fn))
        return batched
    if isinstance(dataset, MapIterDataset) and dataset._fn is _data_of:
        batch = dataset._parent
        wrapped = batch._batch_fn if isinstance(batch, BatchIterDataset) else None
        if isinstance(wrapped, WrapsFunction) and wrapped._fn is stack:
            batched = copy.copy(batch)
            batched._batch_fn = _batch_records(functools.partial(stack, leaves_fn=leaves_fn))
            return dataset.with_parents(batched)
    return leaves_stacked_by(dataset, leaves_fn)


def _on_records(op: Any, seed: int | None) -> Any:
    """The operation rewritten to act on ``Record``s."""
    step = _element_wise(op, seed)
    if step is not None:
        return Filter(step[1]) if step[0] == "filter" else Map(step[1])
    if isinstance(op, ActsOnRecords):  # an operation with its own stage (PackAndBatchOperation)
        return op._on_records()
    if isinstance(op, Batch):
        return Batch(op.batch_size, op.drop_remainder, _batch_records(op.batch_fn or stack))
    if isinstance(op, FlatMap):
        return FlatMap(_split_record(op.flat_map))
    if callable(op):  # records in, records out (Grain's legacy operation protocol)
        return RecordOperation(op)
    raise TypeError(f"DataLoader: unsupported operation {op!r}.")


def _apply(
    ds: MapDataset[Any],
    operations: Sequence[Any],
    read_options: ReadOptions | None,
    *,
    on_data: bool = False,
) -> Any:
    """Element-wise operations before the first batch run in the chunked reads.

    ``on_data``: the reads are the records' data, ``None`` carried as
    ``NONE_RECORD`` (none_records.py) up to the first stage after them.
    """
    rest = list(operations)
    while rest and isinstance(rest[0], (Map, Filter)):
        op = rest.pop(0)
        if not on_data:
            ds = ds.filter(op) if isinstance(op, Filter) else ds.map(op)
        elif isinstance(op, Filter):
            ds = none_records.FilterMapDataset(ds, op)
        else:
            ds = none_records.MapMapDataset(ds, op)
    it: Any = ds.to_iter_dataset(read_options)
    if on_data and rest:
        it, rest = _first_on_data(it, rest)
    for op in rest:
        if isinstance(op, BuildsLoaderStage):
            it = op._loader_stage(it)
        elif isinstance(op, Filter):
            it = it.filter(op)
        elif isinstance(op, Map):
            it = it.map(op)
        elif isinstance(op, Batch):
            it = it.batch(op.batch_size, drop_remainder=op.drop_remainder, batch_fn=op.batch_fn)
        else:
            it = FlatMapIterDataset(it, op)
    return it


def _first_on_data(it: IterDataset[Any], rest: list[Any]) -> tuple[IterDataset[Any], list[Any]]:
    """The first stage after the chunked reads of data, given ``None`` for ``NONE_RECORD``.

    Returns the pipeline with that stage and the operations still to apply.
    """
    op, after = rest[0], rest[1:]
    if isinstance(op, Batch) and not isinstance(op, BuildsLoaderStage):
        batch_fn = UnboxingBatch(op.batch_fn or stack)
        return it.batch(op.batch_size, drop_remainder=op.drop_remainder, batch_fn=batch_fn), after
    if isinstance(op, FlatMap):
        return FlatMapIterDataset(it, none_records.unboxing(op.flat_map, op)), after
    return it.map(none_records.unbox), rest  # packing: one more call per record
