"""chute's metrics registry: fixed names, counts, histogram buckets, workers' changes."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest

from chute._core import metrics
from chute._execution import processes


def test_every_name_the_loader_and_the_cache_count_is_registered() -> None:
    kinds = {name: m.kind for name, m in metrics.METRICS.items()}
    assert kinds == {
        "remote_bytes": "counter",
        "remote_requests": "counter",
        "remote_retries": "counter",
        "cache_hits": "counter",
        "cache_misses": "counter",
        "cache_evictions": "counter",
        "cache_bytes_read": "counter",
        "cache_bytes_downloaded": "counter",
        "cache_bytes_held": "gauge",
        "prefetch_buffer_depth": "gauge",
        "remote_read_seconds": "histogram",
        "mix_elements": "counter",
    }
    assert all(m.help.endswith(".") for m in metrics.METRICS.values())
    assert metrics.METRICS["remote_read_seconds"].buckets[0] == 0.001
    assert metrics.METRICS["remote_read_seconds"].buckets[-1] == 10.0


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda: metrics.count("remote_byte"), "counter"),
        (lambda: metrics.count("cache_bytes_held"), "counter"),  # a gauge is not a counter
        (lambda: metrics.set_gauge("cache_hits", 1), "gauge"),
        (lambda: metrics.observe("remote_bytes", 0.1), "histogram"),
        (lambda: metrics.add_sampler("remote_bytes", object(), len), "gauge"),
    ],
)
def test_an_unknown_name_raises_key_error_naming_the_known_ones(call: Any, kind: str) -> None:
    with pytest.raises(KeyError, match=f"no {kind} named"):
        call()


def test_counts_add_up_across_threads() -> None:
    before = metrics.snapshot()["cache_bytes_read"]

    def add() -> None:
        for _ in range(10_000):
            metrics.count("cache_bytes_read", 3)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert metrics.snapshot()["cache_bytes_read"] - before == 4 * 10_000 * 3


def test_a_value_lands_in_the_first_bucket_whose_bound_holds_it() -> None:
    before = metrics.snapshot()["remote_read_seconds"]
    for seconds in (0.0005, 0.001, 0.0011, 0.3, 20.0):
        metrics.observe("remote_read_seconds", seconds)
    after = metrics.snapshot()["remote_read_seconds"]
    added = [a - b for a, b in zip(after["buckets"], before["buckets"])]
    bounds = metrics.LATENCY_BUCKETS
    assert len(added) == len(bounds) + 1  # the last: above every bound
    assert added[0] == 2  # 0.0005 and 0.001 (bounds are inclusive)
    assert added[1] == 1 and added[bounds.index(0.5)] == 1 and added[-1] == 1
    assert after["count"] - before["count"] == 5
    assert after["sum"] - before["sum"] == pytest.approx(0.0005 + 0.001 + 0.0011 + 0.3 + 20.0)


def test_changes_report_increments_once_and_merge_adds_them() -> None:
    metrics.changes()  # what came before is reported
    assert metrics.changes() is None
    metrics.count("cache_misses", 2)
    metrics.observe("remote_read_seconds", 0.02)
    changed = metrics.changes()
    assert changed is not None
    assert changed["cache_misses"] == 2
    assert sum(changed["remote_read_seconds"]["buckets"]) == 1
    assert changed["remote_read_seconds"]["sum"] == pytest.approx(0.02)
    assert metrics.changes() is None
    before = metrics.snapshot()
    metrics.merge(changed, source="worker-a")
    after = metrics.snapshot()
    assert after["cache_misses"] - before["cache_misses"] == 2
    assert after["remote_read_seconds"]["count"] - before["remote_read_seconds"]["count"] == 1
    metrics.merge({"a_name_of_a_later_version": 1}, source="worker-a")  # left out


def test_workers_gauges_add_up_until_forgotten_and_a_host_gauge_takes_the_last_value() -> None:
    base = metrics.snapshot()["prefetch_buffer_depth"]
    metrics.merge({"prefetch_buffer_depth": 3, "cache_bytes_held": 100}, source="w1")
    metrics.merge({"prefetch_buffer_depth": 4, "cache_bytes_held": 120}, source="w2")
    metrics.merge({"prefetch_buffer_depth": 1}, source="w1")  # replaces w1's 3
    now = metrics.snapshot()
    assert now["prefetch_buffer_depth"] - base == 5
    assert now["cache_bytes_held"] == 120
    metrics.forget("w1")
    metrics.forget("w2")
    assert metrics.snapshot()["prefetch_buffer_depth"] == base
    metrics.set_gauge("cache_bytes_held", 0)


def test_a_sampler_counts_while_its_owner_lives() -> None:
    class Buffer:
        held = 7

    buffer = Buffer()
    base = metrics.snapshot()["prefetch_buffer_depth"]
    metrics.add_sampler("prefetch_buffer_depth", buffer, lambda b: b.held)
    assert metrics.snapshot()["prefetch_buffer_depth"] - base == 7

    broken = Buffer()
    metrics.add_sampler("prefetch_buffer_depth", broken, lambda b: 1 / 0)  # left out
    assert metrics.snapshot()["prefetch_buffer_depth"] - base == 7
    del buffer, broken
    assert metrics.snapshot()["prefetch_buffer_depth"] == base


def _child_snapshot(conn: Any) -> None:
    conn.send(metrics.snapshot())


@pytest.mark.forks
def test_a_forked_process_starts_from_zero() -> None:
    if processes.fork_unsafe_reason() is not None:
        pytest.skip(f"this test process cannot fork: {processes.fork_unsafe_reason()}")
    metrics.count("cache_hits", 5)
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_child_snapshot, args=(send,))
    child.start()
    got = receive.recv()
    child.join(timeout=10)
    assert got["cache_hits"] == 0 and got["remote_read_seconds"]["count"] == 0
    assert metrics.snapshot()["cache_hits"] >= 5
