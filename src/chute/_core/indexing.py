"""What an index of a ``MapDataset`` means, as Grain defines it.

Every integer is an index.  With ``n = len(ds)``, index ``i`` reads position
``i % n`` of epoch ``i // n`` (Python's floor division), so ``-1`` is the last
element of epoch ``-1``, not of epoch ``0``: the same element for datasets that
are alike in every epoch (``ds[-1] == ds[n - 1]``), another one where epochs
differ (a shuffle reshuffles epoch ``-1`` with seed ``seed - 1``; ``repeat()``
without ``num_epochs`` has ``sys.maxsize`` elements, and ``-1`` is its parent's
``-1``).  Every stage maps indices by that rule, in ``ds[i]`` and in the batched
``ds._getitems(indices)`` alike.

Grain's elements also take their type from the index: ``MapDataset.range(5)``
read at ``np.int64(3)`` gives ``np.int64(3)``, and ``map_with_index`` is
handed the index of the type it came in.  ``ds[i]`` with a numpy integer marks
the read (``numpy_index``) so that those two stages give the same types, while
the batched paths, which always carry indices as int64 arrays, give Python ints
as Grain's iteration does.  A batch reads its elements at Python ints, as in
Grain, so its arrays do not change.
"""

from __future__ import annotations

import contextvars
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chute._core.errors import add_note

__all__ = ["as_index", "converted", "numpy_index_type", "read_at", "read_untyped"]

#: The numpy type of the index ``ds[i]`` is reading, or None for a Python int.
_NUMPY_INDEX: contextvars.ContextVar[type[np.integer] | None] = contextvars.ContextVar(
    "chute_numpy_index", default=None
)


def numpy_index_type() -> type[np.integer] | None:
    """The numpy integer type of the index being read by ``ds[i]``, if it is one."""
    return _NUMPY_INDEX.get()


def as_index(index: Any) -> int:
    """``index`` as an int, or a ``TypeError`` for what is not an integer.

    >>> as_index(np.int32(4)), as_index(-2)
    (4, -2)
    """
    if type(index) is int:
        return index
    try:
        return operator.index(index)
    except TypeError:
        raise TypeError(
            "MapDataset indices must be integers or slices (got "
            f"{index!r} that is a {type(index).__name__}); use ds[int(i)] for a whole "
            "number stored as another type."
        ) from None


def read_at(read: Callable[[list[int]], list[Any]], index: Any) -> Any:
    """``read([index])[0]``, with the index's numpy type known to the stages below.

    Args:
        read: A dataset's batched read, ``ds._getitems``.
        index: Any integer (negative: earlier epochs), a numpy one included.
    """
    if type(index) is int and _NUMPY_INDEX.get() is None:
        return read([index])[0]
    i = as_index(index)
    kind = type(index) if isinstance(index, np.integer) else None
    if kind is _NUMPY_INDEX.get():
        return read([i])[0]
    token = _NUMPY_INDEX.set(kind)  # also clears a numpy read's mark for a nested int read
    try:
        return read([i])[0]
    finally:
        _NUMPY_INDEX.reset(token)


def read_untyped(read: Callable[[Any], list[Any]], indices: Any) -> list[Any]:
    """``read(indices)`` with Python ints below, whatever index ``ds[i]`` came with."""
    if _NUMPY_INDEX.get() is None:
        return read(indices)
    token = _NUMPY_INDEX.set(None)
    try:
        return read(indices)
    finally:
        _NUMPY_INDEX.reset(token)


def converted(values: Sequence[int], kind: type[np.integer], where: str) -> list[Any]:
    """``values`` as numpy integers of ``kind`` (Grain's element type for such an index).

    Raises:
        OverflowError: A value does not fit ``kind`` (Grain raises it too).
    """
    try:
        return [kind(v) for v in values]
    except OverflowError as exc:
        add_note(
            exc,
            f"chute: {where} gives elements of the index's type ({kind.__name__}), as Grain "
            "does, and a value does not fit it; index with an int or np.int64.",
        )
        raise
