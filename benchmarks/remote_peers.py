"""What ``bench_remote.py`` sets beside chute: the loop a user writes by hand, the limit
of the store itself, the http store's process, and Grain's route to a bucket.

Both read the same records in the same shuffled order as chute's pipeline, from the byte
ranges the shards' footers give (``group_size:1``: one chunk a record):

* ``HandLoop``: one ranged GET per record, one after another, each chunk decoded with
  ``array_record.format.decode_chunk``: boto3 against the S3 server, ``http.client``
  (one kept-alive connection) against the HTTP range server.
* ``GetLimit``: a batch's ranged GETs issued through obstore's async API (64 or 256 at
  once, whichever is faster), bytes received and dropped, nothing decoded: about what the
  store and the loopback serve on this machine, the ceiling of a client that needs one
  request a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import chute
import common
from chute._sources.array_record.format import decode_chunk
from chute._sources.array_record.index import index_in_memory


def as_records(batch: Any) -> list[bytes]:
    """A batch's records as ``bytes``, byte for byte.

    A batch of ``bytes`` is a numpy ``S`` array, whose elements read back without their
    trailing zero bytes; its buffer keeps them (all records here have the same length).
    """
    if isinstance(batch, np.ndarray) and batch.dtype.kind == "S":
        size, raw = batch.dtype.itemsize, batch.tobytes()
        return [raw[j * size : (j + 1) * size] for j in range(len(batch))]
    return [bytes(r) for r in batch]


# -- measuring ------------------------------------------------------------------------------


def mismatch(got: list[list[bytes]], ref: list[list[bytes]]) -> str:
    for b, (x, y) in enumerate(zip(got, ref)):
        for j, (r, s) in enumerate(zip(x, y)):
            if r != s:
                return f"MISMATCH: batch {b}, record {j} differs ({len(r)} vs {len(s)} bytes)"
        if len(x) != len(y):
            return f"MISMATCH: batch {b} holds {len(x)} records, the reference {len(y)}"
    return f"MISMATCH: {len(got)} batches, the reference {len(ref)}"


IN_FLIGHT = (64, 256)  # the GET limit tries both: moto serves 64 at once best, a fast store all


class Ranges:
    """Where each record of the shuffled order lies: its shard and its chunk's bytes."""

    def __init__(self, files: list[str], seed: int) -> None:
        index = index_in_memory(files)  # the chunk offsets, from the local shards' footers
        self.counts = np.array([s.records for s in index.shards])
        self.ends = np.cumsum(self.counts)
        self.starts = [np.asarray(index.footer(k).starts) for k in range(len(files))]
        self.order = chute.MapDataset.range(int(self.ends[-1])).seed(seed).shuffle()

    def __call__(self, position: int) -> tuple[int, int, int]:
        """``(shard, begin, end)`` of the record at ``position`` of the shuffled order."""
        i = self.order[position]
        k = int(np.searchsorted(self.ends, i, side="right"))
        chunk = i - int(self.ends[k] - self.counts[k])  # group_size:1: one record a chunk
        return k, int(self.starts[k][chunk]), int(self.starts[k][chunk + 1])


def _record(raw: bytes, begin: int, name: str) -> bytes:
    values, offsets = decode_chunk(raw, begin, name, records=1)
    return bytes(values[offsets[0] : offsets[1]])


