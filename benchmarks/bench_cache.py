"""Training from a bucket with chute's shard cache, against reading without it, local
files, and the caches of MosaicML Streaming and LitData.

    bash benchmarks/run cache

Two stores, each adding 20 ms to every request, in processes of their own:

* ``http``: ``range_server.py``, ranged GETs over the local shards (a store that keeps up);
* ``S3``: moto's S3 behind the latency proxy, which every peer can read (Streaming and
  LitData read S3-compatible stores; neither reads a plain http server).

Two workloads, written with ``write_array_record`` (a chunk a record): ``1 KiB`` (60,000
records in 32 shards) and ``64 KiB`` (6,000 records in 48 shards).  chute's pipeline::

    MapDataset.source(ArrayRecordDataSource(index, cache_dir=...)).seed(0).shuffle()
        .batch(256).to_iter_dataset()            # inline (read-ahead threads)
        .mp_prefetch(MultiprocessingOptions(num_workers=2))   # 2 workers

Each epoch goes through a fresh iterator.  The rows, in records a second:

* ``bucket``: no cache, every batch's records fetched by ranged GETs when asked: epoch 1
  without read-ahead;
* ``cache epoch 1``: an empty cache directory; each shard's first read starts its whole
  download in the background, and the reads take its bytes as they land.  ``bucket`` and
  ``cache epoch 1`` run in turns, 3 pairs; the read-ahead ratio is the median of the
  pairs' ratios (each pair runs back to back, so the machine's drift between pairs
  cancels);
* ``cache epoch 2``: a new source over the filled cache (a later run);
* ``local``: the same shards on local disk, array_record's reader (what epoch 2 must
  match).  ``local`` and ``cache epoch 2`` run in turns, 5 pairs, each sample 3 epochs
  (an epoch takes about half a second, its workers' start included); the ratio is the
  median of the pairs';
* ``download limit``: an empty cache filled with every shard, nothing read;
* ``epoch 1 limit``: the same filling while one epoch of the local files is read, both at
  once: the least epoch 1 can take on this machine, whose cores both jobs share;
* ``3 epochs, metrics exported``: three epochs from the cache with ``chute.monitoring``'s
  endpoint up and scraped 4 times a second, against the same three without it
  (alternated, 11 times each; the ratio is the median of the 11 pairs' ratios, each pair
  run back to back); the client that scrapes runs in a process of its own, as a
  Prometheus server would.  The machine's drift moves that A/B by a few percent either
  way, more than the 2% it must resolve, so the target applies to the cost measured
  alone: this process's CPU for 200 scrapes back to back, per scrape, times the 4
  scrapes a second of the A/B, against the CPU of its 3 epochs.  The A/B's ratios (of
  the wall time, and of this process's CPU) are printed beside it.

Peers over S3, 2 workers each, epoch 1 from an empty cache and epoch 2 from the filled
one, in 3 rounds of chute, Streaming and LitData in turn (each ratio the median of the
rounds'), used as their docs show: Streaming (``MDSWriter``, ``StreamingDataset(remote=...,
local=..., shuffle=True)`` in a torch ``DataLoader``) and LitData (``optimize``,
``StreamingDataset("s3://...", shuffle=True, cache_dir=...)`` in its
``StreamingDataLoader``).  Every loader's epoch must hold every record once.
"""

# bench-requires: moto[server] boto3 obstore cramjam array_record prometheus_client
# bench-requires: torch==2.13.0 streaming-community litdata

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import common
import runners
from bench_remote import Workload
from bench_remote_clients import LATENCY, s3_servers

try:
    import boto3

    import chute
    from chute._sources.array_record.index import write_index
    from chute.experimental import write_array_record
    from remote_peers import range_server
except ImportError as exc:
    sys.exit(f"bench_cache: {exc}; run it through bash benchmarks/run cache")

