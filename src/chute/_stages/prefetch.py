"""``MapDataset.to_iter_dataset``: reads a MapDataset in order, in chunks.

Indices are read in chunks through the batched ``_getitems`` path.  Chunk
sizes adapt so that one chunk takes about two milliseconds of work (eight in
a worker process, whose output waits for whole batches anyway, so that
the fixed cost of a chunk stays small beside elements of a millisecond or
more): cheap elements travel hundreds at a time, heavy ones a few at a time.  Chunks are
read inline or ahead on up to ``ReadOptions.num_threads`` threads, at the
read-ahead level that gives the consumer the most elements per second
(``chute._execution.tuning``).  Results are always consumed in index order,
so the output never depends on timing.

When a chunk raises, its elements are read again one by one: the ones that
work are returned in order, and each failing one raises its own exception
from the ``next()`` call that reaches it; the following ``next()`` carries on.

The holes a ``MapDataset.filter`` leaves are counted per window of 1,000
indices and checked against the pipeline's ``DatasetOptions`` filter
thresholds (see ``filter.py``) once every element of the window was returned.
Only windows read whole since the iterator started or was restored count.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import operator
import time
import weakref
from collections.abc import Iterator
from itertools import repeat
from typing import Any, TypeVar

import numpy as np

from chute._core import metrics
from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.errors import Origin
from chute._core.in_place_slice import sequential_block
from chute._core.options import ReadOptions
from chute._core.state_check import MAX_POSITION, count, fields
from chute._execution.daemon_pool import DaemonPool
from chute._execution.tuning import ReadAheadTuner, busy_clock, chunk_seconds, levels_for
from chute._stages._origin import locate
from chute._stages.filter import WINDOW, DropCheck
from chute._stages.source_block import push_down

T = TypeVar("T")


_MAX_CHUNK = 1024
#: Set while ``reads_inline()`` builds iterators: their reads run inline, without threads.
_INLINE: contextvars.ContextVar[bool] = contextvars.ContextVar("chute_reads_inline", default=False)
_NAME = "to_iter_dataset"


class PrefetchIterDataset(IterDataset[T]):
    """Iterates a MapDataset in index order, skipping filtered (``None``) elements."""

    _block: slice | None = None  # the block of the source set_slice(sequential_slice=True) took

    def __init__(
        self,
        parent: MapDataset[Any],
        *,
        read_options: ReadOptions | None = None,
        allow_nones: bool = False,
    ) -> None:
        if not isinstance(parent, MapDataset):
            raise TypeError(f"to_iter_dataset() needs a MapDataset (got {type(parent).__name__}).")
        if read_options is not None and not isinstance(read_options, ReadOptions):
            raise TypeError(
                f"read_options must be a chute.ReadOptions (got {read_options!r} that is a "
                f"{type(read_options).__name__})."
            )
        super().__init__(parent)
        self._read_options = read_options or ReadOptions()
        self._allow_nones = bool(allow_nones)

    def __iter__(self) -> DatasetIterator[Any]:
        options = self._read_options
        if _INLINE.get():
            options = dataclasses.replace(options, prefetch_buffer_size=0)
        return _PrefetchIterator(self._parent, options, self._allow_nones)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Reads only a slice of the MapDataset from now on, in place (Grain's sharding).

        ``sequential_slice=False``: the elements ``sl`` picks (``ds[sl]``) of
        what the dataset reads now, so slices compose as in Grain; ``True``:
        shard ``sl.start`` of ``sl.step`` as one contiguous block of the source,
        with the stages above it run within the block (a later call takes
        another block of the whole source, and the other slices stay on top).

        >>> ds = MapDataset.range(12).map(lambda x: x * 10).to_iter_dataset()
        >>> ds.set_slice(slice(0, None, 2))
        >>> ds.set_slice(slice(1, None, 3))
        >>> list(ds)
        [20, 80]
        """
        original = self.__dict__.setdefault("_original_parents", self._parents)[0]
        slices = self.__dict__.setdefault("_in_place_slices", [])
        if sequential_slice:
            sequential_block(sl, True, 0, _NAME)  # a malformed slice is refused now, not when read
            self._block = sl
        else:
            slices.append(sl)
        block = self._block
        parent = original
        if block is not None:
            parent = push_down(original, lambda n: sequential_block(block, True, n, _NAME))
        for each in slices:
            parent = parent.slice(each)
        self._parents = (parent,)

    def _describe(self) -> str:
        return f"{self._parent!r}, {self._read_options}"


@contextlib.contextmanager
def reads_inline() -> Iterator[None]:
    """While inside, ``to_iter_dataset`` iterators built on this thread read inline.

    ``virtual_shards`` builds its shards' iterators so: it reads many of them in
    turn, each a few elements at a time, where one read-ahead tuner and thread
    pool per shard would cost more than they save (workers read in parallel).
    """
    token = _INLINE.set(True)
    try:
        yield
    finally:
        _INLINE.reset(token)


