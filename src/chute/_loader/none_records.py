"""Records whose data is ``None``: a DataLoader passes them on, as Grain's does.

Inside a MapDataset a ``None`` element is a hole that a filter left, and
``to_iter_dataset`` skips it.  A DataLoader that reads its records' data
straight through MapDataset stages (no operation needs the records' metadata)
therefore carries a ``None`` from the source, or from a ``Map``, as
``NONE_RECORD``: the loader's own map and filter stages hand it to the user's
function as ``None``, the first stage after the chunked reads (a ``Batch``, a
``FlatMap``) gets ``None`` back, and ``DataLoaderIterator`` returns ``None``.
Pipelines without ``None`` pay a scan of each chunk in C, nothing per element.
``NONE_RECORD`` pickles by name, so it stays itself across a worker's transport.
Batches are searched for it only once this process has made one.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from chute._core import errors
from chute._core.dataset import Indices
from chute._stages._origin import locate
from chute._stages.filter import FilterMapDataset as _FilterMapDataset
from chute._stages.map import MapMapDataset as _MapMapDataset


class _NoneRecord:
    """The type of ``NONE_RECORD``: one instance, pickled by its name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NONE_RECORD"

    def __reduce__(self) -> str:
        return "NONE_RECORD"


#: A record whose data is ``None``, while it travels through MapDataset stages.
NONE_RECORD = _NoneRecord()

_made = False  # whether this process has made a NONE_RECORD: only then are batches searched


def _making() -> None:
    global _made
    _made = True


def _holds(items: Sequence[Any], value: Any) -> bool:
    """Whether ``value`` is one of ``items`` (by identity, in C: no ``==`` on arrays)."""
    return any(map(operator.is_, items, repeat(value)))


def boxed(items: list[Any]) -> list[Any]:
    """``items`` with every ``None`` replaced by ``NONE_RECORD``."""
    if _holds(items, None):
        _making()
        return [NONE_RECORD if x is None else x for x in items]
    return items


def unboxed(items: Sequence[Any]) -> Sequence[Any]:
    """``items`` with every ``NONE_RECORD`` replaced by ``None``."""
    if _made and _holds(items, NONE_RECORD):
        return [None if x is NONE_RECORD else x for x in items]
    return items


def unbox(x: Any) -> Any:
    """``None`` for ``NONE_RECORD``, else ``x``."""
    return None if x is NONE_RECORD else x


def unboxing(fn: Callable[[Any], Any], named: Any) -> Callable[[Any], Any]:
    """``fn`` called with ``None`` for ``NONE_RECORD``; errors name ``named`` (the user's)."""

    def call(x: Any) -> Any:
        return fn(None if x is NONE_RECORD else x)

    call._fn = named  # type: ignore[attr-defined]
    return call


class UnboxingBatch:
    """A batch function given ``None`` for every ``NONE_RECORD`` of a batch.

    Args:
        batch_fn: The batch function to call (``_fn``: named in error notes, and
            re-stacked into a worker's shared memory when it is the default stack).
    """

    def __init__(self, batch_fn: Callable[[Sequence[Any]], Any]) -> None:
        self._fn = batch_fn

    def __call__(self, items: Sequence[Any]) -> Any:
        return self._fn(unboxed(items))


class MapMapDataset(_MapMapDataset):
    """A DataLoader's ``Map`` on data: ``None`` in and out is a record, not a hole."""

    def _getitems(self, indices: Indices) -> list[Any]:
        items = self._parent._getitems(indices)
        fn = self._fn
        out: list[Any] = []
        append = out.append
        try:
            for x in items:
                append(None if x is None else fn(None if x is NONE_RECORD else x))
        except Exception as exc:
            i = int(indices[len(out)])
            errors.annotate(exc, self._label, i, locate(self, i))
            raise
        if _holds(out, None):  # holes a filter left, or records the function made None
            _making()
            out = [NONE_RECORD if y is None and x is not None else y for x, y in zip(items, out)]
        return out


class FilterMapDataset(_FilterMapDataset):
    """A DataLoader's ``Filter`` on data: a ``None`` record is asked about, as ``None``."""

    def _getitems(self, indices: Indices) -> list[Any]:
        items = self._parent._getitems(indices)
        pred = self._pred
        out: list[Any] = []
        append = out.append
        try:
            for x in items:
                append(x if x is not None and pred(None if x is NONE_RECORD else x) else None)
        except Exception as exc:
            i = int(indices[len(out)])
            errors.annotate(exc, self._label, i, locate(self, i))
            raise
        return out
