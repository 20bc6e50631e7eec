"""A pipeline over one block of its source, and the mark of the nodes chute makes itself.

``push_down(top, pick)`` rebuilds a MapDataset chain over a block of its
source (``pick(len(source))``), so the stages above the source (a shuffle
included) run within the block, as Grain does for a ``sequential_slice``;
below a node with several parents, or a slice, it slices ``top`` itself.
Both a worker's share (``chute._stages.slicing``) and
``to_iter_dataset().set_slice(..., sequential_slice=True)`` (``prefetch``) use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from chute._core.dataset import MapDataset
from chute._stages.slice import SliceMapDataset

__all__ = ["INTERNAL", "Pick", "mark_internal", "push_down"]

#: Which part of a sequence of ``n`` elements a share reads.
Pick = Callable[[int], slice]
_D = TypeVar("_D", bound=MapDataset[Any])

#: Set on the slices (and stream views) chute makes for workers: its own nodes, which the
#: statistics and pictures leave out of the pipeline they show the user.
INTERNAL = "_chute_internal"


def mark_internal(ds: _D) -> _D:
    """``ds``, marked as a node chute made for a worker's share (``INTERNAL``)."""
    setattr(ds, INTERNAL, True)
    return ds


def push_down(top: MapDataset[Any], pick: Pick) -> MapDataset[Any]:
    """``top`` rebuilt over a block of its source, or sliced itself if that is not possible.

    >>> from chute import MapDataset
    >>> list(push_down(MapDataset.range(6).map(lambda x: x * 10), lambda n: slice(0, n // 2)))
    [0, 10, 20]
    """
    chain, node = [], top
    while len(node.parents) == 1 and isinstance(node.parents[0], MapDataset):
        if isinstance(node, SliceMapDataset):
            return mark_internal(top.slice(pick(len(top))))
        chain.append(node)
        node = node.parents[0]
    if node.parents or isinstance(node, SliceMapDataset):
        return mark_internal(top.slice(pick(len(top))))
    rebuilt = mark_internal(node.slice(pick(len(node))))
    for above in reversed(chain):
        rebuilt = above.with_parents(rebuilt)
    return rebuilt