def _read(ds: MapDataset[Any], start: int, stop: int) -> tuple[list[Any], float]:
    began = time.perf_counter()
    items = ds._getitems(np.arange(start, stop, dtype=np.int64))
    return items, time.perf_counter() - began


CLOSE_WAIT_S = 1.0  # how long close() waits for the reads in flight


def _shutdown(executor: DaemonPool) -> None:
    """Cancels the reads not started and waits a little for those in flight.

    A read that is almost done (a batch on its way from a bucket) then ends before
    ``close()`` returns, so a program that closes its iterator and then stops the data's
    server or deletes its files has no read left behind; a read that is stuck is left
    after ``CLOSE_WAIT_S`` (at exit, chute says which).
    """
    executor.shutdown(wait=True, cancel_futures=True, timeout=CLOSE_WAIT_S)


class _PrefetchIterator(DatasetIterator[Any]):
    _stage = "to_iter_dataset"
    _state_fields = fields(
        next_index=count(lambda it: it._length, why="the length of the MapDataset it reads")
    )

    def __init__(self, ds: MapDataset[Any], options: ReadOptions, allow_nones: bool) -> None:
        super().__init__()
        self._ds, self._length, self._allow_nones = ds, len(ds), allow_nones
        self._threads = options.num_threads if options.prefetch_buffer_size > 0 else 0
        self._buffer_size = max(1, options.prefetch_buffer_size)
        self._executor: DaemonPool | None = None
        self._chunk = 1
        levels = levels_for(self._threads) if options.autotune else [self._threads]
        self._tuner = ReadAheadTuner(levels)
        self._busy = busy_clock()
        self._chunk_seconds = chunk_seconds()
        self._holes = _HoleCount(self)
        self._holes._check.grain_name = lambda: (  # as Grain's filter-threshold message names it
            f"PrefetchDatasetIterator(read_options=ReadOptions(num_threads={options.num_threads}, "
            f"prefetch_buffer_size={options.prefetch_buffer_size}), allow_nones={allow_nones})"
        )
        self._start_at(0)
        metrics.add_buffer(self)

    def _start_at(self, index: int) -> None:
        self._holes.restart(index)
        self._items: list[Any] = []  # current chunk, reversed, popped from the end
        self._stop = index  # index just past the current chunk
        self._chunk_start = index
        self._read_index = index  # next index to schedule
        self._pending: collections.deque[tuple[int, int, Any]] = collections.deque()
        self._failures: dict[int, BaseException] = {}

    def __next__(self) -> Any:
        items = self._items
        while True:
            while items:
                x = items.pop()
                if x is None:
                    if self._failures:
                        exc = self._failures.pop(self._stop - len(items) - 1, None)
                        if exc is not None:
                            raise exc
                    if not self._allow_nones:
                        continue
                return x
            items = self._refill()

    def _next_many(self, count: int) -> list[Any]:
        """The next 1 to ``count`` elements, sliced off the current chunk.

        Returns what as many ``next()`` calls would; while the chunk holds an
        element whose read failed, it takes one element at a time, so the
        failure raises with nothing else taken.
        """
        while True:
            items = self._items
            if not items or self._failures:
                return [next(self)]
            out: list[Any] = []
            while items and len(out) < count:  # a filter's holes: take on within this chunk
                take = items[-(count - len(out)) :]
                del items[-len(take) :]
                take.reverse()
                if self._allow_nones or all(map(operator.is_not, take, repeat(None))):
                    out += take
                else:
                    out += [x for x in take if x is not None]
            if out:
                return out

    # -- reading ---------------------------------------------------------------------

    def _refill(self) -> list[Any]:
        if self._closed:
            self._raise_closed()
        self._holes.returned(self._stop)
        if not self._pending:
            self._schedule()
            if not self._pending:
                self._release_threads()
                raise StopIteration
        start, stop, future = self._pending.popleft()
        inline_wall = inline_cpu = 0.0
        try:
            if future is None:
                busy = self._busy()
                items, inline_wall = _read(self._ds, start, stop)
                inline_cpu = self._busy() - busy
                self._adapt(stop - start, inline_wall)
            else:
                items, seconds = future.result()
                self._adapt(stop - start, seconds)
        except Exception:
            items = self._read_one_by_one(start, stop)
        if not self._allow_nones:
            self._holes.count(start, items, self._failures)
        self._tuner.consumed(self._stop - self._chunk_start, inline_wall, inline_cpu)
        items.reverse()
        self._items, self._chunk_start, self._stop = items, start, stop
        self._schedule()
        return items

    def _schedule(self) -> None:
        """Queues chunks: inline, or up to the tuned level ahead on threads."""
        level = self._tuner.level
        if not level:
            if not self._pending and self._read_index < self._length:
                stop = self._chunk_stop(self._read_index, self._chunk)
                self._pending.append((self._read_index, stop, None))
                self._read_index = stop
            return
        if self._executor is None:
            self._executor = DaemonPool(
                self._threads, thread_name_prefix=f"chute-read-{id(self):x}"
            )
            weakref.finalize(self, _shutdown, self._executor)
        in_flight = sum(stop - start for start, stop, _ in self._pending)
        while (
            self._read_index < self._length
            and len(self._pending) < level
            and (in_flight < self._buffer_size or not self._pending)
        ):
            size = max(1, min(self._chunk, self._buffer_size // level))
            stop = self._chunk_stop(self._read_index, size)
            future = self._executor.submit(_read, self._ds, self._read_index, stop)
            self._pending.append((self._read_index, stop, future))
            in_flight += stop - self._read_index
            self._read_index = stop

    def _buffer_fill(self) -> tuple[int, int]:
        """Elements read and waiting (the current chunk and finished reads), and the capacity.

        Read only by the statistics (``chute._stats``), once per element when tracking is on.
        """
        held = len(self._items) + sum(
            stop - start
            for start, stop, future in self._pending
            if future is not None and future.done()
        )
        return held, self._buffer_size

    def _chunk_stop(self, start: int, size: int) -> int:
        """Where a chunk from ``start`` ends: no chunk spans two filter-check windows,
        so a window is checked right after its last element, whatever the chunk sizes."""
        window_end = (start // WINDOW + 1) * WINDOW
        return min(start + size, self._length, window_end)

    def _adapt(self, count: int, seconds: float) -> None:
        """Sizes the next chunks to take about ``self._chunk_seconds`` each."""
        if count < self._chunk:
            return
        if seconds < self._chunk_seconds / 2:
            self._chunk = min(self._chunk * 2, _MAX_CHUNK)
        elif seconds > self._chunk_seconds * 4 and self._chunk > 1:
            self._chunk //= 2

    def _read_one_by_one(self, start: int, stop: int) -> list[Any]:
        items: list[Any] = []
        for i in range(start, stop):
            try:
                items.append(self._ds._getitems([i])[0])
            except Exception as exc:
                self._failures[i] = exc
                items.append(None)
        self._chunk = 1
        return items

    def _last_origin(self) -> Origin | None:
        """Where the element returned last comes from (for error notes only)."""
        index = self._stop - len(self._items) - 1
        if index < 0:
            return None
        origin = locate(self._ds, index) or Origin()
        return dataclasses.replace(origin, position=index)

    # -- state and lifecycle ---------------------------------------------------------

    def _repr_position(self) -> int:
        return self._stop - len(self._items)

    def get_state(self) -> dict[str, Any]:
        return self._state(next_index=self._stop - len(self._items))

    def _get_next_index(self) -> int:
        return self._stop - len(self._items)

    def _set_next_index(self, index: int) -> None:
        self.set_state(self._state(next_index=index))

    def set_state(self, state: dict[str, Any]) -> None:
        index = int(self._check_state(state, "next_index")["next_index"])
        self._cancel()
        self._start_at(index)

    def _reach(self) -> int | None:
        return self._length if self._length < MAX_POSITION else None

    def _cancel(self) -> None:
        for _, _, future in self._pending:
            if future is not None:
                future.cancel()

    def _release_threads(self) -> None:
        if self._executor is not None:
            _shutdown(self._executor)
            self._executor = None

    def close(self) -> None:
        if self._closed:
            return
        self._cancel()
        self._start_at(self._stop)
        self._release_threads()
        super().close()


class _HoleCount:
    """Counts the filtered-out (``None``) elements per window of ``WINDOW`` indices."""

    def __init__(self, iterator: DatasetIterator[Any]) -> None:
        self._check = DropCheck(iterator, "to_iter_dataset (after a MapDataset.filter)")
        self.restart(0)

    def restart(self, index: int) -> None:
        """Counts from ``index`` on: the window it falls inside is not checked."""
        self._next_window = -(-index // WINDOW)  # the first window wholly ahead
        self._holes: dict[int, int] = {}

    def count(self, start: int, items: list[Any], failures: dict[int, BaseException]) -> None:
        """Adds the holes of ``items`` (indices ``start`` on, in order) to their windows."""
        low, stop = start, start + len(items)
        while low < stop:
            window = low // WINDOW
            high = min(stop, (window + 1) * WINDOW)
            if window >= self._next_window:
                piece = items[low - start : high - start]
                holes = sum(map(operator.is_, piece, repeat(None)))
                if failures:  # a failed read is not a filtered element
                    holes -= sum(low <= i < high for i in failures)
                if holes:
                    self._holes[window] = self._holes.get(window, 0) + holes
            low = high

    def returned(self, index: int) -> None:
        """Checks every window that ends at or before ``index`` (all of it returned)."""
        while (self._next_window + 1) * WINDOW <= index:
            window = self._next_window
            self._next_window += 1
            self._check.window_done(self._holes.pop(window, 0))


def next_index_in_state(state: dict[str, Any]) -> int:
    """The ``to_iter_dataset`` position inside a saved state of a single chain of stages."""
    node: Any = state
    while isinstance(node, dict) and node.get("stage") != _PrefetchIterator._stage:
        node = node.get("parent")
    if not isinstance(node, dict):
        raise ValueError("this state does not come from a single chain over to_iter_dataset().")
    return int(node["next_index"])
