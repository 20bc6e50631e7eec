"""``StageRecord``: one stage's running figures, cheap to add to and to merge.

A record is added to once per call of its stage (an element, or a chunk of
them) by the timing wrappers of ``instrument``; ``snapshot()`` gives its
figures as a plain dict, which crosses from worker processes, and
``merged`` adds the snapshots of a stage's workers together.

Several threads may call one stage at once (a source read by a pool of
read-ahead threads).  Each thread adds to its own ``Counts`` of the record
(``counts()``), without a lock, and ``snapshot()`` merges them: the totals
are exact whatever the threads do.  Records exist only while tracking is
on, so an untracked pipeline pays nothing for this.

A mix stage's record also reads its iterators' elements per source when a
snapshot is taken (the iterators count them anyway), never per element.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from chute._execution.performance import element_bytes
from chute._stages.capabilities import CountsPerSource

__all__ = ["Counts", "StageRecord", "element_bytes", "float_bytes", "merged"]

_NEVER = 1 << 62  # min_ns before the first element; deadline_ns when none is set

_FIELDS = (
    "calls",
    "elements",
    "self_ns",
    "inclusive_ns",
    "min_ns",
    "max_ns",
    "bytes_total",
    "bytes_samples",
    "float_bytes",
    "fill_total",
    "fill_samples",
    "empty",
    "capacity",
)
_LARGEST = ("max_ns", "capacity", "last_ns")  # merged by max; min_ns and first_ns by min


def float_bytes(element: Any) -> int:
    """The bytes of ``element``'s floating-point arrays of 4 bytes a number or more.

    The part of ``element_bytes`` that a smaller dtype (uint8 images, say) would
    shrink; bytes, strings and integer arrays count none.

    >>> import numpy as np
    >>> float_bytes({"image": np.zeros((2, 2), np.float32), "jpeg": b"xy", "label": 3})
    16
    """
    if isinstance(element, dict):
        return sum(float_bytes(v) for v in element.values())
    if isinstance(element, (list, tuple)):
        return sum(float_bytes(v) for v in element)
    dtype = getattr(element, "dtype", None)
    if getattr(dtype, "kind", None) == "f" and getattr(dtype, "itemsize", 0) >= 4:
        return element_bytes(element)
    return 0


class Counts:
    """One thread's counters of one stage: calls, elements, self time, sizes, buffer fill."""

    __slots__ = (*_FIELDS, "first_ns", "last_ns")

    def __init__(self) -> None:
        self.calls = self.elements = self.self_ns = self.inclusive_ns = self.max_ns = 0
        self.bytes_total = self.bytes_samples = self.float_bytes = 0
        self.fill_total = self.fill_samples = self.empty = self.capacity = 0
        self.min_ns = self.first_ns = _NEVER
        self.last_ns = 0

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

    def _sample(self, result: Any) -> None:
        if isinstance(result, list):  # a chunk: its first element that is there
            result = next((x for x in result if x is not None), None)
            if result is None:
                return
        self.bytes_total += element_bytes(result)
        self.float_bytes += float_bytes(result)
        self.bytes_samples += 1

    def fill(self, held: int, capacity: int) -> None:
        """A look at the stage's read-ahead buffer as its consumer asks for an element."""
        self.fill_total += held
        self.fill_samples += 1
        self.empty += held == 0
        self.capacity = capacity