class HandLoop:
    """One ranged GET per record, in the shuffled order, and its chunk decoded.

    ``keys`` are the shards' object keys; ``s3`` a boto3 client (with ``bucket``), or
    ``None`` to GET ``base_url/key`` over one kept-alive ``http.client`` connection.
    """

    def __init__(
        self, ranges: Ranges, keys: list[str], *, s3: Any = None, bucket: str = "",
        base_url: str = "",
    ) -> None:  # fmt: skip
        self.ranges, self.keys, self.s3, self.bucket = ranges, keys, s3, bucket
        if s3 is None:
            parsed = urllib.parse.urlsplit(base_url)
            self.prefix = parsed.path.rstrip("/")
            self.http = http.client.HTTPConnection(parsed.netloc)

    def record(self, position: int) -> bytes:
        k, begin, end = self.ranges(position)
        if self.s3 is not None:
            reply = self.s3.get_object(
                Bucket=self.bucket, Key=self.keys[k], Range=f"bytes={begin}-{end - 1}"
            )
            raw = reply["Body"].read()
        else:
            self.http.request(
                "GET",
                f"{self.prefix}/{self.keys[k]}",
                headers={"Range": f"bytes={begin}-{end - 1}"},
            )
            raw = self.http.getresponse().read()
        return _record(raw, begin, self.keys[k])


class GetLimit:
    """A batch's ranged GETs through obstore; bytes dropped, nothing decoded.

    ``store`` is an obstore store and ``keys`` the shards' paths in it.  ``pick()`` times
    one batch with each of ``IN_FLIGHT`` requests at once and keeps the faster: moto's
    server serves 64 at once faster than 256, a store that keeps up the other way round.
    """

    def __init__(self, ranges: Ranges, keys: list[str], store: Any, batch: int) -> None:
        import obstore

        self.obstore, self.ranges, self.keys, self.store = obstore, ranges, keys, store
        self.batch = batch
        self.in_flight = IN_FLIGHT[0]
        self.loop = asyncio.new_event_loop()

    def pick(self, first_batch: int) -> int:
        """Times batches ``first_batch``, ``first_batch + 1``, ... with each number of
        requests in flight; keeps the fastest and returns the next batch to read."""
        seconds = {}
        for b, n in enumerate(IN_FLIGHT, start=first_batch):
            self.in_flight = n
            start = time.perf_counter()
            self.batch_at(b)
            seconds[n] = time.perf_counter() - start
        self.in_flight = min(seconds, key=seconds.__getitem__)
        return first_batch + len(IN_FLIGHT)

    async def _get(self, position: int) -> bytes:
        k, begin, end = self.ranges(position)
        got = await self.obstore.get_range_async(
            self.store, self.keys[k], start=begin, length=end - begin
        )
        return bytes(got)

    def batch_at(self, b: int) -> list[bytes]:
        """The raw chunks of batch ``b`` of the shuffled order."""
        start = b * self.batch
        positions = range(start, start + self.batch)

        async def all_at_once() -> list[bytes]:
            gate = asyncio.Semaphore(self.in_flight)

            async def one(p: int) -> bytes:
                async with gate:
                    return await self._get(p)

            return list(await asyncio.gather(*(one(p) for p in positions)))

        return self.loop.run_until_complete(all_at_once())

    def records(self, b: int) -> list[bytes]:
        """Batch ``b``'s records, decoded (for the check before timing)."""
        raws = self.batch_at(b)
        at = b * self.batch
        return [
            _record(raw, self.ranges(at + j)[1], self.keys[self.ranges(at + j)[0]])
            for j, raw in enumerate(raws)
        ]

    def close(self) -> None:
        self.loop.close()


def timed_windows(
    step: Any, repeats: int, window_s: float, start_at: int
) -> tuple[list[float], list[int]]:
    """Seconds per call of ``step(i)`` (``i`` counting from ``start_at``) in ``repeats``
    windows of at least ``window_s`` each, and the calls each window made."""
    at, times, sizes = start_at, [], []
    for _ in range(repeats):
        start, n = time.perf_counter(), 0
        while n == 0 or time.perf_counter() - start < window_s:
            step(at + n)
            n += 1
        times.append((time.perf_counter() - start) / n)
        sizes.append(n)
        at += n
    return times, sizes


@contextlib.contextmanager
def range_server(root: str, latency: float) -> Iterator[str]:
    """``range_server.py`` serving ``root`` with ``latency`` seconds added, in its own process."""
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("range_server.py")), root, str(latency)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        server.kill()
        server.wait()


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
