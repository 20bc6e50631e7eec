"""chute.monitoring: the metrics in Prometheus's text format, served over loopback, and the
summary's lines about reads."""

from __future__ import annotations

import socket
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest

import chute
from chute import experimental, monitoring
from chute._core import metrics
from chute._stats import export

parser = pytest.importorskip("prometheus_client.parser")


def _scraped(text: str) -> dict[str, float]:
    """Every sample of ``text`` by name (a bucket's name carries its ``le``)."""
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            le = sample.labels.get("le")
            out[sample.name + (f"[{le}]" if le else "")] = sample.value
    return out


def test_the_text_parses_back_to_every_metric_with_its_help_and_kind() -> None:
    families = {f.name: f for f in parser.text_string_to_metric_families(monitoring.metrics_text())}
    assert set(families) == {f"chute_{name}" for name in metrics.METRICS}
    for name, metric in metrics.METRICS.items():
        assert families[f"chute_{name}"].type == metric.kind
        assert families[f"chute_{name}"].documentation == metric.help


def test_the_text_shows_what_was_counted() -> None:
    before = _scraped(monitoring.metrics_text())
    metrics.count("cache_bytes_downloaded", 4096)
    metrics.count("cache_hits")
    for seconds in (0.0007, 0.003, 0.003, 7.0, 12.0):
        metrics.observe("remote_read_seconds", seconds)
    after = _scraped(monitoring.metrics_text())

    def added(name: str) -> float:
        return after[name] - before[name]

    assert added("chute_cache_bytes_downloaded_total") == 4096
    assert added("chute_cache_hits_total") == 1
    buckets = "chute_remote_read_seconds_bucket"
    assert added(f"{buckets}[0.001]") == 1  # cumulative, as Prometheus wants
    assert added(f"{buckets}[0.0025]") == 1
    assert added(f"{buckets}[0.005]") == 3
    assert added(f"{buckets}[10.0]") == 4
    assert added(f"{buckets}[+Inf]") == 5 == added("chute_remote_read_seconds_count")
    assert added("chute_remote_read_seconds_sum") == pytest.approx(0.0007 + 0.006 + 19.0)


def test_the_endpoint_serves_the_text_over_loopback_and_stop_leaves_no_thread() -> None:
    threads_before = set(threading.enumerate())
    metrics.count("remote_retries", 3)
    server = monitoring.start_http_server(0)
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(server.url, timeout=30) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        scraped = _scraped(reply.read().decode())
    assert scraped["chute_remote_retries_total"] == metrics.snapshot()["remote_retries"]
    server.stop()
    server.stop()  # again: nothing happens
    assert set(threading.enumerate()) == threads_before
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass


def test_the_endpoint_as_a_context_manager_stops_on_exit() -> None:
    with monitoring.start_http_server(0) as server:
        port = server.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as reply:
            assert b"chute_remote_bytes_total" in reply.read()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


@pytest.mark.parametrize(
    ("port", "error"), [("9000", TypeError), (True, TypeError), (70000, ValueError)]
)
def test_a_bad_port_is_refused_before_anything_listens(port: Any, error: type) -> None:
    with pytest.raises(error, match="port must"):
        monitoring.start_http_server(port)


def test_without_prometheus_client_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
    monkeypatch.setattr(export, "_registry", None)
    with pytest.raises(ImportError, match=r"pip install 'chute\[metrics\]'"):
        monitoring.metrics_text()
    with pytest.raises(ImportError, match=r"pip install 'chute\[metrics\]'"):
        monitoring.start_http_server(0)


def test_the_prefetch_depth_counts_elements_waiting_in_a_thread_buffer() -> None:
    base = metrics.snapshot()["prefetch_buffer_depth"]
    ds = experimental.ThreadPrefetchIterDataset(
        chute.MapDataset.range(100).to_iter_dataset(), prefetch_buffer_size=10
    )
    it = iter(ds)
    next(it)
    deadline = time.monotonic() + 60
    while metrics.snapshot()["prefetch_buffer_depth"] - base < 10:  # the thread fills it
        assert time.monotonic() < deadline, "the buffer never filled"
        time.sleep(0.01)
    it.close()
    assert metrics.snapshot()["prefetch_buffer_depth"] == base


def test_a_summary_shows_no_reads_for_a_pipeline_that_read_none() -> None:
    options = experimental.DatasetOptions(
        execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING
    )
    ds = chute.MapDataset.range(10).to_iter_dataset()
    with iter(experimental.WithOptionsIterDataset(ds, options)) as it:
        list(it)
        summary = experimental.execution_summary(it)
    assert summary.reads is None
    assert "Object stores" not in str(summary)
