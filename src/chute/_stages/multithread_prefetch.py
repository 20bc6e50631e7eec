"""``multithread_prefetch``: the pipeline runs ``num_threads`` times, on threads.

Thread ``i`` of ``n`` runs the whole pipeline over MapDataset indices
``i, i + n, ...`` (or over one contiguous block with ``sequential_slice``),
filters and batches included, each reading ahead into its own buffer; the
caller reads the threads round-robin, skipping those that ran out.  This is
``mp_prefetch`` with threads instead of processes, sliced and interleaved the
same way, and it yields the same order as Grain's ``multithread_prefetch``.
It pays off where the work releases the GIL (I/O, numpy, free-threaded
Python).
"""

from __future__ import annotations

from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset, MapDataset, as_iter_dataset
from chute._core.validate import check_int
from chute._execution.round_robin import RoundRobinIterator
from chute._stages.slicing import share
from chute._stages.thread_prefetch import ThreadPrefetchIterDataset, _ThreadPrefetchIterator


class MultithreadPrefetchIterDataset(IterDataset[Any]):
    """Runs ``parent`` over ``num_threads`` slices of its MapDataset, on threads.

    Use ``multithread_prefetch()`` to build one.
    """

    def __init__(
        self,
        parent: IterDataset[Any],
        num_threads: int,
        buffer_size: int,
        sequential_slice: bool = False,
    ) -> None:
        super().__init__(parent)
        self._num_threads = check_int(num_threads, "multithread_prefetch: num_threads", minimum=1)
        self._buffer_size = check_int(buffer_size, "multithread_prefetch: buffer_size", minimum=0)
        if not isinstance(sequential_slice, bool):
            raise TypeError(
                "multithread_prefetch: sequential_slice must be a bool (got "
                f"{sequential_slice!r} that is a {type(sequential_slice).__name__})."
            )
        self._sequential = sequential_slice
        self._shards()  # fails now, not at the first next(), if the pipeline cannot be sliced

    def _shards(self) -> list[ThreadPrefetchIterDataset]:
        """One pipeline per thread; with one thread, the pipeline itself, as in Grain."""
        count = self._num_threads
        pipelines = (
            [self._parent]
            if count == 1
            else [share(self._parent, i, count, self._sequential) for i in range(count)]
        )
        return [
            ThreadPrefetchIterDataset(p, prefetch_buffer_size=self._buffer_size) for p in pipelines
        ]

    def __iter__(self) -> DatasetIterator[Any]:
        return _MultithreadIterator([iter(shard) for shard in self._shards()])

    def _describe(self) -> str:
        return (
            f"{self._parent!r}, num_threads={self._num_threads}, buffer_size={self._buffer_size}, "
            f"sequential_slice={self._sequential}"
        )


class _MultithreadIterator(RoundRobinIterator):
    """Round-robin over the threads' iterators; all threads start at the first ``next()``."""

    _keep_turn_on_error = True  # Grain's order when an element fails

    _stage = "multithread_prefetch"

    def __init__(self, iterators: list[DatasetIterator[Any]]) -> None:
        super().__init__(iterators)
        self._started = False

    def __next__(self) -> Any:
        if self._closed:
            self._raise_closed()
        if not self._started:
            self._started = True
            for it, done in zip(self._parents, self._exhausted):
                if not done and isinstance(it, _ThreadPrefetchIterator):
                    it._warm_up()
        return super().__next__()

    def _buffer_fill(self) -> tuple[int, int]:
        """Elements waiting in the threads' buffers, and their sizes (for the statistics)."""
        held = capacity = 0
        for it in self._parents:
            if isinstance(it, _ThreadPrefetchIterator):
                waiting, size = it._buffer_fill()
                held, capacity = held + waiting, capacity + size
        return held, capacity

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._started = False

    def close(self) -> None:
        for it in self._parents:  # all threads stop at once; close() then waits for each
            if isinstance(it, _ThreadPrefetchIterator):
                it._signal_stop()
        super().close()


def multithread_prefetch(
    ds: IterDataset[Any] | MapDataset[Any],
    num_threads: int,
    buffer_size: int,
    sequential_slice: bool = False,
) -> IterDataset[Any]:
    """Runs ``ds`` on ``num_threads`` threads, each over its own slice of the data.

    Args:
      ds: the pipeline: an IterDataset that starts from
        ``MapDataset.to_iter_dataset()`` (a MapDataset is read through it).
      num_threads: how many threads; ``0`` returns ``ds`` unchanged, and one
        thread runs ``ds`` unsliced.
      buffer_size: how many elements each thread reads ahead (``0``: none,
        the slices are read inline, in the same order).
      sequential_slice: give each thread one contiguous block of indices
        instead of every ``num_threads``-th index.

    Returns:
      An IterDataset yielding the threads' elements round-robin.

    Raises:
      TypeError, ValueError: for bad arguments, or a pipeline that does not
        read a MapDataset and so cannot be sliced.

    >>> from chute import MapDataset
    >>> ds = MapDataset.range(6).to_iter_dataset().batch(2)
    >>> [b.tolist() for b in multithread_prefetch(ds, num_threads=2, buffer_size=2)]
    [[0, 2], [1, 3], [4], [5]]
    """
    ds = as_iter_dataset(ds, "multithread_prefetch()")
    if check_int(num_threads, "multithread_prefetch: num_threads", minimum=0) == 0:
        check_int(buffer_size, "multithread_prefetch: buffer_size", minimum=0)
        return ds
    return MultithreadPrefetchIterDataset(ds, num_threads, buffer_size, sequential_slice)
