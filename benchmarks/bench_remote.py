"""Reading ArrayRecord from an object store: chute from a bucket against local reads,
the loop a user writes by hand, and the limit of the store itself.

Two stores, each adding 20 ms to every request, in processes of their own:

* ``S3``: moto's S3 server behind the fault-injecting test proxy
  (tests/remote/fault_proxy.py), started as ``bench_remote_clients.py`` starts them.
  moto answers a few hundred requests a second here, whatever the client.
* ``http``: ``range_server.py``, a minimal asyncio server of ranged GETs over the local
  shards: a store that keeps up (real object stores serve thousands of GETs a second).

Two workloads, each written locally with ``chute.experimental.write_array_record``
(default options: one chunk a record), uploaded to S3 with boto3 and indexed there with
``write_index``; the http store serves the local files, indexed by their URLs:

* ``1 KiB``: 200,000 records of 1 KiB in 64 shards;
* ``64 KiB``: 20,000 records of 64 KiB in 128 shards (a tenth of the count: moto keeps
  every object and copies it whole on every GET).

The pipeline, the same for every chute source::

    MapDataset.source(src).seed(0).shuffle().batch(256).to_iter_dataset()

and the same ending in ``.mp_prefetch(MultiprocessingOptions(num_workers=2))``.  Sources:
``chute S3`` (``ArrayRecordDataSource("s3://.../train.chute-index")``), ``chute http``
(``ArrayRecordDataSource("http://127.0.0.1:PORT/.../http.chute-index")``, an index of the
shards' http URLs), ``chute
local`` (the local shards, array_record's C++ reader) and ``chute local index`` (the local
index, chute's own reader).  Beside them (``remote_loops.py``): ``hand loop`` (one ranged
GET per record in the shuffled order, its chunk decoded; boto3 for S3, ``http.client``
for http) and ``GET limit`` (a batch's ranged GETs, 64 or 256 at once through obstore, nothing
decoded: the ceiling of any reader that needs a request a record).  Grain cannot read
``s3://`` without FUSE; the benchmark tries ``grain.sources.ArrayRecordDataSource(["s3://..."])``
and prints the error.

Each implementation's first records are compared with ``chute local``'s (the same
records in the same order) before anything is timed, then ``--repeats`` consecutive
windows of about ``WINDOW_S`` seconds are timed on the same iterator.

Run through ``bash benchmarks/run remote``; see README.md.
"""
# bench-requires: moto[server] boto3 obstore cramjam array_record

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import common
from bench_remote_clients import LATENCY, s3_servers
from common import Impl, Ratio

try:
    import boto3
    from obstore.store import HTTPStore, S3Store

    import chute
    from chute._sources.array_record.index import write_index
    from chute.experimental import write_array_record
    from remote_peers import (
        GetLimit,
        HandLoop,
        Ranges,
        as_records,
        grain_route,
        mismatch,
        print_rates,
        range_server,
        timed_windows,
    )
except ImportError as exc:
    sys.exit(f"bench_remote: {exc}; run it through bash benchmarks/run remote")

BATCH = 256
SEED = 0
CHECK_BATCHES = 2
WINDOW_S = 2.0  # a timed window lasts at least this long; --repeats windows an implementation
MIN_BATCHES = 2  # and holds at least this many batches
HAND_CHECK = 32  # records the hand loop checks before it is timed
BUCKET = "bench"


@dataclass
class Workload:
    name: str
    record_bytes: int
    records: int
    shards: int
    note: str = ""


WORKLOADS = (
    Workload("1 KiB", 1024, 200_000, 64),
    Workload("64 KiB", 64 * 1024, 20_000, 128, "a tenth of 200,000: moto holds every object"),
)


# -- the data ------------------------------------------------------------------------------


def records(w: Workload) -> Iterator[bytes]:
    rng = np.random.default_rng(SEED)
    for _ in range(w.records):
        yield rng.bytes(w.record_bytes)


