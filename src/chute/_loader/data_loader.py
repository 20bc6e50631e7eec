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

import functools
import json
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from chute._core.config import config
from chute._core.errors import CheckpointError, add_note, closed_error
from chute._core.options import RayExecutor, ReadOptions
from chute._core.sharding import NoSharding, ShardOptions
from chute._core.transforms import TRANSFORM_TYPES, Batch, FlatMap, Map, MapWithIndex, RandomMap
from chute._core.validate import check_int
from chute._execution import launch, processes, worker_seeds
from chute._execution.pool import PoolSpec, WorkerPool
from chute._loader.grain_state import is_grain_loader_state, loader_from_grain
from chute._loader.loader_state_check import check_loader_state
from chute._loader.none_records import unbox
from chute._loader.pack_and_batch import PackAndBatchOperation
from chute._loader.pipeline import stacked_by, worker_dataset
from chute._loader.samplers import IndexSampler
from chute._stages.source_dataset import SourceMapDataset, start_downloads
from chute._stages.streams import Stream, positions_of
from chute._stats import instrument
from chute._stats.collector import LoaderCollector
from chute._stats.records import StageRecord

STATE_VERSION = 1


def _describe_source(source: Any) -> str:
    """A short, stable description of a source, for checkpoint checks."""
    kind = type(source)
    if isinstance(source, (list, tuple, range, np.ndarray)) or kind.__repr__ is object.__repr__:
        return f"{kind.__module__}.{kind.__qualname__}(len={len(source)})"
    return repr(source)


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
            f"DataLoader(data_source={_describe_source(self._data_source)}, "
            f"sampler={self._sampler!r}, operations={list(self._operations)!r}, "
            f"worker_count={self._worker_count})"
        )


def _iterate(ds: Any, tracked: bool) -> Any:
    """``iter(ds)``; when ``tracked``, of a timed copy, with the collector of its figures."""
    if not tracked:
        return iter(ds)
    timed, collector = instrument.instrument(ds)
    it = iter(timed)
    it._chute_stats = collector
    return it


