"""Growing a worker's buffer at run time, within a RAM budget.

When the parent often finds a worker's next element not made yet as its turn
comes, that worker is granted more credits (a larger buffer, see
``WorkerIterator``), so it works further ahead through its slow stretches.
The elements all workers may hold at once, times the size of an element
(measured now and then on the elements that arrive), stays within the budget;
a buffer never shrinks below the user's ``per_worker_buffer_size`` and never
grows past ``MAX_BUFFER``.  Only *when* elements are made changes: the parent
still reads the workers in their fixed turn, so the order is the same.

The cost per element is one non-blocking poll of the worker's pipe; the
decision runs once every ``DECIDE_EVERY`` turns of a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chute._execution.performance import element_bytes

MAX_BUFFER = 16  # finished elements a worker may hold beyond this smooth nothing more
DECIDE_EVERY = 32  # turns of a worker between two decisions on its buffer
MISS_SHARE = 4  # "often": not ready in at least 1 of every MISS_SHARE turns


def grown_buffer(
    buffer: int,
    *,
    misses: int,
    turns: int,
    element_bytes: int,
    held: int,
    budget_bytes: int,
    cap: int = MAX_BUFFER,
) -> int:
    """A worker's new buffer size: doubled (at most) when it was often not ready.

    Args:
      buffer: the worker's buffer size now.
      misses: of its last ``turns`` turns, how many found its element not made yet.
      turns: its turns since the last decision.
      element_bytes: the size of an element (the largest seen).
      held: the elements all workers may hold at once now (their credits).
      budget_bytes: what those elements may hold together.
      cap: the largest buffer to grant.

    >>> grown_buffer(1, misses=10, turns=32, element_bytes=2**20, held=4, budget_bytes=2**30)
    2
    >>> grown_buffer(1, misses=2, turns=32, element_bytes=2**20, held=4, budget_bytes=2**30)
    1
    >>> grown_buffer(4, misses=32, turns=32, element_bytes=2**20, held=10, budget_bytes=12 * 2**20)
    6
    """
    if turns <= 0 or misses * MISS_SHARE < turns or buffer >= cap:
        return buffer
    room = budget_bytes // max(1, element_bytes) - held  # more elements the budget allows
    return buffer + max(0, min(cap - buffer, buffer, room))


class BufferSizer:
    """Counts, per worker, the turns that found its element not ready, and grows its buffer."""

    def __init__(self, workers: int, budget_bytes: int, least: int) -> None:
        self._budget, self._cap = budget_bytes, max(least, MAX_BUFFER)
        self._misses, self._turns = [0] * workers, [0] * workers
        self._element_bytes = 1

    def turn(self, w: int, ready: bool) -> bool:
        """Records worker ``w``'s turn; True when its buffer is due for a decision."""
        self._turns[w] += 1
        self._misses[w] += not ready
        return self._turns[w] >= DECIDE_EVERY

    def decide(self, w: int, element: Any, workers: Sequence[Any]) -> None:
        """Grants worker ``w`` (``workers[w]``) more credits if it needs them and they fit."""
        self._element_bytes = max(self._element_bytes, element_bytes(element))
        worker = workers[w]
        buffer = worker.buffer_size
        new = grown_buffer(
            buffer,
            misses=self._misses[w],
            turns=self._turns[w],
            element_bytes=self._element_bytes,
            held=sum(it.buffer_size + 1 for it in workers),
            budget_bytes=self._budget,
            cap=self._cap,
        )
        self._misses[w] = self._turns[w] = 0
        if new > buffer:
            worker.grant(new - buffer)
