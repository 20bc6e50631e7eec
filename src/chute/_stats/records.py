"""``StageRecord``: one stage's running figures, cheap to add to and to merge.

A record is added to once per call of its stage (an element, or a chunk of
them) by the timing wrappers of ``instrument``; ``snapshot()`` gives its
figures as a plain dict, which crosses from worker processes, and
``merged`` adds the snapshots of a stage's workers together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chute._execution.performance import element_bytes

__all__ = ["StageRecord", "element_bytes", "merged"]

_NO_MIN = 1 << 62  # min_ns before the first element

_FIELDS = (
    "calls",
    "elements",
    "self_ns",
    "inclusive_ns",
    "min_ns",
    "max_ns",
    "bytes_total",
    "bytes_samples",
    "fill_total",
    "fill_samples",
    "empty",
    "capacity",
)


class StageRecord:
    """Counters of one stage: calls, elements, self time, sizes and buffer fill."""

    __slots__ = (*_FIELDS, "first_ns", "last_ns", "deadline_ns", "on_deadline")

    def __init__(self) -> None:
        self.calls = self.elements = self.self_ns = self.inclusive_ns = self.max_ns = 0
        self.bytes_total = self.bytes_samples = 0
        self.fill_total = self.fill_samples = self.empty = self.capacity = 0
        self.min_ns = _NO_MIN
        self.first_ns = self.last_ns = 0
        self.deadline_ns = 1 << 62  # when to call on_deadline (the outermost stage's only)
        self.on_deadline: Callable[[int], None] | None = None

    def add(self, own_ns: int, inclusive_ns: int, count: int, result: Any, end_ns: int) -> None:
        """One call: ``own_ns`` in the stage itself, ``count`` elements out in ``result``.

        ``result`` is the element, or the list of them for a chunk; sizes are
        measured on it at calls 1, 2, 4, 8, ...
        """
        calls = self.calls = self.calls + 1
        if calls == 1:
            self.first_ns = end_ns - inclusive_ns
        self.self_ns += own_ns
        self.inclusive_ns += inclusive_ns
        self.last_ns = end_ns
        if count:
            self.elements += count
            if own_ns > self.max_ns * count:
                self.max_ns = own_ns // count
            if own_ns < self.min_ns * count:
                self.min_ns = own_ns // count
            if not calls & (calls - 1):
                self._sample(result)
        if end_ns >= self.deadline_ns and self.on_deadline is not None:
            self.on_deadline(end_ns)

    def _sample(self, result: Any) -> None:
        if isinstance(result, list):  # a chunk: its first element that is there
            result = next((x for x in result if x is not None), None)
            if result is None:
                return
        self.bytes_total += element_bytes(result)
        self.bytes_samples += 1

    def fill(self, held: int, capacity: int) -> None:
        """A look at the stage's read-ahead buffer as its consumer asks for an element."""
        self.fill_total += held
        self.fill_samples += 1
        self.empty += held == 0
        self.capacity = capacity

    def snapshot(self) -> dict[str, int]:
        """The figures as a plain dict (``merged`` adds such dicts)."""
        out = {name: getattr(self, name) for name in _FIELDS}
        out["min_ns"] = -1 if self.min_ns == _NO_MIN else self.min_ns
        out["wall_ns"] = self.last_ns - self.first_ns if self.calls else 0
        return out


def merged(snapshots: list[dict[str, int]]) -> dict[str, int]:
    """The figures of one stage over several processes: sums, and the extremes."""
    out = {name: 0 for name in (*_FIELDS, "wall_ns")}
    out["min_ns"] = -1
    for snap in snapshots:
        for name, value in snap.items():
            if name == "min_ns":
                if value >= 0 and (out["min_ns"] < 0 or value < out["min_ns"]):
                    out["min_ns"] = value
            elif name in ("max_ns", "wall_ns", "capacity"):
                out[name] = max(out[name], value) if name != "capacity" else out[name] + value
            else:
                out[name] = out.get(name, 0) + value
    return out
