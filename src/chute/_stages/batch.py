"""``batch`` for both dataset kinds, and ``batch_and_pad``."""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chute._core import errors, tree
from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.indexing import read_untyped
from chute._core.state_check import check_pulls, count, fields, parent_state, pull_numbers
from chute._core.validate import check_callable, check_positive_int, grain_first
from chute._stages._origin import function_name
from chute._stages._pull_log import PullLog
from chute._stages.capabilities import WrapsFunction
from chute._stages.map import MapMapDataset
from chute._stages.next_index import get_next_index, set_next_index


def _check_args(
    where: str, batch_size: Any, drop_remainder: Any, batch_fn: Any
) -> Callable[[Sequence[Any]], Any]:
    check_positive_int(batch_size, f"{where}: batch_size", grains="batch_size must be positive.")
    if not isinstance(drop_remainder, (bool, np.bool_)):
        raise TypeError(f"{where}: drop_remainder must be a bool (got {drop_remainder!r}).")
    if batch_fn is None:
        return tree.stack
    return check_callable(batch_fn, f"{where}: batch_fn")


def _label(batch_fn: Callable[[Sequence[Any]], Any]) -> str:
    """``batch``, or ``batch(collate)`` with the user's ``batch_fn`` (for error notes)."""
    wrapped = batch_fn._fn if isinstance(batch_fn, WrapsFunction) else None
    if _stacks_by_default(batch_fn) or _stacks_by_default(wrapped):
        return "batch"
    return f"batch({function_name(batch_fn)})"


def _stacks_by_default(batch_fn: Any) -> bool:
    """Whether ``batch_fn`` is ``tree.stack``, or the stack a worker routes into its ring."""
    return batch_fn is tree.stack or getattr(batch_fn, "func", None) is tree.stack


def _filters_upstream(ds: MapDataset[Any]) -> str | None:
    """Name of a stage above ``ds`` that may leave holes (``None``), if any."""
    from chute._stages.filter import FilterMapDataset
    from chute._stages.flat_map import FlatMapMapDataset

    stack: list[Any] = [ds]
    while stack:
        node = stack.pop()
        if isinstance(node, FilterMapDataset):
            return "MapDataset.filter"
        if isinstance(node, FlatMapMapDataset):
            return "FlatMapMapDataset"
        stack.extend(p for p in node.parents if isinstance(p, MapDataset))
    return None


def _enable_shared_memory_output(batch_fn: Any) -> None:
    """Grain's switch to build batches in shared memory; cheap in chute.

    chute's worker processes already hand arrays back through reusable
    shared-memory buffers, so the default batching has nothing to change and
    the batches stay the same.  A custom ``batch_fn`` that has its own
    ``enable_shared_memory_output()`` is told, as Grain tells it.
    """
    hook = getattr(batch_fn, "enable_shared_memory_output", None)
    if callable(hook):
        hook()


def _gaps_message(hole_maker: str) -> str:
    """Grain's sentence, then chute's advice, for a batch after a filter."""
    short = hole_maker.rsplit(".", 1)[-1]
    return (
        f"`MapDataset.batch` can not follow `{hole_maker}` because `{short}` can discard "
        "elements. Convert `MapDataset` to `IterDataset` with `to_iter_dataset()` before "
        f"calling `batch`. chute: MapDataset.batch() cannot follow {hole_maker}, which leaves "
        "gaps (None) in the dataset; batch after to_iter_dataset() instead: "
        "ds.<...>.to_iter_dataset().batch(...)."
    )


