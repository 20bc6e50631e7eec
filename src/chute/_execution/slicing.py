"""Giving each worker its share: the pipeline rebuilt over a slice of its source.

An IterDataset pipeline starts from one or more ``MapDataset.to_iter_dataset()``
nodes.  ``sliced(ds, pick)`` copies the IterDataset nodes above them
(datasets are immutable recipes, so a shallow copy with new parents is a new
pipeline) and makes every such node read ``map_dataset.slice(pick(len))``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from chute._core.dataset import IterDataset


def sliced(ds: IterDataset[Any], pick: Callable[[int], slice]) -> IterDataset[Any]:
    """``ds`` rebuilt so that each of its MapDataset sources reads ``pick(len(source))``."""
    from chute._stages.prefetch import PrefetchIterDataset

    if isinstance(ds, PrefetchIterDataset):
        source = ds._parent
        root = copy.copy(ds)
        root._parents = (source.slice(pick(len(source))),)
        return root
    if not any(isinstance(p, IterDataset) for p in ds.parents):
        raise ValueError(
            f"{type(ds).__name__} does not read a MapDataset, so its elements cannot be shared "
            "out among workers; start the pipeline with MapDataset...to_iter_dataset()."
        )
    copied = copy.copy(ds)
    copied._parents = tuple(
        sliced(p, pick) if isinstance(p, IterDataset) else p for p in ds.parents
    )
    return copied


def interleaved(worker: int, count: int) -> Callable[[int], slice]:
    """Worker ``worker`` of ``count`` reads indices ``worker, worker + count, ...``."""
    return lambda n: slice(worker, None, count)


def contiguous(worker: int, count: int) -> Callable[[int], slice]:
    """Worker ``worker`` of ``count`` reads one block; the first ``n % count`` get one more."""

    def pick(n: int) -> slice:
        size, extra = divmod(n, count)
        start = worker * size + min(worker, extra)
        return slice(start, start + size + (1 if worker < extra else 0))

    return pick