def prepare(w: Workload, folder: str, s3: Any) -> dict[str, Any]:
    """Writes the shards and their index locally, uploads the shards, indexes them in S3."""
    key = w.name.replace(" ", "")
    t0 = time.perf_counter()
    files = write_array_record(records(w), os.path.join(folder, key, "train"), num_shards=w.shards)
    local_index = write_index(files, os.path.join(folder, key, "train.chute-index"))
    t1 = time.perf_counter()
    urls = []
    for f in files:
        name = f"{key}/{os.path.basename(f)}"
        s3.upload_file(f, BUCKET, name)
        urls.append(f"s3://{BUCKET}/{name}")
    t2 = time.perf_counter()
    index_url = write_index(urls, f"s3://{BUCKET}/{key}/train.chute-index")
    t3 = time.perf_counter()
    size = sum(os.path.getsize(f) for f in files)
    print(
        f"wrote {w.records:,} records ({size / 1e6:,.0f} MB, {w.shards} shards) in "
        f"{t1 - t0:.1f} s, uploaded in {t2 - t1:.1f} s, indexed in the bucket in {t3 - t2:.1f} s"
    )
    return {
        "key": key,
        "files": files,
        "local_index": local_index,
        "urls": urls,
        "index_url": index_url,
        "glob": f"s3://{BUCKET}/{key}/train-*.array_record",
    }


# -- the implementations --------------------------------------------------------------------


def pipeline(src: Any, workers: int) -> Any:
    ds = chute.MapDataset.source(src).seed(SEED).shuffle().batch(BATCH).to_iter_dataset()
    if workers:
        ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
    return ds


def measure(
    impl: Impl, it: Iterator[Any], ref: list[list[bytes]], epoch: int, repeats: int
) -> None:
    """Checks the first batches against ``ref``, then times ``repeats`` windows of batches.

    After one more batch of warm-up, a window reads batches until ``WINDOW_S`` have
    passed and at least ``MIN_BATCHES`` were read, or until its share of what the epoch
    (``epoch`` full batches) has left runs out.  ``impl.times`` holds each window's
    seconds per batch.
    """
    got = [as_records(next(it)) for _ in range(CHECK_BATCHES)]
    impl.check = "ok" if got == ref else mismatch(got, ref)
    next(it)
    left, sizes = epoch - CHECK_BATCHES - 1, []
    for r in range(repeats):
        cap, n = left // (repeats - r), 0
        start = time.perf_counter()
        while n < cap and (n < MIN_BATCHES or time.perf_counter() - start < WINDOW_S):
            next(it)
            n += 1
        impl.times.append((time.perf_counter() - start) / n)
        sizes.append(n)
        left -= n
    impl.note = f"batches per window: {sizes}"


def run_impl(
    impl: Impl, make: Callable[[], Any], workers: int, ref: Any, epoch: int, repeats: int
) -> None:
    """Opens the source ``make()``, runs the pipeline on it and measures it."""
    try:
        with common.time_limit(common.RUN_TIMEOUT_S):
            common.wait_quiet()
            src = make()
            it = iter(pipeline(src, workers))
            try:
                measure(impl, it, ref, epoch, repeats)
            finally:
                common.close(it)
                src.close()
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        common.fail(impl, "run")


def time_loop(
    impl: Impl, records: Any, step: Any, ref: list[list[bytes]], repeats: int, start: Any = None
) -> None:
    """A loop outside chute: ``records()`` checked against ``ref``, then ``step(i)`` timed
    from ``i = start()`` (1 without ``start``)."""
    try:
        got = records()
        impl.check = "ok" if got == ref[0][: len(got)] else mismatch([got], [ref[0][: len(got)]])
        impl.times, sizes = timed_windows(step, repeats, WINDOW_S, start() if start else 1)
        impl.note = f"calls per window: {sizes}"
    except Exception:
        common.fail(impl, "run")


