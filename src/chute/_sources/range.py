"""``RangeDataSource``: the integers of a range, as a data source."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence

import numpy as np

from chute._core.validate import check_int
from chute._sources.protocol import as_index, check_indices, out_of_range

__all__ = ["RangeDataSource"]

# Ranges whose bounds stay below this are computed in int64 without overflow.
_INT64_SAFE = 2**62


class RangeDataSource:
    """The integers ``start, start + step, ...`` before ``stop``, like ``range``.

    Records are Python ints.  Indices run from ``0`` to ``len - 1``; negative
    or larger indices raise ``IndexError``, as in Grain.  A range that runs
    the wrong way (``stop < start`` with a positive ``step``) is an error
    rather than an empty source.

    Args:
        start: First integer.
        stop: End of the range (excluded).
        step: Distance between integers; not zero, negative to count down.

    >>> source = RangeDataSource(0, 10, 3)
    >>> source, len(source), source[1], source.__getitems__([3, 0])
    (RangeDataSource(start=0, stop=10, step=3), 4, 3, [9, 0])
    """

    def __init__(self, start: int, stop: int, step: int = 1) -> None:
        start = check_int(start, "RangeDataSource: start")
        stop = check_int(stop, "RangeDataSource: stop")
        step = check_int(step, "RangeDataSource: step")
        if step == 0:
            raise ValueError(
                "RangeDataSource: step must not be zero (got 0); pass 1 to count up "
                "or -1 to count down."
            )
        if (stop - start) * step < 0:
            raise ValueError(
                f"RangeDataSource: start={start} to stop={stop} runs against step={step}; "
                f"use step={-step} or swap start and stop."
            )
        self._start, self._stop, self._step = start, stop, step
        self._len = len(builtins.range(start, stop, step))
        self._vectorised = max(abs(start), abs(stop), abs(step)) < _INT64_SAFE

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> int:
        i = index if type(index) is int else as_index(index, "RangeDataSource")
        if not 0 <= i < self._len:
            raise out_of_range(i, self._len, "RangeDataSource", negative=False)
        return self._start + i * self._step

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[int]:
        """The integers at ``indices``, computed in one vectorised step."""
        if not self._vectorised:
            return [self[i] for i in indices]
        idx = check_indices(indices, self._len, "RangeDataSource", negative=False)
        return (self._start + idx * self._step).tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(builtins.range(self._start, self._stop, self._step))

    def __repr__(self) -> str:
        return f"RangeDataSource(start={self._start}, stop={self._stop}, step={self._step})"

    def chute_identity(self) -> str:
        """Its repr, which names its integers (checkpoints record it)."""
        return repr(self)
