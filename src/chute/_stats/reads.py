"""``ReadStats``: what a pipeline read from object stores and the local shard cache.

The figures come from chute's metrics (``chute._core.metrics``, the same ones
``chute.monitoring`` exports), counted in this process and its workers since the
iterator started; the cache's bytes held are the cache's now.  The latency
percentiles are estimated from the histogram's buckets, as Prometheus's
``histogram_quantile`` does (linear within the bucket that holds the rank).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from chute._core import metrics

__all__ = ["ReadStats", "quantile", "read_stats", "text"]


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """What the pipeline read from object stores and from the local shard cache.

    Args:
      remote_bytes: bytes read from object stores.
      remote_requests: requests sent to them (GET and HEAD, retries included).
      remote_retries: requests retried after a transient failure.
      read_p50_seconds, read_p99_seconds: the median and 99th percentile of a ranged
        GET's latency, estimated from the histogram's buckets (0 when none was made).
      read_mean_seconds: the mean latency of a ranged GET (0 when none was made).
      cache_hits: reads served whole by the local shard cache: a whole copy, or bytes
        a download had landed (a read: the records or ranges one call asks of one
        object, e.g. a batch's records in one shard).
      cache_misses: reads through a cache that went to the bucket for some of their
        bytes (no copy yet, and not landed).
      cache_evictions: copies evicted to make room.
      cache_bytes_read: bytes those reads took from the cache.
      cache_bytes_downloaded: bytes downloaded into the cache.
      cache_bytes_held: bytes in the cache directory (whole copies and downloads under
        way, by every process of this host), whoever downloaded them, as this process
        last looked: when it opened the cache, or began a download into it.
    """

    remote_bytes: int = 0
    remote_requests: int = 0
    remote_retries: int = 0
    read_p50_seconds: float = 0.0
    read_p99_seconds: float = 0.0
    read_mean_seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    cache_bytes_read: int = 0
    cache_bytes_downloaded: int = 0
    cache_bytes_held: int = 0


_COUNTED = ("remote_bytes", "remote_requests", "remote_retries", "cache_hits", "cache_misses",
            "cache_evictions", "cache_bytes_read", "cache_bytes_downloaded")  # fmt: skip


def read_stats(start: dict[str, Any] | None) -> ReadStats | None:
    """The figures since the metrics were ``start`` (a ``metrics.snapshot()``; None: since
    the process started); None when nothing was read remotely or through the cache."""
    now = metrics.snapshot()
    start = start or {}
    counted = {name: int(now[name] - start.get(name, 0)) for name in _COUNTED}
    latency = now["remote_read_seconds"]
    before = start.get("remote_read_seconds")
    if before is not None:
        latency = {
            "buckets": [a - b for a, b in zip(latency["buckets"], before["buckets"])],
            "sum": latency["sum"] - before["sum"],
            "count": latency["count"] - before["count"],
        }
    if not any(counted.values()) and not latency["count"]:
        return None  # (bytes a cache holds for earlier pipelines say nothing of this one)
    bounds = metrics.METRICS["remote_read_seconds"].buckets
    return ReadStats(
        **counted,
        read_p50_seconds=quantile(0.5, bounds, latency["buckets"]),
        read_p99_seconds=quantile(0.99, bounds, latency["buckets"]),
        read_mean_seconds=latency["sum"] / latency["count"] if latency["count"] else 0.0,
        cache_bytes_held=int(now["cache_bytes_held"]),
    )


def quantile(q: float, bounds: tuple[float, ...], counts: list[int]) -> float:
    """The ``q`` quantile of a histogram (``counts`` per bucket, the last above every bound).

    >>> quantile(0.5, (1.0, 2.0), [0, 4, 0])  # all in (1, 2]: the middle of it
    1.5
    >>> quantile(0.99, (1.0, 2.0), [1, 0, 9])  # above the last bound: that bound
    2.0
    """
    total = sum(counts)
    if not total:
        return 0.0
    rank, seen = q * total, 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i == len(bounds):
                return bounds[-1]
            low = bounds[i - 1] if i else 0.0
            return low + (bounds[i] - low) * (rank - seen) / n
        seen += n
    return bounds[-1]


def text(reads: ReadStats, seconds: Any, size: Any) -> list[str]:
    """The summary's lines about ``reads`` (``seconds``, ``size``: the table's formats)."""
    lines = []
    if reads.remote_requests:
        lines.append(
            f"Object stores: {size(reads.remote_bytes)} in {reads.remote_requests:,} "
            f"requests ({reads.remote_retries:,} retried); a ranged GET took "
            f"p50 {seconds(reads.read_p50_seconds)}, p99 {seconds(reads.read_p99_seconds)}, "
            f"mean {seconds(reads.read_mean_seconds)}."
        )
    if reads.cache_hits or reads.cache_misses or reads.cache_bytes_read:
        lines.append(
            f"Shard cache: {reads.cache_hits:,} reads from it (hits), {reads.cache_misses:,} "
            f"from the bucket (misses), {reads.cache_evictions:,} evictions; "
            f"{size(reads.cache_bytes_read)} read from it, "
            f"{size(reads.cache_bytes_downloaded)} downloaded; its directory holds "
            f"{size(reads.cache_bytes_held)} on this host."
        )
    return lines