BUCKET = "bench"
BATCH = 256
WORKERS = 2
METRICS_SAMPLES = 11  # of each side of the metrics' A/B, alternated
READ_AHEAD_PAIRS = 3  # bucket and cache epoch 1, alternated
LOCAL_PAIRS = 5  # local and cache epoch 2, alternated ...
EPOCHS_A_SAMPLE = 3  # ... each sample this many epochs (an epoch takes about 0.5 s)
PEER_ROUNDS = 3  # of chute, Streaming and LitData in turn, each from an empty cache
TARGETS = {"read-ahead": 2.0, "epoch 2 / local": 0.9, "metrics": 0.98}


WORKLOADS = [Workload("1 KiB", 1024, 60_000, 32), Workload("64 KiB", 64 << 10, 6_000, 48)]
if os.environ.get("BENCH_QUICK") == "1":  # a short run, to try the benchmark itself
    WORKLOADS = [Workload("1 KiB", 1024, 6_000, 8), Workload("64 KiB", 64 << 10, 600, 8)]


def records(w: Workload) -> list[bytes]:
    rng = np.random.default_rng(0)
    body = rng.bytes(w.record_bytes)
    return [b"%08d" % i + body[8:] for i in range(w.records)]


def epoch(make: Callable[[], Any]) -> tuple[float, int, int]:
    """Seconds for one epoch of ``make()``'s batches, the records and their bytes."""
    start = time.perf_counter()
    n = size = 0
    for batch in make():
        n += len(batch)
        size += sum(len(r) for r in batch)
    return time.perf_counter() - start, n, size


def chute_loader(source: Any, workers: int) -> Any:
    ds = chute.MapDataset.source(source).seed(0).shuffle().batch(BATCH).to_iter_dataset()
    if workers:
        ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
    return ds


def wait_for_copies(cache_dir: str, count: int, timeout: float = 60.0) -> int:
    """Waits until the cache holds ``count`` copies (downloads of the last epoch land)."""
    deadline = time.monotonic() + timeout
    while True:
        held = len(os.listdir(os.path.join(cache_dir, "objects")))
        if held >= count or time.monotonic() > deadline:
            return held
        time.sleep(0.05)


class Scraper:
    """``chute.monitoring``'s endpoint, up and scraped every 0.25 s while in use, by a
    client in a process of its own, as a Prometheus server would be."""

    CLIENT = (
        "import sys, time, urllib.request\n"
        "while True:\n"
        "    urllib.request.urlopen(sys.argv[1]).read()\n"
        "    print('scraped', flush=True)\n"
        "    time.sleep(0.25)\n"
    )

    def __enter__(self) -> Scraper:
        from chute import monitoring

        self._server = monitoring.start_http_server(0)
        url = f"http://127.0.0.1:{self._server.port}/metrics"
        self._client = subprocess.Popen(
            [sys.executable, "-c", self.CLIENT, url], stdout=subprocess.PIPE, text=True
        )
        assert self._client.stdout is not None
        # Its first scrape is done before the epochs begin: a Prometheus server runs long
        # before and after, and its start is not the endpoint's cost.
        assert self._client.stdout.readline().strip() == "scraped"
        self.scrapes = 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.kill()
        out, _ = self._client.communicate()
        self.scrapes += out.count("scraped")
        self._server.stop()

    @staticmethod
    def cpu_per_scrape(scrapes: int = 200) -> float:
        """This process's CPU seconds per scrape (the endpoint's thread, the text made),
        over ``scrapes`` back to back from a client in its own process."""
        from chute import monitoring

        with monitoring.start_http_server(0) as server:
            code = (
                "import urllib.request\n"
                f"for _ in range({scrapes}): urllib.request.urlopen({server.url!r}).read()\n"
            )
            start = time.process_time()  # this thread only waits meanwhile
            subprocess.run([sys.executable, "-c", code], check=True)
            return (time.process_time() - start) / scrapes