class StageRecord:
    """The counters of one stage: a ``Counts`` per thread that adds, merged on read.

    ``on_deadline(now)`` runs once ``due(now)`` finds ``deadline_ns`` passed
    (only the outermost stage's record has one); one thread runs it for each
    deadline, and it sets the next.
    """

    __slots__ = ("_lock", "_mixers", "_shards", "deadline_ns", "local", "on_deadline")

    def __init__(self) -> None:
        self.local = threading.local()  # .counts: this thread's Counts, once it has added
        self._shards: list[Counts] = []
        self._lock = threading.Lock()
        self.deadline_ns = _NEVER
        self.on_deadline: Callable[[int], None] | None = None
        self._mixers: list[weakref.ref[Any]] = []  # a mix stage's live iterators

    def add_mixer(self, iterator: CountsPerSource) -> None:
        """``iterator`` (a mix's) counts its sources: ``snapshot()`` reads them while it lives."""
        with self._lock:
            self._mixers = [r for r in self._mixers if r() is not None]
            self._mixers.append(weakref.ref(iterator))

    def counts(self) -> Counts:
        """This thread's counters (``record.local.counts`` once this has been called)."""
        try:
            return self.local.counts
        except AttributeError:
            counts = self.local.counts = Counts()
            with self._lock:
                self._shards.append(counts)
            return counts

    def add(self, own_ns: int, inclusive_ns: int, count: int, result: Any, end_ns: int) -> None:
        """``Counts.add`` on this thread's counters, then the deadline."""
        self.counts().add(own_ns, inclusive_ns, count, result, end_ns)
        self.due(end_ns)

    def fill(self, held: int, capacity: int) -> None:
        """``Counts.fill`` on this thread's counters."""
        self.counts().fill(held, capacity)

    def due(self, now: int) -> None:
        """Runs ``on_deadline(now)`` if the deadline has passed, in one thread only."""
        if now < self.deadline_ns or self.on_deadline is None:
            return
        with self._lock:
            if now < self.deadline_ns:
                return  # another thread took this deadline
            self.deadline_ns = _NEVER
        self.on_deadline(now)

    def snapshot(self) -> dict[str, Any]:
        """The figures of all threads as a plain dict (``merged`` adds such dicts).

        A mix stage's also has ``source_counts`` (elements each source gave) and
        ``source_weights`` (the weights in force, as shares of 1).
        """
        with self._lock:
            shards, mixers = list(self._shards), list(self._mixers)
        out: dict[str, Any] = {name: 0 for name in (*_FIELDS, "last_ns")}
        out["min_ns"] = first = _NEVER
        for shard in shards:
            for name in out:
                value = getattr(shard, name)
                if name in _LARGEST:
                    out[name] = max(out[name], value)
                elif name == "min_ns":
                    out[name] = min(out[name], value)
                else:
                    out[name] += value
            first = min(first, shard.first_ns)
        if out["min_ns"] == _NEVER:
            out["min_ns"] = -1
        out["wall_ns"] = out.pop("last_ns") - first if out["calls"] else 0
        if mixers:
            _add_sources(out, [it for it in (r() for r in mixers) if it is not None])
        return out


def _add_sources(out: dict[str, Any], mixers: list[CountsPerSource]) -> None:
    """A mix stage's figures: elements per source (over its live iterators) and the weights
    in force, normalised to shares of 1 (their mean over the iterators)."""
    counts: list[int] = []
    weights: list[float] = []
    for it in mixers:
        try:
            own, given = it.counts, it.weights
        except Exception:  # a schedule that fails now fails the read, not the statistics
            continue
        total = sum(given) or 1.0
        if not counts:
            counts, weights = [0] * len(own), [0.0] * len(own)
        for k, (n, w) in enumerate(zip(own, given)):
            counts[k] += n
            weights[k] += w / total / len(mixers)
    if counts:
        out["source_counts"], out["source_weights"] = counts, weights


def _merged_sources(out: dict[str, Any], snapshots: list[dict[str, Any]]) -> None:
    """Elements per source summed over processes; weights, their mean over processes."""
    mixed = [s for s in snapshots if s.get("source_counts")]
    if not mixed:
        return
    width = max(len(s["source_counts"]) for s in mixed)
    counts, weights = [0] * width, [0.0] * width
    for snap in mixed:
        for k, (n, w) in enumerate(zip(snap["source_counts"], snap["source_weights"])):
            counts[k] += n
            weights[k] += w / len(mixed)
    out["source_counts"], out["source_weights"] = counts, weights


def merged(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one stage over several processes: sums, and the extremes."""
    out: dict[str, Any] = {name: 0 for name in (*_FIELDS, "wall_ns")}
    out["min_ns"] = -1
    _merged_sources(out, snapshots)
    for snap in snapshots:
        for name, value in snap.items():
            if name in ("source_counts", "source_weights"):
                continue
            if name == "min_ns":
                if value >= 0 and (out["min_ns"] < 0 or value < out["min_ns"]):
                    out["min_ns"] = value
            elif name in ("max_ns", "wall_ns", "capacity"):
                out[name] = max(out[name], value) if name != "capacity" else out[name] + value
            else:
                out[name] = out.get(name, 0) + value
    return out