def open_and_first_batch(url: str, trials: int = 1) -> tuple[float, float, list[bytes]]:
    """Median seconds to open ``url`` and to its first batch (open included), and that batch."""
    opens, firsts, batch = [], [], []
    for _ in range(trials):
        common.wait_quiet()
        start = time.perf_counter()
        src = chute.ArrayRecordDataSource(url)
        opened = time.perf_counter()
        it = iter(pipeline(src, 0))
        batch = as_records(next(it))
        firsts.append(time.perf_counter() - start)
        opens.append(opened - start)
        common.close(it)
        src.close()
    return statistics.median(opens), statistics.median(firsts), batch


# -- one workload ---------------------------------------------------------------------------


def bench(
    w: Workload, data: dict[str, Any], stores: dict[str, str], repeats: int
) -> dict[str, Any]:
    print(f"\n[{w.name}]" + (f" ({w.note})" if w.note else ""))
    files, key = data["files"], data["key"]
    epoch = w.records // BATCH  # full batches
    with chute.ArrayRecordDataSource(files) as src:
        it = iter(pipeline(src, 0))
        ref = [as_records(next(it)) for _ in range(CHECK_BATCHES)]
        common.close(it)
    # Indexed over http, as a user indexes a set on a web server: the index names each
    # shard's URL with its ETag; the http store serves the index file it is written to.
    served = [f"{stores['http']}/{key}/{os.path.basename(f)}" for f in files]
    write_index(served, os.path.join(os.path.dirname(data["local_index"]), "http.chute-index"))
    http_index = f"{stores['http']}/{key}/http.chute-index"
    opened = {}
    for how, url in (("S3 index", data["index_url"]), ("S3 glob", data["glob"]),
                     ("http index", http_index)):  # fmt: skip
        open_s, first_s, batch = open_and_first_batch(url)
        opened[how] = {"open_s": open_s, "first_batch_s": first_s, "check": batch == ref[0]}
        print(
            f"  chute via {how}: open {open_s * 1e3:,.0f} ms, first batch {first_s * 1e3:,.0f} "
            f"ms (open included), first batch {'equal' if batch == ref[0] else 'DIFFERENT'}"
        )
    sources: dict[str, Callable[[], Any]] = {
        "chute S3": lambda: chute.ArrayRecordDataSource(data["index_url"]),
        "chute http": lambda: chute.ArrayRecordDataSource(http_index),
        "chute local": lambda: chute.ArrayRecordDataSource(files),
        "chute local index": lambda: chute.ArrayRecordDataSource(data["local_index"]),
    }
    impls: dict[str, Impl] = {}
    for workers in (0, 2):
        for name, make in sources.items():
            label = f"{name}, {workers} workers" if workers else name
            impl = impls[label] = Impl(label, lambda: iter(()), BATCH)
            run_impl(impl, make, workers, ref, epoch, repeats)
            print(f"  {label}: {common.fmt_num(impl.rate())} records/s, check {impl.check}")
    ranges = Ranges(files, SEED)
    s3_keys = [u.split("/", 3)[3] for u in data["urls"]]
    http_keys = [f"{key}/{os.path.basename(f)}" for f in files]
    s3 = boto3.client("s3", endpoint_url=stores["S3"], region_name="us-east-1")
    loops = {
        "hand loop S3": HandLoop(ranges, s3_keys, s3=s3, bucket=BUCKET),
        "hand loop http": HandLoop(ranges, http_keys, base_url=stores["http"]),
    }
    for name, loop in loops.items():
        impl = impls[name] = Impl(name, lambda: iter(()), 1)
        records = lambda loop=loop: [loop.record(p) for p in range(HAND_CHECK)]  # noqa: E731
        time_loop(impl, records, loop.record, ref, repeats)
        print(f"  {name}: {common.fmt_num(impl.rate())} records/s, check {impl.check}")
    limits = {
        "GET limit S3": GetLimit(ranges, s3_keys, S3Store(BUCKET, endpoint=stores["S3"],
                                 region="us-east-1", client_options={"allow_http": True}), BATCH),
        "GET limit http": GetLimit(ranges, http_keys, HTTPStore.from_url(
            stores["http"], client_options={"allow_http": True}), BATCH),
    }  # fmt: skip
    for name, limit in limits.items():
        impl = impls[name] = Impl(name, lambda: iter(()), BATCH)
        common.wait_quiet()
        time_loop(impl, lambda limit=limit: limit.records(0), limit.batch_at, ref, repeats,
                  start=lambda limit=limit: limit.pick(1))  # fmt: skip
        impl.note = f"{limit.in_flight} in flight, {impl.note}"
        limit.close()
        print(f"  {name}: {common.fmt_num(impl.rate())} records/s ({limit.in_flight} in flight), "
              f"check {impl.check}")  # fmt: skip
    grain = grain_route(data["urls"][0])
    print(f"  {grain}")
    ratios = [r for store in ("S3", "http") for r in store_ratios(w, store, impls)]
    common.mark_invalid(ratios)
    return {
        "name": w.name,
        "description": f"{w.records:,} records of {w.record_bytes:,} bytes, {w.shards} shards",
        "unit": "records",
        "impls": list(impls.values()),
        "ratios": ratios,
        "bucket_open": opened,
        "grain": grain,
        "note": w.note,
    }