def download_all(index: str, folder: str) -> float:
    """Seconds to fill an empty cache with every shard and read nothing: the least an
    epoch 1 that ends on local copies can take (its reads share the cores with it)."""
    from chute._remote.shard_cache import ShardCache
    from chute._sources.array_record.index import open_ranged

    cache_dir = tempfile.mkdtemp(dir=folder, prefix="limit-")
    source = chute.ArrayRecordDataSource(index)
    cache = ShardCache(cache_dir)
    start = time.perf_counter()
    for shard in source.shards:
        known = (shard.size, shard.version)
        cache.fetch_later(
            shard.path,
            shard.version,
            shard.size,
            lambda path=shard.path, known=known: open_ranged(path, known),
        )
    wait_for_copies(cache_dir, len(source.shards))
    seconds = time.perf_counter() - start
    shutil.rmtree(cache_dir)
    return seconds


def download_while_reading(index: str, folder: str, read_local: Callable[[], Any]) -> float:
    """Seconds to fill an empty cache and, at the same time, read one epoch of the local
    files: the least epoch 1 can take on this machine, whose cores both jobs share."""
    took: list[float] = []
    filler = threading.Thread(target=lambda: took.append(download_all(index, folder)))
    start = time.perf_counter()
    filler.start()
    epoch(read_local)
    filler.join()
    assert took, "the download failed"
    return time.perf_counter() - start


def chute_rows(
    w: Workload, index: str, files: list[str], expected: int, folder: str
) -> dict[str, Any]:
    rates: dict[str, Any] = {}
    for workers in (0, WORKERS):
        chute_rows_with(w, index, files, expected, folder, workers, rates)
    return rates


