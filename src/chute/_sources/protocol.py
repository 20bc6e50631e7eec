"""``RandomAccessDataSource``, what every source provides, and the index checks sources share."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

__all__ = ["RandomAccessDataSource", "as_index", "check_indices", "out_of_range"]

T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class RandomAccessDataSource(Protocol[T_co]):
    """A source of records read by index; plain sequences already are one.

    A source only needs ``__len__`` and ``__getitem__``; it does not have to
    inherit from this class (``isinstance`` checks the methods).  Beyond them:

    * **Batched reads (optional).**  ``__getitems__(indices) -> list`` returns
      the records at a list of indices, in that order.  chute calls it instead
      of ``__getitem__`` whenever the source has it, so implement it when
      reading many records at once is cheaper (one file seek, one query, one
      vectorised lookup).
    * **Picklable.**  The DataLoader and worker processes send the source to
      other processes by pickling it, so keep file handles and connections
      out of the pickled state (open them lazily, as ``__setstate__`` allows).
    * **Thread-safe and deterministic.**  Reads may run on several threads;
      the same index must always give the same record.
    * **A stable ``repr``.**  The DataLoader stores ``repr(source)`` in its
      checkpoints and compares it on restore, so the repr should describe the
      data and not change between runs (no memory addresses, no random names).
    * **``chute_identity() -> str`` (optional).**  A short string naming the
      data read (a table and its version, file names and sizes), the same in
      every process and run.  A dataset pipeline's checkpoints record it and
      refuse to restore over a source that gives another; without it, a
      source is known by its type and length.

    >>> isinstance([10, 20, 30], RandomAccessDataSource)
    True
    >>> class Squares:
    ...     def __len__(self) -> int:
    ...         return 4
    ...     def __getitem__(self, index: int) -> int:
    ...         return index * index
    ...     def __getitems__(self, indices: list[int]) -> list[int]:
    ...         return [i * i for i in indices]
    >>> isinstance(Squares(), RandomAccessDataSource), isinstance(7, RandomAccessDataSource)
    (True, False)
    """

    def __len__(self) -> int:
        """Number of records; indices run from 0 to ``len(self) - 1``."""
        ...

    def __getitem__(self, index: int) -> T_co:
        """The record at ``index``; raises ``IndexError`` outside ``[0, len)``."""
        ...


def as_index(index: object, source: str) -> int:
    """``index`` as an int, or a ``TypeError`` that says how to pass one."""
    if not isinstance(index, bool):
        try:
            return operator.index(index)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(
        f"{source}: index must be an int (got {index!r} that is a {type(index).__name__}); "
        "convert it with int()."
    )


def out_of_range(index: int, length: int, source: str, *, negative: bool) -> IndexError:
    """The ``IndexError`` for ``index``, naming the length and the valid indices."""
    if length == 0:
        valid = "none: the source is empty"
    else:
        valid = f"{-length} to {length - 1}" if negative else f"0 to {length - 1}"
    return IndexError(
        f"{source}: index {index} is out of range for length {length} (valid indices: {valid})."
    )


def check_indices(
    indices: Sequence[int] | np.ndarray, length: int, source: str, *, negative: bool
) -> np.ndarray:
    """``indices`` as a 1-D int64 array in ``[0, length)``; negative ones wrap if allowed."""
    idx = np.asarray(indices)
    if idx.size == 0:
        return np.zeros(0, np.int64)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise TypeError(
            f"{source}: __getitems__ takes a flat sequence of ints (got an array of "
            f"{idx.dtype} with shape {idx.shape}); pass a list of int indices."
        )
    idx = idx.astype(np.int64, copy=False)
    if negative:
        idx = np.where(idx < 0, idx + length, idx)
    bad = (idx < 0) | (idx >= length)
    if bad.any():
        first = int(bad.argmax())
        raise out_of_range(int(np.asarray(indices)[first]), length, source, negative=negative)
    return idx
