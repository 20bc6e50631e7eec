"""``DataLoader``: a data source, a sampler and operations, read by workers.

Worker ``w`` of ``W`` owns the sampler positions ``w, w + W, ...``, runs the
operations (batching included) on its own records, and the loader hands out
the workers' outputs round-robin, skipping workers that ran out: the same
order as Grain's.  With ``worker_count=0`` one worker runs inline.

``get_state()`` returns JSON bytes: the workers' positions, whose turn it is,
and a description of the sampler, the source and the loader's shard that
``set_state()`` checks (``chute.checkpoint.allow_pipeline_change`` skips the
check).  A
state restores into a loader with another ``worker_count`` too: the positions
the old layout had only partly read are handed out first, then the rest, so
nothing is lost or repeated.  That needs every consumed position to be a
whole element: it is refused, with the reason, when a ``FlatMap`` splits
elements or a worker stopped part way through a batch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from chute._core.options import RayExecutor, ReadOptions
from chute._core.sharding import NoSharding, ShardOptions
from chute._core.transforms import TRANSFORM_TYPES, Batch, FlatMap, Map, MapWithIndex, RandomMap
from chute._core.validate import check_int
from chute._execution import launch, processes
from chute._loader.loader_iterator import STATE_VERSION, DataLoaderIterator, describe_source
from chute._loader.pack_and_batch import PackAndBatchOperation
from chute._loader.samplers import IndexSampler
from chute._stages.source_dataset import SourceMapDataset

# DataLoaderIterator, STATE_VERSION and describe_source live in loader_iterator; their
# old home still offers them.
__all__ = ["STATE_VERSION", "DataLoader", "DataLoaderIterator", "describe_source", "load"]


def _check_operations(operations: Any) -> tuple[Any, ...]:
    if not isinstance(operations, Sequence):
        raise TypeError(
            f"DataLoader: operations must be a sequence of transforms (got {operations!r})."
        )
    for k, op in enumerate(operations):
        if not isinstance(op, TRANSFORM_TYPES) and not callable(op):
            raise TypeError(
                f"DataLoader: operations[{k}] must be a chute.transforms object (Map, RandomMap, "
                f"MapWithIndex, Filter, FlatMap, Batch), a legacy operation, or a callable that "
                "takes an iterator of Records and returns one; got "
                f"{op!r} that is a {type(op).__name__}. Wrap a function of one element as "
                "chute.transforms.Map(fn)."
            )
    return tuple(operations)


class DataLoader:
    """Reads ``data_source`` in the order of ``sampler`` and applies ``operations``.

    Args:
      data_source: anything with ``__len__`` and ``__getitem__`` (a
        ``__getitems__`` batched read is used when present).
      sampler: an ``IndexSampler`` or ``SequentialSampler`` (or any object with
        ``__len__`` and ``__getitem__`` returning ``RecordMetadata``).
      operations: transforms applied in order (``Map``, ``RandomMap``,
        ``MapWithIndex``, ``Filter``, ``FlatMap``, ``Batch``, legacy operations).
      worker_count: workers sharing the sampler's positions round-robin
        (0 runs one inline).  Each worker seeds ``random``, NumPy's global
        generator and torch's (if imported) differently, per worker and per
        iterator; from the sampler's seed when it has one, so runs repeat.
      worker_buffer_size: elements each worker may buffer ahead.
      shard_options: shards the sampler's positions again, interleaved; give
        sharding either here or in the sampler, not both.
      read_options: how each worker reads its source (threads, prefetch).
      enable_profiling: accepted for compatibility; chute logs nothing extra.
      executor: chute's addition: where the workers run. None: local
        processes; a ``chute.RayExecutor``: actors on a Ray cluster, with the
        same elements, order and checkpoints as local workers.

    ``len(loader)`` is the number of elements (batches, after a ``Batch``) one
    pass yields, when the sampler is finite and no operation drops or splits
    elements.  A record whose data is ``None`` (read, or made by a ``Map``) is
    passed on like any other, as in Grain: only a ``Filter`` drops records.

    >>> import chute
    >>> loader = chute.DataLoader(
    ...     data_source=list(range(10)),
    ...     sampler=chute.SequentialSampler(num_records=10, shard_options=chute.NoSharding()),
    ...     operations=[chute.transforms.Map(lambda x: x * 2), chute.transforms.Batch(4)],
    ... )
    >>> len(loader), [b.tolist() for b in loader]
    (3, [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]])
    """

    def __init__(
        self,
        *,
        data_source: Any,
        sampler: Any,
        operations: Sequence[Any] = (),
        worker_count: int | None = 0,
        worker_buffer_size: int = 1,
        shard_options: ShardOptions | None = None,
        read_options: ReadOptions | None = None,
        enable_profiling: bool = False,
        executor: RayExecutor | None = None,
    ) -> None:
        self._source = SourceMapDataset(data_source)
        self._data_source, self._sampler = data_source, sampler
        self._operations = _check_operations(operations)
        self._worker_count = check_int(
            worker_count or 0,
            "DataLoader: worker_count",
            minimum=0,
            grains=(
                "Worker count should be greater than or equal zero."
                f"Current worker_count is {worker_count}."
            ),
        )
        negative = isinstance(worker_buffer_size, int) and worker_buffer_size < 0
        self._buffer_size = check_int(
            worker_buffer_size,
            "DataLoader: worker_buffer_size",
            minimum=1,
            grains=(  # Grain's words for a negative size (it accepts 0; chute needs 1)
                "Worker buffer size must be greater than or equal zero."
                f"Current worker_buffer_size is {worker_buffer_size}."
            )
            if negative
            else None,
        )
        if read_options is not None and not isinstance(read_options, ReadOptions):
            raise TypeError(
                f"DataLoader: read_options must be a chute.ReadOptions (got {read_options!r})."
            )
        self._read_options = read_options
        self._shard = self._check_sharding(shard_options)
        self._check_sampler()
        self._enable_profiling = bool(enable_profiling)
        self._epochs = -1  # iterators made so far, less one: each seeds its workers anew
        self._executor = launch.check_executor(executor, "DataLoader")
        if self._worker_count and self._executor is None:
            processes.prepare()  # a fork server, if one is needed, loads while the program goes on

    def _check_sharding(self, shard_options: Any) -> tuple[int, int]:
        """The (index, count) of the positions this loader reads.

        A sharded sampler's positions cover every shard (position ``i`` belongs
        to shard ``i % count``), so the loader reads its own shard's positions,
        whether the sharding is given to the sampler, to the loader, or to both
        with the same values.
        """
        if shard_options is not None and not isinstance(shard_options, ShardOptions):
            raise TypeError(
                f"DataLoader: shard_options must be a chute.ShardOptions (got {shard_options!r})."
            )
        own = getattr(self._sampler, "_shard_options", None)
        if shard_options is None:
            shard_options = own
        elif (
            own is not None
            and own.shard_count > 1
            and (
                (own.shard_index, own.shard_count)
                != (shard_options.shard_index, shard_options.shard_count)
            )
        ):
            raise ValueError(
                "DataLoader: sharding is given twice, differently, in the sampler "
                f"({own}) and in shard_options ({shard_options}); give it once."
            )
        if shard_options is None:
            self._drop_shard_remainder = False
            return (0, 1)
        self._drop_shard_remainder = bool(shard_options.drop_remainder)
        return (shard_options.shard_index, shard_options.shard_count)

    def _describe_shard(self) -> str:
        """The loader's own shard, as its checkpoints record it."""
        index, count = self._shard
        return f"shard {index} of {count}, drop_remainder={self._drop_shard_remainder}"

    def _check_sampler(self) -> None:
        sampler = self._sampler
        if not (hasattr(sampler, "__len__") and hasattr(sampler, "__getitem__")):
            raise TypeError(
                "DataLoader: sampler must be a chute sampler (IndexSampler, SequentialSampler) or "
                f"have __len__ and __getitem__ (got {type(sampler).__name__})."
            )
        records = getattr(sampler, "_num_records", None)
        if records is not None and records > len(self._source):
            raise ValueError(
                f"DataLoader: the sampler reads {records} records but the data source has only "
                f"{len(self._source)}; build the sampler with num_records=len(data_source)."
            )

    @property
    def _seed(self) -> int | None:
        return getattr(self._sampler, "_seed", None)

    def _length(self) -> int:
        """Positions this loader reads: shard ``s`` of ``k`` reads ``s, s + k, ...``.

        The first ``n % k`` shards read one more position unless
        ``drop_remainder``, so the shards together read every position once.
        """
        shard_index, shard_count = self._shard
        n = len(self._sampler)
        if shard_count == 1:
            return n
        if self._drop_shard_remainder:
            return n // shard_count
        return max(0, n - shard_index + shard_count - 1) // shard_count

    def _relayout_problem(self) -> str | None:
        if any(isinstance(op, FlatMap) for op in self._operations):
            return "a FlatMap operation splits elements, so a worker can stop inside one"
        if any(isinstance(op, PackAndBatchOperation) for op in self._operations):
            return "a PackAndBatchOperation packs each worker's own records into its batches"
        return None

    def __iter__(self) -> DataLoaderIterator:
        return DataLoaderIterator(self)

    def __len__(self) -> int:
        """Elements one pass yields: batches when the operations batch, as in PyTorch.

        Worker ``w`` of ``W`` batches its own positions ``w, w + W, ...``, so a
        pass ends with up to one short batch per worker.

        Raises:
            TypeError: The sampler repeats forever, or an operation (``Filter``,
                ``FlatMap``, packing) makes the count known only by reading.
        """
        if len(self._sampler) >= sys.maxsize:
            raise TypeError(
                "DataLoader has no len(): its sampler repeats forever (num_epochs=None); "
                "give the sampler a num_epochs to count the batches."
            )
        workers = max(1, self._worker_count)
        total = self._length()
        counts = [(total - w + workers - 1) // workers for w in range(workers)]
        for op in self._operations:
            if hasattr(op, "_loader_stage") or not isinstance(
                op, (Batch, Map, MapWithIndex, RandomMap)
            ):
                raise TypeError(
                    f"DataLoader has no len(): operation {op!r} drops, splits or packs "
                    "elements, so the count is known only by reading; count while iterating."
                )
            if isinstance(op, Batch):
                size, drop = op.batch_size, op.drop_remainder
                counts = [c // size if drop else -(-c // size) for c in counts]
        return sum(counts)

    def __repr__(self) -> str:
        """The source, sampler, operations (functions by name) and worker count."""
        return (
            f"DataLoader(data_source={describe_source(self._data_source)}, "
            f"sampler={self._sampler!r}, operations={list(self._operations)!r}, "
            f"worker_count={self._worker_count})"
        )


def load(
    source: Any,
    *,
    num_epochs: int | None = None,
    shuffle: bool = False,
    seed: int | None = None,
    shard_options: ShardOptions | None = None,
    transformations: Sequence[Any] = (),
    batch_size: int | None = None,
    drop_remainder: bool = False,
    worker_count: int | None = 0,
    read_options: ReadOptions | None = None,
    executor: RayExecutor | None = None,
) -> DataLoader:
    """A DataLoader over ``source`` with an ``IndexSampler`` built from the arguments.

    ``batch_size`` appends a ``Batch`` after ``transformations``.

    Args:
        source: Anything with ``__len__`` and ``__getitem__``.
        num_epochs: Passes over the source; None repeats forever.
        shuffle: Shuffle globally, differently in every epoch (needs ``seed``).
        seed: The shuffle's and random maps' seed.
        shard_options: Which shard this process reads; all of it by default.
        transformations: Operations applied in order, as in ``DataLoader``.
        batch_size: Appends a ``Batch`` of this size when given.
        drop_remainder: Drop the last, short batch.
        worker_count: Worker processes (0 reads inline).
        read_options: How each worker reads its source.
        executor: Where the workers run (see ``DataLoader``).

    >>> [b.tolist() for b in load(list(range(5)), num_epochs=1, batch_size=2)]
    [[0, 1], [2, 3], [4]]
    """
    sampler = IndexSampler(
        num_records=len(source),
        shard_options=shard_options if shard_options is not None else NoSharding(),
        shuffle=shuffle,
        num_epochs=num_epochs,
        seed=seed,
    )
    operations = list(transformations)
    if batch_size is not None:
        operations.append(Batch(batch_size, drop_remainder=drop_remainder))
    return DataLoader(
        data_source=source,
        sampler=sampler,
        operations=operations,
        worker_count=worker_count,
        read_options=read_options,
        executor=executor,
    )