def chute_rows_with(
    w: Workload,
    index: str,
    files: list[str],
    expected: int,
    folder: str,
    workers: int,
    rates: dict[str, Any],
) -> None:
    """The rows of chute with ``workers`` worker processes (0: inline)."""
    how = "inline" if workers == 0 else f"{workers} workers"

    def sample(label: str, make: Callable[[], Any], epochs: int = 1) -> float:
        """Seconds for ``epochs`` epochs of ``make()``, each through a fresh iterator."""
        seconds, n, _ = epoch(lambda: itertools.chain.from_iterable(make() for _ in range(epochs)))
        assert n == expected * epochs, f"{label}: {n} records, not {expected * epochs}"
        return seconds

    def report(label: str, samples: list[float], epochs: int = 1) -> float:
        """Records the rate of the median sample of ``label``, and prints the samples."""
        seconds = statistics.median(samples)
        rate = expected * epochs / seconds
        rates[f"{label} ({how})"] = rate
        of = f", median of {', '.join(f'{t:.2f}' for t in samples)}" if len(samples) > 1 else ""
        per = f"{epochs} epochs, " if epochs > 1 else ""
        print(
            f"  {w.name:7} {how:10} {label:34} {rate:>10,.0f} records/s ({per}{seconds:.2f} s{of})"
        )
        return rate

    def paired(
        name: str,
        first: tuple[str, Callable[[], float]],
        second: tuple[str, Callable[[], float]],
        pairs: int,
        epochs: int = 1,
    ) -> None:
        """Samples ``first`` and ``second`` in turns, ``pairs`` times; the ratio ``name``
        is the median of the pairs' ratios (second's rate over first's): each pair runs
        back to back, so the machine's drift between pairs cancels."""
        a: list[float] = []
        b: list[float] = []
        for _ in range(pairs):
            a.append(first[1]())
            b.append(second[1]())
        report(first[0], a, epochs)
        report(second[0], b, epochs)
        ratio = statistics.median(x / y for x, y in zip(a, b))
        rates[f"{name} ({how})"] = ratio
        print(f"  {'':7} {how:10} {name + ', median of pairs':34} {ratio:>10.2f}x")

    def local() -> Any:
        return chute_loader(chute.ArrayRecordDataSource(files), workers)

    if workers == 0:
        seconds = download_all(index, folder)
        rates["download limit"] = expected / seconds
        print(
            f"  {w.name:7} {'':10} {'download limit (fill the cache)':34} "
            f"{expected / seconds:>10,.0f} records/s ({seconds:.2f} s)"
        )
    seconds = download_while_reading(index, folder, local)
    rates[f"epoch 1 limit ({how})"] = expected / seconds
    print(
        f"  {w.name:7} {how:10} {'epoch 1 limit (fill + read local)':34} "
        f"{expected / seconds:>10,.0f} records/s ({seconds:.2f} s)"
    )
    cache_dir = ""

    def cached() -> Any:
        return chute_loader(chute.ArrayRecordDataSource(index, cache_dir=cache_dir), workers)

    def epoch_1() -> float:  # each epoch 1 starts from an empty cache directory
        nonlocal cache_dir
        if cache_dir:
            wait_for_copies(cache_dir, w.shards)  # the last epoch's downloads end first
            shutil.rmtree(cache_dir)
        cache_dir = tempfile.mkdtemp(dir=folder, prefix="cache-")
        return sample("cache epoch 1", cached)

    bucket = ("bucket", lambda: sample("bucket", lambda: chute_loader(
        chute.ArrayRecordDataSource(index), workers)))  # fmt: skip
    paired("read-ahead", bucket, ("cache epoch 1", epoch_1), READ_AHEAD_PAIRS)
    held = wait_for_copies(cache_dir, w.shards)
    print(f"  {'':7} {'':10} (copies after the last epoch 1: {held} of {w.shards})")
    paired(
        "epoch 2 / local",
        ("local", lambda: sample("local", local, EPOCHS_A_SAMPLE)),
        ("cache epoch 2", lambda: sample("cache epoch 2", cached, EPOCHS_A_SAMPLE)),
        LOCAL_PAIRS,
        EPOCHS_A_SAMPLE,
    )
    if workers == 0:
        plain, exported, plain_cpu, exported_cpu = [], [], [], []
        for _ in range(METRICS_SAMPLES):
            cpu = time.process_time()
            plain.append(sample("3 epochs from the cache", cached, 3))
            plain_cpu.append(time.process_time() - cpu)
            with Scraper() as scraper:
                cpu = time.process_time()
                exported.append(sample("3 epochs, metrics exported", cached, 3))
                exported_cpu.append(time.process_time() - cpu)
            assert scraper.scrapes > 0
        plain_rate = report("3 epochs from the cache", plain, 3)
        report("3 epochs, metrics exported", exported, 3)
        plain_cpu_s = statistics.median(plain_cpu)
        rates["3 epochs from the cache, CPU s"] = plain_cpu_s
        rates["3 epochs, metrics exported, CPU s"] = statistics.median(exported_cpu)
        scrape_cpu = Scraper.cpu_per_scrape()
        wall = 3 * expected / plain_rate  # of a sample of 3 epochs
        share = 4 * wall * scrape_cpu / plain_cpu_s
        rates["metrics exported / not, CPU, measured"] = 1 / (1 + share)
        print(
            f"  {'':7} {'':10} (one scrape: {scrape_cpu * 1e3:.2f} ms of this process's CPU; "
            f"4 a second are {100 * share:.2f}% of the CPU of 3 epochs)"
        )
        # Each pair ran back to back: its ratio cancels the machine's drift between pairs.
        rates["metrics exported / not, wall, paired"] = statistics.median(
            p / e for e, p in zip(exported, plain)
        )
        rates["metrics exported / not, CPU, paired"] = statistics.median(
            p / e for p, e in zip(plain_cpu, exported_cpu)
        )
    shutil.rmtree(cache_dir)


# -- peers over S3 ------------------------------------------------------------------------


