"""Reading ArrayRecord from an object store: chute from an S3 bucket against local reads.

moto's S3 server and the fault-injecting test proxy (tests/remote/fault_proxy.py) run
in their own processes, the proxy adding 20 ms to every request (started as
``bench_remote_clients.py`` starts them).  Two workloads, each written locally with
``chute.experimental.write_array_record`` (default options), uploaded with boto3 and
indexed into the bucket with ``write_index``:

* ``1 KiB``: 200,000 records of 1 KiB in 64 shards;
* ``64 KiB``: 20,000 records of 64 KiB in 128 shards (a tenth of the count: moto keeps
  every object and copies it whole on every GET).

The pipeline, the same for every chute source::

    MapDataset.source(src).seed(0).shuffle().batch(256).to_iter_dataset()

and the same ending in ``.mp_prefetch(MultiprocessingOptions(num_workers=2))``.  Sources:
``chute bucket`` (``ArrayRecordDataSource("s3://.../train.chute-index")``), ``chute
local`` (the local shards, array_record's C++ reader) and ``chute local index`` (the
local index, chute's own reader).  ``hand loop`` is what a user writes without a
loader: for each record of the shuffled order, one boto3 ``get_object`` with a
``Range`` header for its chunk's bytes (offsets from the index), decoded with
``array_record_format.decode_chunk``.  Grain cannot read ``s3://`` without FUSE; the
benchmark tries ``grain.sources.ArrayRecordDataSource(["s3://..."])`` and prints the error.

Each implementation reads its first batches and compares them with ``chute local``'s
(the same records in the same order) before anything is timed, then times
``--repeats`` consecutive windows of about ``WINDOW_S`` seconds on the same iterator.

Run through ``bash benchmarks/run remote``; see README.md.
"""
# bench-requires: moto[server] boto3 obstore cramjam array_record

from __future__ import annotations

import os
import statistics
import subprocess
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

    import chute
    from chute._sources.array_record_format import decode_chunk
    from chute._sources.array_record_index import index_in_memory, write_index
    from chute.experimental import write_array_record
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


def as_records(batch: Any) -> list[bytes]:
    """A batch's records as ``bytes``, byte for byte.

    A batch of ``bytes`` is a numpy ``S`` array, whose elements read back without their
    trailing zero bytes; its buffer keeps them (all records here have the same length).
    """
    if isinstance(batch, np.ndarray) and batch.dtype.kind == "S":
        size, raw = batch.dtype.itemsize, batch.tobytes()
        return [raw[j * size : (j + 1) * size] for j in range(len(batch))]
    return [bytes(r) for r in batch]


class HandLoop:
    """One ranged GET per record, in the shuffled order, and its chunk decoded."""

    def __init__(self, files: list[str], urls: list[str], endpoint: str) -> None:
        index = index_in_memory(files)  # the chunk offsets, from the local shards' footers
        self.counts = np.array([s.records for s in index.shards])
        self.ends = np.cumsum(self.counts)
        self.starts = [np.asarray(index.footer(k).starts) for k in range(len(files))]
        self.keys = [u.split("/", 3)[3] for u in urls]
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        self.order = chute.MapDataset.range(int(self.ends[-1])).seed(SEED).shuffle()

    def record(self, position: int) -> bytes:
        i = self.order[position]
        k = int(np.searchsorted(self.ends, i, side="right"))
        chunk = i - int(self.ends[k] - self.counts[k])  # group_size:1: one record a chunk
        begin, end = int(self.starts[k][chunk]), int(self.starts[k][chunk + 1])
        reply = self.client.get_object(
            Bucket=BUCKET, Key=self.keys[k], Range=f"bytes={begin}-{end - 1}"
        )
        values, offsets = decode_chunk(reply["Body"].read(), begin, self.keys[k], records=1)
        return bytes(values[offsets[0] : offsets[1]])


# -- measuring ------------------------------------------------------------------------------


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


def mismatch(got: list[list[bytes]], ref: list[list[bytes]]) -> str:
    for b, (x, y) in enumerate(zip(got, ref)):
        for j, (r, s) in enumerate(zip(x, y)):
            if r != s:
                return f"MISMATCH: batch {b}, record {j} differs ({len(r)} vs {len(s)} bytes)"
        if len(x) != len(y):
            return f"MISMATCH: batch {b} holds {len(x)} records, the reference {len(y)}"
    return f"MISMATCH: {len(got)} batches, the reference {len(ref)}"


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


def time_hand_loop(impl: Impl, loop: HandLoop, ref: list[list[bytes]], repeats: int) -> None:
    """The hand loop: its first records checked, then ``repeats`` windows of records."""
    try:
        got = [loop.record(p) for p in range(HAND_CHECK)]
        ok = got == ref[0][:HAND_CHECK]
        impl.check = "ok" if ok else mismatch([got], [ref[0][:HAND_CHECK]])
        at, sizes = HAND_CHECK, []
        for _ in range(repeats):
            start, n = time.perf_counter(), 0
            while time.perf_counter() - start < WINDOW_S:
                loop.record(at + n)
                n += 1
            impl.times.append((time.perf_counter() - start) / n)
            sizes.append(n)
            at += n
        impl.note = f"records per window: {sizes}"
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