class DataLoaderIterator:
    """Iterates a DataLoader; ``get_state()``/``set_state()`` checkpoint it as JSON bytes.

    ``next()``, ``get_state()`` and ``set_state()`` take turns (a lock), so a
    checkpoint may be taken from another thread while the training loop
    iterates: the state is the position between two batches the loop received.

    Args:
        loader: The DataLoader to read; ``iter(loader)`` builds this for you.
    """

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._closed = False
        self._lock = threading.RLock()
        loader._epochs += 1
        self._tracked = bool(config.py_debug_mode)
        spec = PoolSpec(
            share=self._worker_dataset,
            executor=loader._executor,
            buffer_size=loader._buffer_size,
            base_seed=worker_seeds.base_seed(loader._seed, loader._epochs),
            stack_batches=stacked_by,
            inline=None
            if loader._worker_count
            else functools.partial(_iterate, tracked=self._tracked),
            head_start=functools.partial(start_downloads, loader._source),
        )
        self._workers = WorkerPool(spec, max(1, loader._worker_count), self._everything())
        if self._tracked:  # statistics: the workers time their pipelines, and this times next()
            name = f"DataLoader({loader._worker_count} workers)"
            self._chute_stats = LoaderCollector(lambda: self._workers.workers, name)
            instrument.time_iterator(self, StageRecord(), any_class=True)
            self._chute_stats.watch(self)

    def _worker_dataset(self, w: int, workers: int, stream: Stream | None) -> Any:
        """Worker ``w`` of ``workers``: its positions of ``stream``, read and transformed."""
        loader = self._loader
        ds = worker_dataset(
            stream or self._everything(),
            w,
            workers,
            loader._sampler,
            loader._source,
            loader._operations,
            loader._read_options,
            loader._seed,
            loader._shard,
        )
        return instrument.marked(ds) if self._tracked and loader._worker_count else ds

    def _everything(self) -> Stream:
        """All the positions this loader reads, in order: the stream its workers start on."""
        return Stream((), 0, self._loader._length())

    def _stream(self) -> Stream:
        """The positions the workers share now (the pool of a loader always has a stream)."""
        return self._workers.stream or self._everything()

    def __iter__(self) -> DataLoaderIterator:
        return self

    def __next__(self) -> Any:
        with self._lock:
            if self._closed:
                raise closed_error("DataLoaderIterator")
            return unbox(next(self._workers))  # a record whose data is None (none_records.py)

    def _buffer_fill(self) -> tuple[int, int]:
        """Workers with an element ready, and the workers (read by the statistics only)."""
        return self._workers.buffer_fill()

    def start_prefetch(self) -> None:
        """Starts reading ahead now; worker processes are already started with the iterator."""
        if self._closed:
            raise closed_error("DataLoaderIterator")
        self._workers.start_prefetch()

    # -- checkpoints -----------------------------------------------------------------

    def get_state(self) -> bytes:
        """The loader's position: the workers' positions and whose turn it is.

        Returns:
            JSON bytes, small and independent of the buffered elements.
        """
        with self._lock:
            return self._get_state()

    def _get_state(self) -> bytes:
        workers = self._workers.get_state()
        states, stream = workers["workers"], self._stream()
        state = {
            "version": STATE_VERSION,
            "worker_count": len(states),
            "turn": workers["turn"],
            "exhausted": workers["exhausted"],
            "stream": {"pending": list(stream.pending), "tail": stream.tail},
            "positions": positions_of(states),
            "workers": states,
            "sampler": repr(self._loader._sampler),
            "data_source": _describe_source(self._loader._data_source),
            "shard_options": self._loader._describe_shard(),
        }
        return json.dumps(state).encode()

    def set_state(self, state: bytes | str) -> None:
        """Resumes at a position from ``get_state()``, also with another ``worker_count``.

        The whole state is checked before a worker stops; a state that is
        refused leaves the iterator where it was.

        Args:
            state: The bytes (or str) that ``get_state()`` returned.

        Raises:
            CheckpointError: The state comes from a loader built differently, is
                damaged (the message names the key), or cannot move to this worker
                count (the message says why).
        """
        with self._lock:
            saved = self._parse(state)
            check_loader_state(self._loader, saved)
            self._check_worker_count(saved)
            try:
                before: bytes | None = self._get_state()
            except Exception:  # a worker died before its first state: no position to go back to
                before = None
            try:
                self._restore(saved)
            except CheckpointError as exc:  # found while an inline worker replayed its pulls
                if before is not None:
                    self._restore(self._parse(before))
                    add_note(exc, "chute: the iterator is back where it was before set_state().")
                raise

    def _check_worker_count(self, saved: dict[str, Any]) -> None:
        """Raises unless ``saved`` restores with this loader's worker count."""
        if saved["worker_count"] == max(1, self._loader._worker_count):
            return
        problem = self._loader._relayout_problem()
        if problem is None and saved["positions"] is None:
            problem = "a worker stopped part way through a batch (after an error)"
        if problem is not None:
            raise CheckpointError(
                f"this checkpoint was saved with {saved['worker_count']} worker(s) and cannot be "
                f"restored into a DataLoader with worker_count={self._loader._worker_count}: "
                f"{problem}. Restore it with the saved worker count."
            )

    def _restore(self, saved: dict[str, Any]) -> None:
        stream = Stream(
            tuple(saved["stream"]["pending"]), int(saved["stream"]["tail"]), self._loader._length()
        )
        workers = max(1, self._loader._worker_count)
        if saved["worker_count"] == workers:  # new workers at the saved states
            turn, exhausted = saved["turn"], saved["exhausted"]
            self._workers.restore(stream, saved["workers"], turn, exhausted, in_place=False)
        else:
            self._workers.redeal(stream, saved["worker_count"], saved["positions"], workers)

    def _parse(self, state: bytes | str) -> dict[str, Any]:
        try:
            saved = json.loads(state)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(
                f"DataLoaderIterator.set_state() takes the bytes returned by get_state() ({exc})."
            ) from None
        allowed = getattr(self, "_allow_pipeline_change", False)
        if is_grain_loader_state(saved):  # saved by Grain's DataLoader
            try:
                return loader_from_grain(self._loader, saved, check=not allowed)
            except CheckpointError:
                raise
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise CheckpointError(
                    f"DataLoaderIterator.set_state(): the Grain DataLoader state is damaged "
                    f"({type(exc).__name__}: {exc}); pass the bytes Grain's get_state() returned."
                ) from None
        version = saved.get("version") if isinstance(saved, dict) else None
        if type(version) is not int or version != STATE_VERSION:
            raise CheckpointError(
                f"DataLoaderIterator.set_state(): unsupported state version {version!r} "
                f"(this chute reads version {STATE_VERSION})."
            )
        for key, mine in (
            ("sampler", repr(self._loader._sampler)),
            ("data_source", _describe_source(self._loader._data_source)),
            ("shard_options", self._loader._describe_shard()),
        ):
            if allowed or (key == "shard_options" and key not in saved):  # not in older states
                continue
            if key not in saved:
                raise CheckpointError(
                    f"DataLoaderIterator.set_state(): the state does not record its {key} (no "
                    f"{key!r} entry; it holds {sorted(saved)}), so it cannot be checked against "
                    f"this DataLoader's {key} {mine}. Pass the bytes that "
                    "DataLoaderIterator.get_state() returned."
                )
            if saved[key] != mine:
                raise CheckpointError(
                    f"the checkpoint was saved with {key} {saved[key]} but this DataLoader "
                    f"has {mine}; restore it into a DataLoader built the same way (changed on "
                    "purpose? call chute.checkpoint.allow_pipeline_change(iterator) first)."
                )
        return saved

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Stops the workers (threads and processes); ``next()`` afterwards raises."""
        if not self._closed:
            self._closed = True
            self._workers.close()

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
