"""chute's metrics: counters, gauges and a histogram of what the loader reads, per process.

A small registry of fixed names, each registered below with its help text; an unknown
name raises ``KeyError``, so that a typo fails a test instead of counting nothing.  The
call sites count per request (a ranged GET, a cache lookup), never per record:

* ``count(name, amount)`` adds to a counter,
* ``observe(name, seconds)`` adds one value to a histogram,
* ``set_gauge(name, value)`` sets a gauge,
* ``add_mix_sources(iterator, stage)`` counts a mix's elements per source, read from
  the iterator's own counts when the metrics are read,
* ``snapshot()`` reads them all: a flat ``{name: value}`` (a histogram's value is
  ``{"buckets": counts per bucket, "sum": ..., "count": ...}``).

Worker processes send what changed to their parent (``changes()`` in the worker,
``merge()`` in the parent, along the messages that carry the elements), so the parent's
figures are its own plus its workers'.  A forked process starts from zero.  A gauge is
either a figure of one process (the parent shows the sum over its workers: elements
waiting in buffers) or a figure of the host (the value reported last stands: the bytes
a cache shared by all processes holds).  A gauge can also be sampled when it is read
(``add_sampler``): the buffers' fill costs nothing while no one reads it.

``chute.monitoring`` exports these in Prometheus's text format, as ``chute_<name>``
(``chute_<name>_total`` for counters).

>>> before = snapshot()["remote_retries"]
>>> count("remote_retries", 2)
>>> snapshot()["remote_retries"] - before
2
>>> count("remote_retrys")  # doctest: +ELLIPSIS
Traceback (most recent call last):
KeyError: "no counter named 'remote_retrys' in chute's metrics; counters: cache_bytes_...
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

__all__ = [
    "LATENCY_BUCKETS",
    "METRICS",
    "SEND_INTERVAL_S",
    "Metric",
    "add_buffer",
    "add_mix_sources",
    "add_sampler",
    "changes",
    "count",
    "due",
    "forget",
    "merge",
    "observe",
    "read_mix",
    "set_gauge",
    "snapshot",
]

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SEND_INTERVAL_S = 1.0  # a worker sends what changed at most this often (and when it ends)


@dataclasses.dataclass(frozen=True)
class Metric:
    """One of chute's metrics.

    Attributes:
        name: Its name here; exported as ``chute_<name>`` (``_total`` added to counters).
        kind: ``"counter"``, ``"gauge"`` or ``"histogram"``.
        help: What it measures, for the exported help text.
        buckets: A histogram's bucket bounds (upper, inclusive), ascending.
        per_process: For a gauge: whether each process has its own value and the parent
            shows their sum (``False``: one value for the host; the latest report stands).
        labels: A counter's label names: its value is then ``{label values: count}``.
    """

    name: str
    kind: str
    help: str
    buckets: tuple[float, ...] = ()
    per_process: bool = True
    labels: tuple[str, ...] = ()


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("remote_bytes", COUNTER, "Bytes read from object stores (answers of ranged GETs)."),
        Metric(
            "remote_requests",
            COUNTER,
            "Requests sent to object stores (GET and HEAD), each retry included.",
        ),
        Metric(
            "remote_retries", COUNTER, "Object-store requests retried after a transient failure."
        ),
        Metric(
            "cache_hits",
            COUNTER,
            "Reads of a cached remote object served whole by the local shard cache (a whole "
            "copy, or bytes a download had landed); one read: the ranges or records one "
            "call asks of one object.",
        ),
        Metric(
            "cache_misses",
            COUNTER,
            "Reads of a remote object with a shard cache that went to the bucket for some "
            "of their bytes (no copy yet, and not landed).",
        ),
        Metric(
            "cache_evictions", COUNTER, "Objects evicted from the local shard cache (its budget)."
        ),
        Metric("cache_bytes_read", COUNTER, "Bytes read from cached copies of remote objects."),
        Metric("cache_bytes_downloaded", COUNTER, "Bytes downloaded into the local shard cache."),
        Metric(
            "cache_bytes_held",
            GAUGE,
            "Bytes in the local shard cache's directory (whole copies and downloads under way, "
            "by every process of the host), as this process last looked: when it opened the "
            "cache, or began a download into it.",
            per_process=False,
        ),
        Metric(
            "prefetch_buffer_depth",
            GAUGE,
            "Elements waiting in read-ahead buffers and worker pools.",
        ),
        Metric(
            "mix_elements",
            COUNTER,
            "Elements each source of a mix stage (IterDataset.mix) gave it, by the mix's stage "
            "name and the source's position; counted in pipelines that keep statistics.",
            labels=("stage", "source"),
        ),
        Metric(
            "remote_read_seconds",
            HISTOGRAM,
            "Latency of each ranged GET to an object store, in seconds (failed ones included).",
            buckets=LATENCY_BUCKETS,
        ),
    )
}

_BOUNDS = {m.name: m.buckets for m in METRICS.values() if m.kind == HISTOGRAM}
_lock = threading.Lock()
_counters: dict[str, float] = {}
_gauges: dict[str, float] = {}
_histograms: dict[str, list[float]] = {}  # counts per bucket (the last: above all), then the sum
_from_workers: dict[Hashable, dict[str, float]] = {}  # per-process gauges, by worker
_samplers: dict[int, tuple[str, weakref.ref[Any], Callable[[Any], float]]] = {}
_labelled: dict[str, dict[tuple[str, ...], float]] = {}  # labelled counters' values
_mixes: dict[int, tuple[weakref.ref[Any], str, list[int]]] = {}  # owner, stage, counts read
_sent: dict[str, Any] = {}  # what changes() reported last
_next_due = 0.0


def _names(kind: str) -> list[str]:
    return sorted(name for name, m in METRICS.items() if m.kind == kind)


def _unknown(name: str, kind: str) -> str:
    return f"no {kind} named {name!r} in chute's metrics; {kind}s: {', '.join(_names(kind))}"


def count(name: str, amount: float = 1) -> None:
    """Adds ``amount`` to the counter ``name``."""
    with _lock:
        try:
            _counters[name] += amount
        except KeyError:
            raise KeyError(_unknown(name, COUNTER)) from None


def observe(name: str, value: float) -> None:
    """Adds one value (seconds) to the histogram ``name``."""
    try:
        where = bisect.bisect_left(_BOUNDS[name], value)
    except KeyError:
        raise KeyError(_unknown(name, HISTOGRAM)) from None
    with _lock:
        histogram = _histograms[name]
        histogram[where] += 1
        histogram[-1] += value


def set_gauge(name: str, value: float) -> None:
    """Sets the gauge ``name`` to ``value`` (this process's, or the host's: see ``Metric``)."""
    with _lock:
        if name not in _gauges:
            raise KeyError(_unknown(name, GAUGE))
        _gauges[name] = value


def add_sampler(name: str, owner: Any, read: Callable[[Any], float]) -> None:
    """Adds ``read(owner)`` to the gauge ``name`` whenever the metrics are read, for as long
    as ``owner`` lives.  ``read`` may run on another thread (a scrape); if it raises, that
    reading leaves it out."""
    if METRICS.get(name) is None or METRICS[name].kind != GAUGE:
        raise KeyError(_unknown(name, GAUGE))
    key = id(owner)

    def gone(_: object) -> None:
        _samplers.pop(key, None)

    _samplers[key] = (name, weakref.ref(owner, gone), read)


def add_buffer(owner: Any) -> None:
    """Counts the elements waiting in ``owner``'s read-ahead buffer in
    ``prefetch_buffer_depth``, while it lives: a prefetch stage or a worker pool, whose
    ``_buffer_fill()`` gives ``(waiting, capacity)`` (as the statistics read it)."""
    add_sampler("prefetch_buffer_depth", owner, _waiting)


def _waiting(owner: Any) -> float:
    return owner._buffer_fill()[0]


def add_mix_sources(owner: Any, stage: str) -> None:
    """Counts the elements each source gave the mix iterator ``owner`` in ``mix_elements``
    (labels: ``stage``, the source's position), for as long as it lives.

    ``owner.counts`` (elements per source since it was built or restored) is read when
    the metrics are read, never per element; call ``read_mix(owner)`` before a restore
    sets its counts back, or before it closes, so that nothing it counted is left out.
    """
    key = id(owner)

    def gone(_: object) -> None:
        _mixes.pop(key, None)

    _mixes[key] = (weakref.ref(owner, gone), stage, [])


def read_mix(owner: Any) -> None:
    """Adds what the mix iterator ``owner`` counted since the last read to ``mix_elements``."""
    with _lock:
        _read_mixes(id(owner))


def _read_mixes(only: int | None = None) -> None:
    """Adds what each live mix iterator (or the one of id ``only``) counted since the
    last read to ``mix_elements`` (with ``_lock`` held)."""
    counted = _labelled["mix_elements"]
    entries = list(_mixes.values()) if only is None else [_mixes[only]] if only in _mixes else []
    for ref, stage, seen in entries:
        owner = ref()
        if owner is None:
            continue
        try:
            now = list(owner.counts)
        except Exception:  # the owner is closing, or changed under the read
            continue
        if len(seen) != len(now) or any(n < s for n, s in zip(now, seen)):
            seen[:] = [0] * len(now)  # restored: it counts from zero again
        for k, (n, s) in enumerate(zip(now, seen)):
            if n != s:
                labels = (stage, str(k))
                counted[labels] = counted.get(labels, 0) + n - s
        seen[:] = now


def snapshot() -> dict[str, Any]:
    """Every metric's value now: this process's figures plus what its workers sent."""
    sampled: dict[str, float] = {}
    for name, ref, read in list(_samplers.values()):
        owner = ref()
        if owner is not None:
            try:
                sampled[name] = sampled.get(name, 0) + read(owner)
            except Exception:  # the owner is closing, or changed under the read
                pass
    with _lock:
        _read_mixes()
        out: dict[str, Any] = {**_counters, **_gauges}
        out.update((name, dict(values)) for name, values in _labelled.items())
        for values in _from_workers.values():
            for name, value in values.items():
                out[name] += value
        for name, histogram in _histograms.items():
            buckets = histogram[:-1]
            out[name] = {"buckets": buckets, "sum": histogram[-1], "count": sum(buckets)}
    for name, value in sampled.items():
        out[name] += value
    return out


def due() -> bool:
    """Whether ``SEND_INTERVAL_S`` has passed since ``changes()`` was called last (cheap:
    a worker asks with every element it sends)."""
    return time.monotonic() >= _next_due


def changes() -> dict[str, Any] | None:
    """What changed since the last call, for the parent's ``merge``: counters' and
    histograms' increments, gauges' values now; ``None`` if nothing did.

    One caller per process: a worker process's loop.
    """
    global _sent, _next_due
    now = snapshot()
    _next_due = time.monotonic() + SEND_INTERVAL_S
    out: dict[str, Any] = {}
    for name, value in now.items():
        before = _sent[name]
        kind = METRICS[name].kind
        if METRICS[name].labels and value != before:  # as pairs: plain data for any transport
            out[name] = [
                [list(labels), n - before.get(labels, 0)]
                for labels, n in value.items()
                if n != before.get(labels, 0)
            ]
        elif kind == COUNTER and value != before:
            out[name] = value - before
        elif kind == GAUGE and value != before:
            out[name] = value
        elif kind == HISTOGRAM and value["count"] != before["count"]:
            out[name] = {
                "buckets": [a - b for a, b in zip(value["buckets"], before["buckets"])],
                "sum": value["sum"] - before["sum"],
            }
    _sent = now
    return out or None


def merge(changed: dict[str, Any], source: Hashable) -> None:
    """Adds what the worker ``source`` reported (``changes()`` there) to this process's
    figures; names this version does not know are left out."""
    with _lock:
        for name, value in changed.items():
            metric = METRICS.get(name)
            if metric is None:
                continue
            if metric.labels:
                counted = _labelled[name]
                for labels, n in value:
                    counted[tuple(labels)] = counted.get(tuple(labels), 0) + n
            elif metric.kind == COUNTER:
                _counters[name] += value
            elif metric.kind == HISTOGRAM:
                histogram = _histograms[name]
                for i, n in enumerate(value["buckets"]):
                    histogram[i] += n
                histogram[-1] += value["sum"]
            elif metric.per_process:
                _from_workers.setdefault(source, {})[name] = value
            else:
                _gauges[name] = value


def forget(source: Hashable) -> None:
    """Drops the per-process gauges of the worker ``source`` (it stopped); its counts stay."""
    with _lock:
        _from_workers.pop(source, None)


def _zero() -> None:
    """Every metric at zero, nothing from workers, nothing sampled (at import, in a fork)."""
    global _lock, _sent, _next_due
    _lock = threading.Lock()  # a fork may have copied it held by another thread
    _from_workers.clear()
    _samplers.clear()  # the parent's iterators: copies in this process, not its own
    _mixes.clear()
    for name, metric in METRICS.items():
        if metric.labels:
            _labelled[name] = {}
        elif metric.kind == COUNTER:
            _counters[name] = 0
        elif metric.kind == GAUGE:
            _gauges[name] = 0
        else:
            _histograms[name] = [0] * (len(metric.buckets) + 2)
    _sent = snapshot()
    _next_due = time.monotonic() + SEND_INTERVAL_S


_zero()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_zero)
