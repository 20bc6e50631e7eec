"""chute's metrics for Prometheus: what the loader reads from buckets and the shard cache.

``grain.monitoring``'s place in chute.  chute sends nothing anywhere on its own: the
metrics stay in the process until you read them (``metrics_text()``) or serve them
(``start_http_server(port)``, off until called).  They need the ``metrics`` extra
(``pip install 'chute[metrics]'``: prometheus_client).

Exported, as the figures of this process and its worker processes:

* counters ``chute_remote_bytes_total``, ``chute_remote_requests_total``,
  ``chute_remote_retries_total``, ``chute_cache_hits_total``,
  ``chute_cache_misses_total``, ``chute_cache_evictions_total``,
  ``chute_cache_bytes_read_total``, ``chute_cache_bytes_downloaded_total``;
* the counter ``chute_mix_elements_total{stage="...", source="0"}``: the elements each
  source of a mix gave it (in pipelines that keep statistics, see
  ``chute.experimental.execution_summary``);
* gauges ``chute_cache_bytes_held``, ``chute_prefetch_buffer_depth``;
* the histogram ``chute_remote_read_seconds`` (each ranged GET's latency, 1 ms to 10 s).

A cache *hit* is a read (the records or ranges one call asks of one object) that the
local shard cache served whole, from a copy or from what a download had landed; a
*miss*, a read through the cache that went to the bucket for some of its bytes.  The
bytes *held* are those in the cache directory on this host (copies and downloads under
way, whichever process made them).

The same figures, per iterator, are in ``chute.experimental.execution_summary``.
"""

from chute._stats.export import MetricsServer, metrics_text, start_http_server

__all__ = ["MetricsServer", "metrics_text", "start_http_server"]
