"""``IterDataset.mp_prefetch``: the pipeline runs in worker processes.

Worker ``i`` of ``W`` runs the whole pipeline over MapDataset indices
``i, i + W, ...`` (or over one contiguous block with ``sequential_slice``),
filters and batches included, and the parent reads the workers round-robin,
skipping those that ran out: the same order as Grain's.  See
``chute._execution.processes`` for how workers start and why.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.options import MultiprocessingOptions
from chute._core.validate import check_callable
from chute._execution.remote import RemoteIterator
from chute._execution.round_robin import RoundRobinIterator
from chute._execution.slicing import share


class MultiprocessPrefetchIterDataset(IterDataset[Any]):
    """Runs ``parent`` in ``options.num_workers`` worker processes.

    >>> from chute import MapDataset, MultiprocessingOptions
    >>> ds = MapDataset.range(6).to_iter_dataset().batch(2)
    >>> [b.tolist() for b in ds.mp_prefetch(MultiprocessingOptions(num_workers=2))]
    [[0, 2], [1, 3], [4], [5]]
    """

    def __init__(
        self,
        parent: IterDataset[Any],
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
    ) -> None:
        super().__init__(parent)
        if not isinstance(options, MultiprocessingOptions):
            raise TypeError(
                "mp_prefetch() takes a chute.MultiprocessingOptions (got "
                f"{options!r} that is a {type(options).__name__})."
            )
        if worker_init_fn is not None:
            check_callable(worker_init_fn, "mp_prefetch(): worker_init_fn")
        self._options, self._init_fn = options, worker_init_fn
        self._sequential = bool(sequential_slice)
        for worker in range(options.num_workers):  # fails now, not in a worker, if it cannot slice
            share(parent, worker, options.num_workers, self._sequential)

    def __iter__(self) -> DatasetIterator[Any]:
        count = self._options.num_workers
        workers = [
            RemoteIterator(
                share(self._parent, w, count, self._sequential),
                index=w,
                count=count,
                buffer_size=self._options.per_worker_buffer_size,
                worker_init_fn=self._init_fn,
            )
            for w in range(count)
        ]
        return RoundRobinIterator(workers)

    def _describe(self) -> str:
        return f"{self._parent!r}, {self._options}"


def mp_prefetch(
    ds: IterDataset[Any],
    options: MultiprocessingOptions | None = None,
    worker_init_fn: Callable[[int, int], None] | None = None,
    sequential_slice: bool = False,
) -> IterDataset[Any]:
    """``ds`` in worker processes; with no workers, ``ds`` itself."""
    options = options if options is not None else MultiprocessingOptions()
    if isinstance(options, MultiprocessingOptions) and options.num_workers == 0:
        return ds
    return MultiprocessPrefetchIterDataset(ds, options, worker_init_fn, sequential_slice)


def prefetch(ds: IterDataset[Any], options: MultiprocessingOptions) -> IterDataset[Any]:
    """Deprecated name of ``mp_prefetch``."""
    warnings.warn(
        "IterDataset.prefetch(options) is deprecated; use IterDataset.mp_prefetch(options).",
        DeprecationWarning,
        stacklevel=3,
    )
    return mp_prefetch(ds, options)