def grain_route(url: str) -> str:
    """What Grain 0.2.18's ArrayRecordDataSource does with an ``s3://`` URL."""
    code = (
        "import logging; logging.disable(logging.CRITICAL)\n"
        "import grain\n"
        f"src = grain.sources.ArrayRecordDataSource([{url!r}])\n"
        "print('read', len(src[0]), 'bytes')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if done.returncode == 0:
        return f"Grain read {url}: {done.stdout.strip()}"
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return f"Grain: no route without FUSE ({lines[-1] if lines else f'exit {done.returncode}'})"


# -- one workload ---------------------------------------------------------------------------


def bench(w: Workload, data: dict[str, Any], proxy: str, repeats: int) -> dict[str, Any]:
    print(f"\n[{w.name}]" + (f" ({w.note})" if w.note else ""))
    files, index_url = data["files"], data["index_url"]
    epoch = w.records // BATCH  # full batches
    with chute.ArrayRecordDataSource(files) as src:
        it = iter(pipeline(src, 0))
        ref = [as_records(next(it)) for _ in range(CHECK_BATCHES)]
        common.close(it)
    opened = {}
    for how, url in (("index", index_url), ("glob", data["glob"])):
        open_s, first_s, batch = open_and_first_batch(url)
        opened[how] = {"open_s": open_s, "first_batch_s": first_s, "check": batch == ref[0]}
        print(
            f"  chute bucket via {how}: open {open_s * 1e3:,.0f} ms, first batch "
            f"{first_s * 1e3:,.0f} ms (open included), first batch "
            f"{'equal' if batch == ref[0] else 'DIFFERENT'}"
        )
    sources: dict[str, Callable[[], Any]] = {
        "chute bucket": lambda: chute.ArrayRecordDataSource(index_url),
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
    hand = impls["hand loop"] = Impl("hand loop", lambda: iter(()), 1)
    time_hand_loop(hand, HandLoop(files, data["urls"], proxy), ref, repeats)
    print(f"  hand loop: {common.fmt_num(hand.rate())} records/s, check {hand.check}")
    grain = grain_route(data["urls"][0])
    print(f"  {grain}")
    local_target = 0.5 if w.record_bytes >= 64 * 1024 else None
    ratios = []
    for suffix in ("", ", 2 workers"):
        bucket = impls[f"chute bucket{suffix}"]
        ratios += [
            Ratio(f"{w.name}: chute bucket{suffix} / hand loop", bucket, hand, 20.0),
            Ratio(
                f"{w.name}: chute bucket{suffix} / chute local{suffix}",
                bucket,
                impls[f"chute local{suffix}"],
                local_target,
            ),
            Ratio(
                f"{w.name}: chute bucket{suffix} / chute local index{suffix}",
                bucket,
                impls[f"chute local index{suffix}"],
                None,
            ),
        ]
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


def print_rates(results: list[dict[str, Any]]) -> None:
    print()
    rows = []
    for res in results:
        size = int(res["description"].split(" of ")[1].split(" bytes")[0].replace(",", ""))
        for impl in res["impls"]:
            rate = impl.rate()
            rows.append(
                [
                    res["name"],
                    impl.name,
                    "ERROR" if impl.error else common.fmt_num(rate),
                    common.fmt_num(rate * size / 1e6 if rate else None, 1),
                    impl.note.split(": ")[-1],
                    f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
                    impl.check.split(":")[0],
                ]
            )
        route = "no route without FUSE" if "no route" in res["grain"] else "read it"
        rows.append([res["name"], "grain", "-", "-", "-", "-", route])
    common.print_table(
        ["workload", "impl", "records/s", "MB/s", "windows", "spread", "check"],
        rows,
        {2, 3, 5},
    )


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    env = common.environment()
    env.update({m: common.version_of(m) for m in ("array_record", "moto", "obstore", "boto3")})
    print(
        f"remote benchmarks: chute {env['chute']}, moto {env['moto']} S3 behind a proxy adding "
        f"{LATENCY * 1e3:.0f} ms a request | {env['python']}, {env['cpus']} cpus"
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
    with s3_servers() as (moto, proxy), tempfile.TemporaryDirectory(prefix="chute-remote-") as d:
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
            res = bench(w, data, proxy, args.repeats)
            res["seconds"] = time.perf_counter() - t0
            results.append(res)
            for f in data["files"]:
                os.remove(f)
    print_rates(results)
    return common.finish("remote", args, env, started, results)


if __name__ == "__main__":
    sys.exit(main())