class BatchMapDataset(MapDataset[Any]):
    """Batches of consecutive elements; each epoch is batched on its own."""

    # What makes the first batch of each read, when not ``_batch_fn``: set on a worker's
    # copy, which stacks that batch into the worker's shared memory (``leaves_stacked_by``).
    _first_batch_fn: Callable[[Sequence[Any]], Any] | None = None

    def __init__(
        self,
        parent: MapDataset[Any],
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[Any]], Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self._batch_fn = _check_args("MapDataset.batch()", batch_size, drop_remainder, batch_fn)
        hole_maker = _filters_upstream(parent)
        if hole_maker is not None:
            raise ValueError(_gaps_message(hole_maker))
        self._batch_size, self._drop = int(batch_size), bool(drop_remainder)

    def __len__(self) -> int:
        n, size = len(self._parent), self._batch_size
        if n == sys.maxsize:
            return n // size
        return n // size if self._drop else -(-n // size)

    def _getitems(self, indices: Indices) -> list[Any]:
        n, size, length = len(self._parent), self._batch_size, len(self)
        if length == 0:
            raise IndexError("cannot read from a batched dataset with no batches.")
        flat: list[int] = []
        bounds = [0]
        for b in indices:
            epoch, j = divmod(int(b), length)
            start = epoch * n + j * size
            stop = min(start + size, epoch * n + n)
            flat.extend(range(start, stop))
            bounds.append(len(flat))
        items = read_untyped(self._parent._getitems, flat)  # int positions, as in Grain
        out = []
        for k, b in enumerate(indices):
            batch_fn = (k == 0 and self._first_batch_fn) or self._batch_fn
            try:
                out.append(batch_fn(items[bounds[k] : bounds[k + 1]]))
            except Exception as exc:
                errors.annotate(exc, _label(batch_fn), int(b))
                raise
        return out

    def _describe(self) -> str:
        return f"{self._parent!r}, batch_size={self._batch_size}, drop_remainder={self._drop}"

    def enable_shared_memory_output(self) -> None:
        """Grain's request for batches in shared memory; the batches stay equal.

        >>> ds = MapDataset.range(4).batch(2)
        >>> ds.enable_shared_memory_output()
        >>> [b.tolist() for b in ds]
        [[0, 1], [2, 3]]
        """
        _enable_shared_memory_output(self._batch_fn)


class BatchIterDataset(IterDataset[Any]):
    """Batches of consecutive elements of an IterDataset."""

    def __init__(
        self,
        parent: IterDataset[Any],
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[Any]], Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self._batch_fn = _check_args("IterDataset.batch()", batch_size, drop_remainder, batch_fn)
        self._batch_size, self._drop = int(batch_size), bool(drop_remainder)

    def __iter__(self) -> DatasetIterator[Any]:
        return _BatchIterator(iter(self._parent), self._batch_size, self._drop, self._batch_fn)

    def enable_shared_memory_output(self) -> None:
        """Grain's request for batches in shared memory; the batches stay equal.

        >>> ds = MapDataset.range(4).to_iter_dataset().batch(2)
        >>> ds.enable_shared_memory_output()
        >>> [b.tolist() for b in ds]
        [[0, 1], [2, 3]]
        """
        _enable_shared_memory_output(self._batch_fn)


