"""Giving each worker its share: the pipeline rebuilt over a slice of its source.

An IterDataset pipeline reads MapDatasets (through ``to_iter_dataset()``, or
as direct parents of stages such as zip or mix).  ``sliced(ds, pick)`` copies
the IterDataset nodes (datasets are immutable recipes, so a shallow copy with
new parents is a new pipeline) and makes every MapDataset they read return
only ``pick(len)`` of its elements:

* interleaved slices (``worker::count``) are taken of the MapDataset as it
  is, after its shuffles and maps;
* contiguous blocks (``sequential_slice``) are pushed down to the source, so
  each worker reads one block of the data (good for file locality) and the
  stages above it, a shuffle included, run within that block, as Grain does.
  Below a node with several parents, or a slice, the block is taken at the top.

A share also renumbers the elements its random stages draw for (``Ordinals``):
worker ``w`` of ``W``'s ``k``-th element draws as element ``w + k * W`` of the
undivided pipeline, whose consumer reads the workers in turn; so the pipeline
draws the numbers it draws without workers, whatever the worker count (as
Grain numbers them).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from chute._core.dataset import IterDataset, MapDataset
from chute._core.in_place_slice import shard_block
from chute._stages.capabilities import NumbersElements
from chute._stages.source_block import INTERNAL, Pick, mark_internal, push_down

__all__ = [
    "INTERNAL",
    "Ordinals",
    "contiguous",
    "interleaved",
    "mark_internal",
    "push_down",
    "reshaped",
    "share",
    "share_stream",
    "sliced",
]


@dataclasses.dataclass(frozen=True)
class Ordinals:
    """The element of the undivided pipeline that a share's ``k``-th element stands for.

    A share reads every ``step``-th element from ``start`` of a sequence:
    its ``k``-th element is that sequence's ``s = start + k * step``.  When
    the workers were re-dealt from a checkpoint, the sequence is a
    ``stream`` of positions and ``s`` stands for ``stream.position(s)``; a
    share inside another share (threads in a worker) is numbered within the
    ``outer`` one.  Random stages that number their elements as they come
    (``IterDataset.random_map``) hold one in ``_ordinals`` (``None``: no share).

    >>> Ordinals(1, 3)(2)
    7
    >>> Ordinals(1, 2, outer=Ordinals(0, 3))(2)  # thread 1 of 2 inside worker 0 of 3
    15
    """

    start: int
    step: int
    stream: Any = None  # a streams.Stream, or None: the sequence is 0, 1, 2, ...
    outer: Ordinals | None = None

    def __call__(self, k: int) -> int:
        s = self.start + k * self.step
        if self.stream is not None:
            s = self.stream.position(s)
        return s if self.outer is None else self.outer(s)


def _renumbered(node: IterDataset[Any], ordinals: Ordinals | None) -> None:
    """Gives ``node`` (a fresh copy) its share's numbering, if it numbers its elements."""
    if ordinals is not None and isinstance(node, NumbersElements):
        node._ordinals = dataclasses.replace(ordinals, outer=node._ordinals)


def reshaped(
    ds: IterDataset[Any],
    reshape: Callable[[MapDataset[Any]], MapDataset[Any]],
    ordinals: Ordinals | None = None,
) -> IterDataset[Any]:
    """``ds`` rebuilt so that each MapDataset ``m`` it reads is ``reshape(m)`` instead.

    Each random stage in it numbers its elements by ``ordinals`` (within the
    numbering it had), when given.
    """
    if not any(isinstance(p, (IterDataset, MapDataset)) for p in ds.parents):
        raise ValueError(
            f"{type(ds).__name__} does not read a MapDataset, so its elements cannot be shared "
            "out among workers; start the pipeline with MapDataset...to_iter_dataset()."
        )
    copied = ds.with_parents(
        *(
            reshape(p)
            if isinstance(p, MapDataset)
            else reshaped(p, reshape, ordinals)
            if isinstance(p, IterDataset)
            else p
            for p in ds.parents
        )
    )
    _renumbered(copied, ordinals)
    return copied


def sliced(
    ds: IterDataset[Any],
    pick: Pick,
    *,
    to_source: bool = False,
    ordinals: Ordinals | None = None,
) -> IterDataset[Any]:
    """``ds`` rebuilt so that each MapDataset it reads gives only ``pick(len)``."""
    if to_source:
        return reshaped(ds, lambda m: push_down(m, pick), ordinals)
    return reshaped(ds, lambda m: mark_internal(m.slice(pick(len(m)))), ordinals)


def interleaved(worker: int, count: int) -> Pick:
    """Worker ``worker`` of ``count`` reads indices ``worker, worker + count, ...``."""
    return lambda n: slice(worker, None, count)


def contiguous(worker: int, count: int) -> Pick:
    """Worker ``worker`` of ``count`` reads one block; the first ``n % count`` get one more."""
    return functools.partial(shard_block, worker, count)


def share(ds: IterDataset[Any], worker: int, count: int, sequential: bool) -> IterDataset[Any]:
    """Worker ``worker`` of ``count``'s pipeline: interleaved, or one block of the source.

    Either way its ``k``-th element draws as element ``worker + k * count``.
    """
    ordinals = Ordinals(worker, count)
    if sequential:
        return sliced(ds, contiguous(worker, count), to_source=True, ordinals=ordinals)
    return sliced(ds, interleaved(worker, count), ordinals=ordinals)


def share_stream(ds: IterDataset[Any], worker: int, count: int, stream: Any) -> IterDataset[Any]:
    """Worker ``worker`` of ``count``'s pipeline over ``stream``'s positions of each MapDataset.

    Its ``k``-th element draws as the element at stream position ``worker + k * count``.
    """
    from chute._stages.streams import StreamView

    return reshaped(
        ds,
        lambda m: mark_internal(
            mark_internal(StreamView(m, stream)).slice(slice(worker, None, count))
        ),
        Ordinals(worker, count, stream),
    )