def write_mds(w: Workload, data: list[bytes], out: str) -> None:
    MDSWriter = runners.import_streaming().MDSWriter

    with MDSWriter(out=out, columns={"record": "bytes"}, size_limit="8mb") as writer:
        for record in data:
            writer.write({"record": record})


def _lit_item(record: bytes) -> dict[str, bytes]:
    return {"record": record}


def write_litdata(data: list[bytes], out: str) -> None:
    import litdata

    litdata.optimize(fn=_lit_item, inputs=data, output_dir=out, chunk_bytes="8MB", num_workers=1)
    # optimize() sets the whole program's start method to spawn; the loaders that follow
    # (chute's, and the peers' DataLoader workers) start theirs as they would without it.
    multiprocessing.set_start_method("fork", force=True)


def upload(s3: Any, folder: str, prefix: str) -> None:
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            s3.upload_file(path, BUCKET, f"{prefix}/{os.path.relpath(path, folder)}")


def streaming_epochs(remote: str, cache: str, workers: int) -> list[tuple[float, int, int]]:
    import torch.utils.data

    StreamingDataset = runners.import_streaming().StreamingDataset

    dataset = StreamingDataset(
        remote=remote, local=cache, shuffle=True, shuffle_seed=0, batch_size=BATCH
    )
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, num_workers=workers, collate_fn=records_of
    )
    return [epoch(lambda: loader) for _ in range(2)]


def records_of(rows: list[dict[str, bytes]]) -> list[bytes]:
    """A peer's batch: the records of its rows."""
    return [r["record"] for r in rows]


def litdata_epochs(remote: str, cache: str, workers: int) -> list[tuple[float, int, int]]:
    import litdata
    from litdata.streaming import downloader

    # LitData's read-ahead reaches S3 through obstore with https only; the local store is
    # http, so its client is allowed http, as it would be for any local S3 server.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True  # type: ignore[index]
    dataset = litdata.StreamingDataset(remote, shuffle=True, seed=0, cache_dir=cache)
    loader = litdata.StreamingDataLoader(
        dataset, batch_size=BATCH, num_workers=workers, collate_fn=records_of
    )
    return [epoch(lambda: loader) for _ in range(2)]


def peer_rows(
    w: Workload, data: list[bytes], index_url: str, s3: Any, folder: str, expected: int
) -> dict[str, Any]:
    """``PEER_ROUNDS`` rounds of chute, Streaming and LitData in turn, two epochs each from
    an empty cache; each ratio is the median of the rounds' ratios."""
    rates: dict[str, Any] = {}
    key = w.name.replace(" ", "")
    mds, lit = os.path.join(folder, f"mds-{key}"), os.path.join(folder, f"lit-{key}")
    write_mds(w, data, mds)
    upload(s3, mds, f"mds/{key}")
    write_litdata(data, lit)
    upload(s3, lit, f"lit/{key}")
    runs: dict[str, list[list[tuple[float, int, int]] | None]] = {}
    for _ in range(PEER_ROUNDS):
        runs.setdefault("chute", []).append(chute_s3_epochs(index_url, folder, w.shards))
        for name in ("Streaming", "LitData"):
            runs.setdefault(name, []).append(peer_epochs(w, name, key, folder))
    for name, rounds in runs.items():
        for e in (1, 2):
            seconds = [r[e - 1][0] for r in rounds if r is not None]
            counts = {r[e - 1][1] for r in rounds if r is not None}
            if not seconds:
                continue
            ok = (
                ""
                if counts == {expected}
                else f"  PROBLEM: {sorted(counts)} records, not {expected}"
            )
            rate = rates[f"{name} S3 epoch {e}"] = expected / statistics.median(seconds)
            print(
                f"  {w.name:7} {WORKERS} workers  {name + ' S3 epoch ' + str(e):34} "
                f"{rate:>10,.0f} records/s "
                f"(median of {', '.join(f'{t:.2f}' for t in seconds)} s){ok}"
            )
            if name != "chute":
                ratios = [
                    theirs[e - 1][0] / ours[e - 1][0]
                    for ours, theirs in zip(runs["chute"], rounds)
                    if ours is not None and theirs is not None and theirs[e - 1][1] == expected
                ]
                rates[f"chute / {name} S3 epoch {e}"] = (
                    statistics.median(ratios) if ratios else None
                )
    return rates


