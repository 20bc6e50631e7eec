"""chute's metrics of reads from a bucket: each request, byte, retry and latency counted once,
in the process that reads or summed from its workers, as the store and the test know them."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path
from typing import Any

import pytest

import chute
from chute import ArrayRecordDataSource, MapDataset, experimental, monitoring
from chute._core import metrics
from chute._remote import RetryPolicy, open_source

parser = pytest.importorskip("prometheus_client.parser")

FAST = RetryPolicy(attempts=10, deadline=30, base_delay=0.001, max_delay=0.01)
COUNTED = ("remote_bytes", "remote_requests", "remote_retries")


def _added(before: dict[str, Any]) -> dict[str, Any]:
    now = metrics.snapshot()
    out = {name: now[name] - before[name] for name in COUNTED}
    out["gets_timed"] = now["remote_read_seconds"]["count"] - before["remote_read_seconds"]["count"]
    return out


def test_reading_known_ranges_counts_one_head_and_one_get_each(s3: Any) -> None:
    data = os.urandom(1 << 20)
    url = s3.put("known.bin", data)
    ranges = [(i * 50_000, 1_000 + i) for i in range(12)]  # far apart: one GET each
    s3.proxy.configure()
    before = metrics.snapshot()
    source = open_source(url)
    source.coalesce = 0
    assert source.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
    added = _added(before)
    assert added == {
        "remote_bytes": sum(n for _, n in ranges),
        "remote_requests": 1 + len(ranges),  # the HEAD at open, then the GETs
        "remote_retries": 0,
        "gets_timed": len(ranges),
    }
    assert s3.proxy.requests == 1 + len(ranges)


def test_ranges_merged_into_one_get_count_as_one_request(s3: Any) -> None:
    data = os.urandom(100_000)
    url = s3.put("merged.bin", data)
    source = open_source(url)  # ranges less than 1 MiB apart merge
    before = metrics.snapshot()
    source.read_ranges([(0, 10), (100, 10), (5_000, 10)])
    assert _added(before) == {
        "remote_bytes": 5_010,  # the merged range's bytes travel
        "remote_requests": 1,
        "remote_retries": 0,
        "gets_timed": 1,
    }


@pytest.mark.parametrize("faults", [(503,), (500, 503, "reset", "cut")], ids=["503", "mixed"])
def test_every_injected_fault_counts_one_retry_and_one_more_request(s3: Any, faults: Any) -> None:
    data = os.urandom(1 << 20)
    url = s3.put("flaky.bin", data)
    s3.proxy.configure(fault_rate=0.3, faults=faults, seed=7, methods=("GET",))
    before = metrics.snapshot()
    source = open_source(url, retry=FAST, max_in_flight=8)
    source.coalesce = 0
    ranges = [(i * 20_000, 5_000 + i) for i in range(40)]
    for _ in range(3):
        assert source.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
    added = _added(before)
    assert s3.proxy.injected > 0
    assert added["remote_retries"] == s3.proxy.injected == source.retries
    assert added["remote_requests"] == s3.proxy.requests
    assert added["remote_bytes"] == 3 * sum(n for _, n in ranges)  # whole answers only
    assert added["gets_timed"] == added["remote_requests"] - 1  # every GET, failed or not


def test_a_gcs_source_counts_each_get_and_head_it_asks_its_client_for(gcs: Any) -> None:
    data = os.urandom(300_000)
    url = gcs.put("known.bin", data)
    gcs.proxy.configure()
    before = metrics.snapshot()
    source = open_source(url)
    source.coalesce = 0
    ranges = [(0, 100), (100_000, 100), (200_000, 100)]
    assert source.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
    added = _added(before)
    assert added["remote_bytes"] == 300 and added["gets_timed"] == 3
    # The HEAD at open, the GETs, and the HEAD that checks the version after a batch (an
    # fsspec client's reads carry no If-Match); gcsfs may send more HTTP requests for one.
    assert added["remote_requests"] == 1 + 3 + 1 <= gcs.proxy.requests


def _upload(store: Any, tmp_path: Path) -> tuple[list[str], list[str]]:
    from chute._sources.array_record.writer import write_array_record

    data = [b"rec%05d:" % i + b"z" * (i % 300) for i in range(1200)]
    files = write_array_record(
        data, str(tmp_path / "train"), num_shards=4, options="group_size:10,uncompressed"
    )
    return [store.put(f"data/{Path(f).name}", Path(f).read_bytes()) for f in files], files


def _loader(source: Any) -> Any:
    sampler = chute.IndexSampler(
        len(source), shard_options=chute.NoSharding(), shuffle=True, seed=1, num_epochs=1
    )
    return chute.DataLoader(data_source=source, sampler=sampler, worker_count=2)


def _mp_prefetch(source: Any) -> Any:
    ds = MapDataset.source(source).seed(1).shuffle().batch(100).to_iter_dataset()
    ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=2))
    options = experimental.DatasetOptions(
        execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING
    )
    return experimental.WithOptionsIterDataset(ds, options)


def _records(pipeline: Any, it: Any) -> list[bytes]:
    return [x for batch in it for x in batch] if pipeline is _mp_prefetch else list(it)


@pytest.mark.parametrize("pipeline", [_mp_prefetch, _loader], ids=["mp_prefetch", "DataLoader"])
def test_the_workers_reads_reach_the_parent_summed_once_each(
    s3: Any, tmp_path: Path, pipeline: Any
) -> None:
    pytest.importorskip("array_record")
    from chute._sources.array_record.index import write_index

    urls, files = _upload(s3, tmp_path)
    index = write_index(urls, s3.url("data/train.chute-index"))
    # The workers get the store with the pipeline; without retries of its own, its
    # failures reach chute's retries.  No request fails more than 3 times in a row, so
    # none spends its budget (see test_array_record_remote).
    store = s3.obstore_store(
        retry_config={"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=60)}
    )
    s3.proxy.configure(fault_rate=0.1, faults=(503,), seed=4, methods=("GET",), max_in_a_row=3)
    before = metrics.snapshot()
    source = ArrayRecordDataSource(index, filesystem=store)
    opened = metrics.snapshot()
    with iter(pipeline(source)) as it:
        got = sorted(_records(pipeline, it))
        summary = experimental.execution_summary(it) if pipeline is _mp_prefetch else None
    assert got == sorted(ArrayRecordDataSource(files).__getitems__(list(range(1200))))
    # Each worker sent what it counted with its last element: every request the store
    # answered (or failed) is counted once, in this process.
    added = _added(before)
    assert added["remote_requests"] == s3.proxy.requests
    assert added["remote_retries"] == s3.proxy.injected > 0
    assert added["remote_bytes"] > 0 and added["gets_timed"] > 0
    scraped = {
        s.name: s.value
        for family in parser.text_string_to_metric_families(monitoring.metrics_text())
        for s in family.samples
    }
    assert scraped["chute_remote_requests_total"] == metrics.snapshot()["remote_requests"]
    if summary is not None:  # the summary counts from iter(), after the source opened
        reads = summary.reads
        assert reads is not None
        since_open = _added(opened)
        assert reads.remote_requests == since_open["remote_requests"]
        assert reads.remote_retries == since_open["remote_retries"]
        assert reads.remote_bytes == since_open["remote_bytes"]
        assert 0 < reads.read_p50_seconds <= reads.read_p99_seconds <= 10.0
        assert "Object stores:" in str(summary)


def _epoch(source: Any) -> tuple[Any, list[bytes]]:
    """One epoch of ``source`` with statistics on: what the summary says it read, and the
    records."""
    ds = MapDataset.source(source).seed(1).shuffle().batch(100).to_iter_dataset()
    options = experimental.DatasetOptions(
        execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING
    )
    with iter(experimental.WithOptionsIterDataset(ds, options)) as it:
        records = [x for batch in it for x in batch]
        return experimental.execution_summary(it), records


def test_the_cache_figures_count_reads_served_from_it_and_the_bytes_its_directory_holds(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("array_record")
    from chute._sources.array_record import indexed
    from chute._sources.array_record.index import write_index

    monkeypatch.setattr(indexed, "LOOK_FOR_COPIES_S", 0.0)  # moves onto copies at once
    urls, files = _upload(s3, tmp_path)
    index = write_index(urls, s3.url("data/train.chute-index"))
    cache_dir = tmp_path / "cache"
    whole = sum(Path(f).stat().st_size for f in files)
    source = ArrayRecordDataSource(index, cache_dir=cache_dir)
    expected = sorted(ArrayRecordDataSource(files).__getitems__(list(range(1200))))
    summary, records = _epoch(source)  # from the bucket, or what the downloads landed
    first = summary.reads
    assert sorted(records) == expected and first is not None
    assert first.cache_hits + first.cache_misses > 0
    for _ in range(1000):  # the downloads end (each is one GET of an 11 kB object)
        if sum(p.stat().st_size for p in (cache_dir / "objects").iterdir()) == whole:
            break
        time.sleep(0.01)
    _epoch(source)  # moves each shard onto its copy as it is read
    summary, records = _epoch(source)  # epoch 3 reads only the copies
    second = summary.reads
    assert sorted(records) == expected and second is not None
    assert second.cache_hits >= 4 and second.cache_misses == 0  # a read per shard at least
    assert second.cache_bytes_read > 0 and second.remote_bytes == 0
    assert second.cache_bytes_held == whole
    # Another process (a fresh gauge) that only reads the copies: held is still the
    # directory's.
    metrics.set_gauge("cache_bytes_held", 0)
    summary, records = _epoch(ArrayRecordDataSource(index, cache_dir=cache_dir))
    again = summary.reads
    assert sorted(records) == expected and again is not None
    assert again.cache_hits >= 4 and again.cache_misses == 0
    assert again.cache_bytes_held == whole
    line = next(line for line in str(summary).splitlines() if line.startswith("Shard cache"))
    assert f"{again.cache_hits:,} reads from it (hits), 0 from the bucket (misses)" in line, line
