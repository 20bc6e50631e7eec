"""Choosing how many chunks to read ahead, by measuring the consumer.

Threads only pay off when the work they run releases the GIL (I/O,
decompression, large numpy operations) or overlaps with a consumer that
waits on something else (an accelerator step).  For Python-heavy work on a
few cores they slow everything down.  Rather than guess, the reader measures
what matters, the rate at which its consumer receives elements, and
hill-climbs the read-ahead level: 0 (read inline, on the consumer's thread),
then 1, 2, 4, ... chunks in flight on threads, keeping the best.  Every so
often it re-checks the neighbouring levels, so it follows changes of load.

Tuning changes only *when* chunks are read, never which elements come out in
which order.
"""

from __future__ import annotations

import time

WINDOW_SECONDS = 0.05
RECHECK_EVERY = 100  # windows at the chosen level before re-checking neighbours
MIN_GAIN = 1.05


def levels_for(max_threads: int) -> list[int]:
    """Read-ahead levels to try: 0 (inline), then powers of two up to ``max_threads``."""
    levels, k = [0], 1
    while k < max_threads:
        levels.append(k)
        k *= 2
    if max_threads:
        levels.append(max_threads)
    return levels


class ReadAheadTuner:
    """Hill-climbs a read-ahead level to maximise consumed elements per second."""

    def __init__(self, levels: list[int]) -> None:
        self._levels = levels
        self._index = 0
        self._best_index, self._best_rate = 0, 0.0
        self._exploring = len(levels) > 1
        self._trial_from: int | None = None
        self._windows_settled = 0
        self._rechecks = 0
        self._window_start = time.perf_counter()
        self._count = 0

    @property
    def level(self) -> int:
        return self._levels[self._index]

    def consumed(self, count: int) -> None:
        """Reports ``count`` more elements handed to the consumer."""
        self._count += count
        now = time.perf_counter()
        elapsed = now - self._window_start
        if elapsed < WINDOW_SECONDS or len(self._levels) == 1:
            return
        rate = self._count / elapsed
        self._window_start, self._count = now, 0
        if self._exploring:
            self._explore(rate)
        elif self._trial_from is not None:
            self._finish_trial(rate)
        else:
            self._settled(rate)

    def _explore(self, rate: float) -> None:
        if rate > self._best_rate * MIN_GAIN or self._index == 0:
            self._best_index, self._best_rate = self._index, max(rate, self._best_rate)
            if self._index + 1 < len(self._levels):
                self._index += 1
                return
        self._index = self._best_index
        self._exploring = False

    def _settled(self, rate: float) -> None:
        self._best_rate = 0.8 * self._best_rate + 0.2 * rate
        self._windows_settled += 1
        if self._windows_settled < RECHECK_EVERY:
            return
        self._windows_settled = 0
        self._rechecks += 1
        step = 1 if self._rechecks % 2 else -1
        neighbour = self._best_index + step
        if not 0 <= neighbour < len(self._levels):
            neighbour = self._best_index - step
        if 0 <= neighbour < len(self._levels):
            self._trial_from, self._index = self._best_index, neighbour

    def _finish_trial(self, rate: float) -> None:
        if rate > self._best_rate * MIN_GAIN:
            self._best_index, self._best_rate = self._index, rate
        self._index = self._best_index
        self._trial_from = None