def store_ratios(w: Workload, store: str, impls: dict[str, Impl]) -> list[Ratio]:
    """The ratios of chute reading from ``store`` to the peers and limits beside it."""
    hand, limit = impls[f"hand loop {store}"], impls[f"GET limit {store}"]
    local_target = 0.5 if w.record_bytes >= 64 * 1024 else None
    out = [Ratio(f"{w.name}: GET limit {store} / hand loop {store}", limit, hand, None)]
    for suffix in ("", ", 2 workers"):
        ours, local = impls[f"chute {store}{suffix}"], impls[f"chute local{suffix}"]
        out += [
            Ratio(f"{w.name}: chute {store}{suffix} / hand loop {store}", ours, hand, 20.0),
            Ratio(f"{w.name}: chute {store}{suffix} / GET limit {store}", ours, limit, None),
            Ratio(f"{w.name}: chute {store}{suffix} / chute local{suffix}", ours, local,
                  local_target),
        ]  # fmt: skip
    out.append(
        Ratio(f"{w.name}: GET limit {store} / chute local", limit, impls["chute local"], None)
    )
    return out


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    env = common.environment()
    env.update({m: common.version_of(m) for m in ("array_record", "moto", "obstore", "boto3")})
    print(
        f"remote benchmarks: chute {env['chute']}, moto {env['moto']} S3 behind a proxy adding "
        f"{LATENCY * 1e3:.0f} ms a request | {env['python']}, {env['cpus']} cpus"
    )
    print(
        f"http: range_server.py (asyncio ranged GETs over the local shards) adding "
        f"{LATENCY * 1e3:.0f} ms a request, a store that keeps up"
    )
    print(
        "workers start from chute's fork server (CHUTE_WORKER_START=forkserver): forked "
        "from a process whose obstore runtime has run, they hang"
    )
    print(
        f"timing: the first {CHECK_BATCHES} batches checked against chute local, then "
        f"{args.repeats} windows of ~{WINDOW_S} s on the same iterator (median); "
        "open and first batch: one trial"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    results = []
    with (
        s3_servers() as (moto, proxy),
        tempfile.TemporaryDirectory(prefix="chute-remote-") as d,
        range_server(d, LATENCY) as http,
    ):
        os.environ.update(
            # obstore's runtime does not survive a fork: workers forked from this process,
            # which has read the bucket, would hang on their first request.
            CHUTE_WORKER_START="forkserver",
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_ENDPOINT_URL=proxy,
            AWS_REGION="us-east-1",
        )
        s3 = boto3.client("s3", endpoint_url=moto, region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        for w in WORKLOADS:
            t0 = time.perf_counter()
            data = prepare(w, d, s3)
            res = bench(w, data, {"S3": proxy, "http": http}, args.repeats)
            res["seconds"] = time.perf_counter() - t0
            results.append(res)
            for f in data["files"]:
                os.remove(f)  # moto holds its own copy; the http store is done with them
    print_rates(results)
    return common.finish("remote", args, env, started, results)


if __name__ == "__main__":
    sys.exit(main())
