"""Streams of positions, and re-dealing them to a new number of workers.

A *stream* is the sequence of positions a group of workers reads: an explicit
list of ``pending`` positions, then every position from ``tail`` below
``end``.  Worker ``w`` of ``W`` reads ``stream[w::W]``.  ``relayout`` turns
what ``W`` workers have read into the stream that is left, so a checkpoint
restores into another number of workers with nothing lost or repeated (the
worker pool does: ``chute._execution.pool``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from chute._core.errors import CheckpointError
from chute._core.state_check import is_int

__all__ = ["Stream", "relayout"]


@dataclasses.dataclass(frozen=True)
class Stream:
    """Sampler positions: ``pending`` first, then ``tail, tail + 1, ...`` below ``end``."""

    pending: tuple[int, ...]
    tail: int
    end: int

    def __len__(self) -> int:
        return len(self.pending) + max(0, self.end - self.tail)

    @staticmethod
    def saved_well(saved: Any, end: int) -> bool:
        """Whether ``saved`` is a stream as a state holds it: ``{'pending': [positions
        below end], 'tail': a position up to end}`` (checked before a restore uses it)."""
        return (
            isinstance(saved, dict)
            and set(saved) == {"pending", "tail"}
            and isinstance(saved["pending"], list)
            and all(is_int(p, end - 1) for p in saved["pending"])
            and is_int(saved["tail"], end)
        )

    def position(self, index: int) -> int:
        """The position at stream index ``index`` (``positions`` for one index)."""
        pending = len(self.pending)
        return self.pending[index] if index < pending else self.tail + index - pending

    def positions(self, indices: np.ndarray) -> np.ndarray:
        pending = np.asarray(self.pending, dtype=np.int64)
        inside = indices < len(pending)
        tail = indices - len(pending) + self.tail
        if not len(pending):
            return tail
        return np.where(inside, pending[np.minimum(indices, max(len(pending) - 1, 0))], tail)


def relayout(stream: Stream, workers: int, positions: Sequence[int]) -> Stream:
    """The stream left to read after ``workers`` workers read ``positions`` each.

    Stream index ``s`` was read by worker ``s % workers`` iff ``s // workers``
    is below that worker's position.  Everything below ``workers * min`` was
    read and everything from the furthest read index on was not; the indices
    in between that were not read become the new stream's pending positions.
    """
    if len(positions) != workers or any(p < 0 for p in positions):
        raise CheckpointError(
            f"the checkpoint's worker positions {positions} do not fit {workers} workers."
        )
    read = np.asarray(positions, dtype=np.int64)
    low = workers * int(read.min())
    high = max((w + workers * (p - 1) + 1 for w, p in enumerate(positions) if p > 0), default=0)
    between = np.arange(low, max(low, high), dtype=np.int64)
    unread = between[(between // workers) >= read[between % workers]]
    pending = stream.positions(unread).tolist()
    if high < len(stream.pending):
        pending += list(stream.pending[high:])
    tail = stream.tail + max(0, high - len(stream.pending))
    return Stream(tuple(pending), tail, stream.end)