class _BatchIterator(DatasetIterator[Any]):
    """Pulls ``batch_size`` elements through a ``PullLog`` and combines them.

    If the parent raises part way through a batch, the elements already
    pulled stay in the log and the next call carries on filling it; the state
    then names the pulls to replay, so a restore continues exactly there.
    """

    _stage = "batch"
    _state_fields = fields(
        parent=parent_state,
        batches=count(lambda it: it._reach(), why="the most batches its parent's elements make"),
        pulls=count(),
        failed=pull_numbers,
    )

    def __init__(self, parent: DatasetIterator[Any], size: int, drop: bool, batch_fn: Any) -> None:
        super().__init__(parent)
        self._size, self._drop, self._batch_fn = size, drop, batch_fn
        self._log = PullLog(parent, self._stage)
        self._batches = 0
        self.records_in_last_batch = 0  # what an error budget after it counts as tried

    def __next__(self) -> Any:
        log = self._log
        if not log.fill(self._size) and (not log.items or self._drop):
            log.clear()
            raise StopIteration
        elements = log.items
        log.clear()
        self.records_in_last_batch = len(elements)
        index = self._batches
        self._batches += 1
        try:
            return self._batch_fn(elements)
        except Exception as exc:
            errors.annotate(exc, _label(self._batch_fn), index)
            raise

    def _get_next_index(self) -> int:
        return -(-get_next_index(self._parent) // self._size)

    def _set_next_index(self, index: int) -> None:
        set_next_index(self._parent, index * self._size)
        self._log.clear()
        self._batches = index

    @property
    def records_held(self) -> int:
        """Records pulled into the batch being filled (after a failing one, say)."""
        return len(self._log.items)

    def get_state(self) -> dict[str, Any]:
        return self._state(batches=self._batches, **self._log.state())

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "batches", "pulls", "failed")
        self._log.restore(state)
        self._batches = int(state["batches"])

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        check_pulls(self, state, where, kept_most=self._size - 1)

    def _reach(self) -> int | None:
        reach = self._parent._reach()
        return None if reach is None else -(-reach // self._size)


def batch_and_pad(values: Sequence[Any], *, batch_size: int, pad_value: Any = 0) -> Any:
    """Stacks ``values`` and pads the batch axis up to ``batch_size``.

    Use it as ``batch_fn`` to keep one static batch shape without dropping the
    last, partial batch.

    Args:
        values: The elements of one batch.
        batch_size: The batch size to pad up to.
        pad_value: The value of the padding rows.

    >>> batch_and_pad([np.array([1, 2]), np.array([3, 4])], batch_size=3).tolist()
    [[1, 2], [3, 4], [0, 0]]
    """
    if not len(values):
        raise ValueError(grain_first("Cannot batch 0 values.", "batch_and_pad got no values."))
    too_many = f"Cannot batch {len(values)} values to {batch_size}."
    check_positive_int(batch_size, "batch_and_pad: batch_size", grains=too_many)
    if len(values) > batch_size:
        raise ValueError(
            grain_first(
                too_many,
                f"batch_and_pad: got {len(values)} values for batch_size={batch_size}; "
                "pass the same batch_size as the batch stage.",
            )
        )
    stacked = tree.stack(values)
    missing = batch_size - len(values)
    if not missing:
        return stacked

    def pad(leaf: np.ndarray) -> np.ndarray:
        filler = np.full((missing, *leaf.shape[1:]), pad_value, dtype=leaf.dtype)
        return np.concatenate([leaf, filler])

    return tree.map_structure(pad, stacked)


def leaves_stacked_by(dataset: Any, leaves_fn: Callable[[list[Any]], Any]) -> Any:
    """``dataset``, its batches' leaves combined by ``leaves_fn``, if it batches last by default.

    A worker process passes a ``leaves_fn`` that stacks large arrays into its
    shared-memory ring (``WorkerIterator(stack_batches=leaves_stacked_by)``), so the
    batch it sends next is written once, in place.  Two pipelines end in a default
    batch: ``...batch(n)`` of an IterDataset, whose every batch is sent as soon as
    it is made; and ``MapDataset...batch(n).to_iter_dataset()`` (through slices, such
    as a worker's share), whose reads make one or more batches at a time, in index
    order, and hand out the first of each read next: only that one is routed through
    ``leaves_fn``.  A ``MapDataset.map(fn)`` there whose ``fn`` makes batches itself and
    has ``fn.stacked_by(leaves_fn)`` (a copy of ``fn`` combining its leaves with
    ``leaves_fn``) gets that copy: a read of several elements sends the first without
    a copy and the others with one, as a reserved slot not sent next holds a copy.
    Any other last stage, or a user's ``batch_fn``, is left as it is.
    """
    if isinstance(dataset, BatchIterDataset) and dataset._batch_fn is tree.stack:
        copied = copy.copy(dataset)
        copied._batch_fn = functools.partial(tree.stack, leaves_fn=leaves_fn)
        return copied
    from chute._stages.prefetch import PrefetchIterDataset

    if isinstance(dataset, PrefetchIterDataset):
        batches = _map_batches_stacked_by(dataset._parent, leaves_fn)
        if batches is not None:
            return dataset.with_parents(batches)
    return dataset


def _map_batches_stacked_by(ds: MapDataset[Any], leaves_fn: Callable[[list[Any]], Any]) -> Any:
    """``ds``, a default ``BatchMapDataset`` under slices, whose first batch of each read
    has its leaves combined by ``leaves_fn``; ``None`` for any other ``ds``."""
    from chute._stages.slice import SliceMapDataset

    if isinstance(ds, SliceMapDataset):
        below = _map_batches_stacked_by(ds._parent, leaves_fn)
        if below is None:
            return None
        return ds.with_parents(below)
    if isinstance(ds, BatchMapDataset) and ds._batch_fn is tree.stack:
        batched = copy.copy(ds)
        batched._first_batch_fn = functools.partial(tree.stack, leaves_fn=leaves_fn)
        return batched
    stacked_by = getattr(getattr(ds, "_fn", None), "stacked_by", None)
    if isinstance(ds, MapMapDataset) and callable(stacked_by):  # a map that batches itself
        mapped = copy.copy(ds)
        mapped._fn = stacked_by(leaves_fn)
        return mapped
    return None