def chute_s3_epochs(index_url: str, folder: str, shards: int) -> list[tuple[float, int, int]]:
    """chute's two epochs over S3 with 2 workers, from an empty cache."""
    cache_dir = tempfile.mkdtemp(dir=folder, prefix="cache-s3-")

    def cached() -> Any:
        return chute_loader(chute.ArrayRecordDataSource(index_url, cache_dir=cache_dir), WORKERS)

    first = epoch(cached)
    wait_for_copies(cache_dir, shards)
    second = epoch(cached)
    shutil.rmtree(cache_dir)
    return [first, second]


def peer_epochs(
    w: Workload, name: str, key: str, folder: str
) -> list[tuple[float, int, int]] | None:
    """A peer's two epochs over S3 with 2 workers, from an empty cache, in a fresh
    interpreter (chute's transport, obstore, started in this one, and LitData's own
    obstore client cannot be used in a child forked after that); None if it failed."""
    remote = f"s3://{BUCKET}/{'mds' if name == 'Streaming' else 'lit'}/{key}"
    cache = tempfile.mkdtemp(dir=folder, prefix=f"{name}-")
    done = subprocess.run(
        [sys.executable, __file__, "--peer", name, remote, cache, str(WORKERS)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    shutil.rmtree(cache, ignore_errors=True)
    last = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    if done.returncode == 0 and last and last[0].startswith("["):
        return [tuple(e) for e in json.loads(last[0])]
    tail = (done.stderr.strip().splitlines() or ["?"])[-1]  # reported, not hidden
    print(f"  {w.name:7} {name}: FAILED (exit {done.returncode}): {tail}")
    return None


def peer_main(name: str, remote: str, cache: str, workers: int) -> int:
    """One peer's two epochs, in this fresh interpreter; prints them as JSON."""
    run = streaming_epochs if name == "Streaming" else litdata_epochs
    print(json.dumps(run(remote, cache, workers)))
    return 0


def moto_cost(moto: str, key: str) -> tuple[float, float]:
    """Milliseconds moto itself (no added latency) takes for a 1 KiB ranged GET of the
    object ``key`` and for a GET of the whole object, medians."""
    client = boto3.client("s3", endpoint_url=moto, region_name="us-east-1")

    def median_ms(trials: int, **ranged: str) -> float:
        times = []
        for _ in range(trials):
            start = time.perf_counter()
            client.get_object(Bucket=BUCKET, Key=key, **ranged)["Body"].read()
            times.append(time.perf_counter() - start)
        return 1e3 * statistics.median(times)

    return median_ms(10, Range="bytes=4096-5119"), median_ms(5)


def main() -> int:
    if sys.argv[1:2] == ["--peer"]:
        return peer_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    args = common.parse_args(__doc__ or "")
    started = time.perf_counter()
    env = common.environment()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as folder, s3_servers() as stores:
        moto, proxy = stores
        os.environ.update(
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1",
            AWS_ENDPOINT_URL=proxy,
            AWS_ENDPOINT_URL_S3=proxy,
            S3_ENDPOINT_URL=proxy,
            AWS_ALLOW_HTTP="true",
        )
        s3 = boto3.client("s3", endpoint_url=proxy, region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        with range_server(folder, LATENCY) as http:
            print(f"stores: http {http}, S3 {proxy}; {LATENCY * 1000:.0f} ms added per request")
            for w in WORKLOADS:
                key = w.name.replace(" ", "")
                data = records(w)
                files = write_array_record(
                    data, os.path.join(folder, key, "train"), num_shards=w.shards
                )
                served = [f"{http}/{key}/{os.path.basename(f)}" for f in files]
                write_index(served, os.path.join(folder, key, "http.chute-index"))
                urls = []
                for f in files:
                    s3.upload_file(f, BUCKET, f"{key}/{os.path.basename(f)}")
                    urls.append(f"s3://{BUCKET}/{key}/{os.path.basename(f)}")
                index_url = write_index(urls, f"s3://{BUCKET}/{key}/train.chute-index")
                size = sum(os.path.getsize(f) for f in files)
                print(
                    f"\n{w.name}: {w.records:,} records, {size / 1e6:,.0f} MB in {w.shards} shards"
                )
                ranged_ms, whole_ms = moto_cost(moto, f"{key}/{os.path.basename(files[0])}")
                print(
                    f"  moto alone: a 1 KiB ranged GET of a shard ({size / w.shards / 1e6:.1f} "
                    f"MB) takes {ranged_ms:.1f} ms, the whole shard {whole_ms:.1f} ms"
                )
                rates = chute_rows(w, f"{http}/{key}/http.chute-index", files, w.records, folder)
                rates["moto ranged GET ms"], rates["moto whole GET ms"] = ranged_ms, whole_ms
                rates.update(peer_rows(w, data, index_url, s3, folder, w.records))
                results[w.name] = rates
    print()
    rows = []
    for name, r in results.items():
        for how in ("inline", f"{WORKERS} workers"):
            rows.append(
                [
                    f"{name} {how}: cache epoch 1 / bucket (read-ahead, median of pairs)",
                    r[f"read-ahead ({how})"],
                    TARGETS["read-ahead"],
                ]
            )
            if how == "inline":
                rows.append(
                    [
                        f"{name}: download limit / bucket (downloads alone)",
                        r["download limit"] / r[f"bucket ({how})"],
                        None,
                    ]
                )
            rows.append(
                [
                    f"{name} {how}: epoch 1 limit / bucket (fill + read local at once)",
                    r[f"epoch 1 limit ({how})"] / r[f"bucket ({how})"],
                    None,
                ]
            )
            rows.append(
                [
                    f"{name} {how}: cache epoch 2 / local (median of pairs)",
                    r[f"epoch 2 / local ({how})"],
                    TARGETS["epoch 2 / local"],
                ]
            )
        rows.append(
            [
                f"{name} inline: metrics exported / not (wall, median of pairs)",
                r.get("metrics exported / not, wall, paired"),
                None,
            ]
        )
        rows.append(
            [
                f"{name} inline: metrics exported / not (CPU of the process, median of pairs)",
                r.get("metrics exported / not, CPU, paired"),
                None,
            ]
        )
        rows.append(
            [
                f"{name} inline: metrics exported / not (CPU, scrapes measured alone)",
                r.get("metrics exported / not, CPU, measured"),
                TARGETS["metrics"],
            ]
        )
        for peer in ("Streaming", "LitData"):
            for e in (1, 2):
                rows.append(
                    [
                        f"{name} S3 epoch {e}: chute / {peer} (median of rounds)",
                        r.get(f"chute / {peer} S3 epoch {e}"),
                        1.0,
                    ]
                )
    common.print_table(
        ["ratio", "value", "target", "result"],
        [
            [
                label,
                f"{v:.2f}x" if v else "-",
                f">= {t:g}x" if t else "",
                ("PASS" if v and v >= t else "SHORT") if t else "",
            ]
            for label, v, t in rows
        ],
        {1, 2},
    )
    common.write_json(
        args.json,
        {
            "benchmark": "cache",
            "environment": env,
            "rates": results,
            "ratios": [{"label": a, "value": v, "target": t} for a, v, t in rows],
            "total_seconds": time.perf_counter() - started,
        },
    )
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
