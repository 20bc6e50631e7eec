"""``execution_summary``: the figures of every stage, as a table, and what they mean.

An ``ExecutionSummary`` is a tree of dataclasses (JSON-able with
``to_dict()``/``to_json()``) holding one ``StageStats`` per stage in
pipeline order, and prints as a table with the verdict below it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

__all__ = ["BufferStats", "ExecutionSummary", "StageStats"]


@dataclasses.dataclass(frozen=True)
class BufferStats:
    """How full a read-ahead buffer (a prefetch stage, a worker pool) was.

    Args:
      capacity: the elements it can hold (for workers: over all of them).
      mean_fill: the elements it held on average when its consumer asked.
      empty_fraction: the share of requests that found it empty (the consumer waited).
    """

    capacity: int
    mean_fill: float
    empty_fraction: float


@dataclasses.dataclass(frozen=True)
class StageStats:
    """One stage's figures.

    Args:
      index: its place in pipeline order (sources first); ``parents`` uses it.
      name: the call that built it (``map(decode)``) or its kind.
      kind: the dataset class.
      parents: the indices of the stages it reads from.
      spec: its element spec as text, ``'?'`` where unknown.
      where: ``'main'`` (the process that iterates) or ``'workers'``.
      elements: elements it produced (over all workers).
      calls: times it was called (once per element, or once per chunk).
      self_seconds: time spent in the stage itself, not in its parents; for a
        prefetch stage, the time its consumer waited for it.
      min_seconds, mean_seconds, max_seconds: self time per element.
      bytes_per_element: the size of its output, measured on a sample; None if unknown.
      share: its part of all stages' self time (0 to 1).
      buffer: for a prefetch stage or worker pool, how full its buffer was.
    """

    index: int
    name: str
    kind: str
    parents: tuple[int, ...]
    spec: str
    where: str
    elements: int
    calls: int
    self_seconds: float
    min_seconds: float
    mean_seconds: float
    max_seconds: float
    bytes_per_element: float | None
    share: float
    buffer: BufferStats | None = None


@dataclasses.dataclass(frozen=True)
class ExecutionSummary:
    """Where a pipeline's time went, stage by stage, and what to change.

    Args:
      stages: one entry per stage, in pipeline order.
      wall_seconds: time since the iterator's first ``next()``.
      wait_seconds: time the user's loop spent waiting inside ``next()``.
      elements: elements delivered to the user's loop.
      workers: worker processes (0: the pipeline runs in this process).
      cpu_count: CPU cores this process may use.
      verdict: the figures in plain language, with what to change.
    """

    stages: tuple[StageStats, ...]
    wall_seconds: float
    wait_seconds: float
    elements: int
    workers: int
    cpu_count: int
    verdict: str

    @property
    def wait_ratio(self) -> float:
        """The share of the wall time the user's loop waited for data (0 to 1)."""
        return self.wait_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain dicts and lists (for JSON, logs, dashboards)."""
        return dataclasses.asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        """``json.dumps(self.to_dict(), **kwargs)``."""
        return json.dumps(self.to_dict(), **kwargs)
