"""Reads that take what a download has landed (``chute._remote.landing``).

The record and the partial file are driven by hand here (``Progress``, a thread that
holds the download's lock), and end to end with moto's S3: a download in another
process, held before its copy is made whole, serves a whole epoch with no request.
"""

from __future__ import annotations

import asyncio
import fcntl
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import ArrayRecordDataSource, MapDataset
from chute._core import metrics
from chute._remote import landing
from chute._remote.landing import LandingSource, LandingView, Progress
from chute._remote.shard_cache import ShardCache

pytest.importorskip("array_record")

DATA = bytes(np.random.default_rng(0).integers(0, 256, 100_000, dtype=np.uint8))


class Bucket:
    """A stand-in for an object's bucket source that counts the ranges asked of it."""

    url, version, retries = "s3://b/o", "v1", 0

    def __init__(self, data: bytes = DATA) -> None:
        self.data, self.asked = data, list[tuple[int, int]]()

    def size(self) -> int:
        return len(self.data)

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        self.asked += ranges
        return [self.data[o : o + n] for o, n in ranges]

    async def read_ranges_async(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        await asyncio.sleep(0)
        return self.read_ranges(ranges)

    def close(self) -> None:
        pass

    def __str__(self) -> str:
        return self.url


class Download:
    """A download driven by hand: the partial file, its lock and its record."""

    def __init__(self, tmp_path: Path) -> None:
        self.partial, self.record = str(tmp_path / "partial"), str(tmp_path / "landed")
        self.fd = os.open(self.partial, os.O_RDWR | os.O_CREAT)
        fcntl.flock(self.fd, fcntl.LOCK_EX)  # as the downloading process holds it
        self.progress = Progress(self.record, self.fd)
        os.ftruncate(self.fd, len(DATA))

    def land(self, end: int, next_end: int | None = None) -> None:
        os.pwrite(self.fd, DATA[:end], 0)
        self.progress.say(end, end if next_end is None else next_end)

    def die(self) -> None:
        os.close(self.fd)  # the lock goes with it

    def source(self, bucket: Bucket | None = None) -> LandingSource:
        return LandingSource(bucket or Bucket(), LandingView(self.partial, self.record))


RANGES = [(0, 1000), (30_000, 500), (70_000, 20_000), (99_000, 1000)]


def expected(ranges: list[tuple[int, int]]) -> list[bytes]:
    return [DATA[o : o + n] for o, n in ranges]


def test_without_a_download_every_range_comes_from_the_bucket(tmp_path: Path) -> None:
    bucket = Bucket()
    source = LandingSource(bucket, LandingView(str(tmp_path / "p"), str(tmp_path / "r")))
    assert source.read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES
    assert (source.url, source.version, source.size(), str(source)) == (
        "s3://b/o", "v1", len(DATA), "s3://b/o"
    )  # fmt: skip


def test_landed_ranges_come_from_the_partial_file_and_the_rest_from_the_bucket(
    tmp_path: Path,
) -> None:
    download, bucket = Download(tmp_path), Bucket()
    download.land(50_000)
    bytes_read = metrics.snapshot()["cache_bytes_read"]
    source = download.source(bucket)
    assert source.read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES[2:]
    assert metrics.snapshot()["cache_bytes_read"] - bytes_read == 1500
    download.land(len(DATA))
    bucket.asked.clear()
    assert source.read_ranges(RANGES) == expected(RANGES)
    assert source.read_all() == DATA
    assert bucket.asked == []


def test_a_range_in_the_group_in_flight_waits_for_it_instead_of_a_request(
    tmp_path: Path,
) -> None:
    download, bucket = Download(tmp_path), Bucket()
    download.land(10_000, next_end=90_000)  # [10,000, 90,000) on its way
    source = download.source(bucket)
    landed = threading.Timer(0.2, download.land, (90_000,))
    landed.start()
    assert source.read_ranges(RANGES) == expected(RANGES)
    landed.join()
    assert bucket.asked == [RANGES[3]]  # beyond the group: not worth waiting for


def test_the_async_read_waits_on_the_loop_while_the_bucket_serves_the_rest(
    tmp_path: Path,
) -> None:
    download, bucket = Download(tmp_path), Bucket()
    download.land(10_000, next_end=len(DATA))
    source = download.source(bucket)

    async def read() -> list[bytes]:
        async def land_later() -> None:
            await asyncio.sleep(0.1)
            download.land(len(DATA))

        got, _ = await asyncio.gather(source.read_ranges_async(RANGES), land_later())
        return got

    assert asyncio.run(read()) == expected(RANGES)
    assert bucket.asked == []


def test_a_dead_download_is_not_waited_for_and_its_landed_bytes_stay_good(
    tmp_path: Path,
) -> None:
    download, bucket = Download(tmp_path), Bucket()
    download.land(50_000, next_end=len(DATA))
    view = LandingView(download.partial, download.record)
    view.take([(0, 1)])
    assert view.coming(RANGES, [2, 3]) == [2, 3]  # alive: worth waiting for
    download.die()
    assert view.coming(RANGES, [2, 3]) == []
    source = LandingSource(bucket, view)
    assert source.read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES[2:]


def test_a_download_taken_over_meanwhile_is_not_trusted(tmp_path: Path) -> None:
    download, bucket = Download(tmp_path), Bucket()
    download.land(len(DATA))
    source = download.source(bucket)
    assert source.read_ranges(RANGES[:1]) == expected(RANGES[:1])
    assert bucket.asked == []
    download.die()
    # Another process claims the dead download's file: a new attempt, then the truncation.
    fd = os.open(download.partial, os.O_RDWR)
    Progress(download.record, fd)
    os.ftruncate(fd, 0)
    os.ftruncate(fd, len(DATA))  # zeros, where the old bytes were
    assert source.read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES


def test_a_record_changed_between_its_two_reads_discards_what_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    download = Download(tmp_path)
    download.land(len(DATA))
    view = LandingView(download.partial, download.record)
    looks = iter([(1, len(DATA), len(DATA)), (2, 0, 0)])  # taken over during the read
    view._open()
    monkeypatch.setattr(view, "_record", lambda: next(looks))
    assert view.take(RANGES) == [None] * len(RANGES)


def test_a_torn_or_foreign_record_is_not_trusted(tmp_path: Path) -> None:
    download, bucket = Download(tmp_path), Bucket()
    download.land(len(DATA))
    with open(download.record, "r+b") as f:  # one byte of "landed" changed
        f.seek(16)
        byte = f.read(1)
        f.seek(16)
        f.write(bytes([byte[0] ^ 1]))
    assert download.source(bucket).read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES
    (tmp_path / "x").mkdir()
    other = Download(tmp_path / "x")
    other.land(len(DATA))
    os.replace(other.record, download.record)  # names the other partial file's inode
    bucket.asked.clear()
    assert download.source(bucket).read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES


def test_waiting_gives_up_after_wait_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(landing, "WAIT_S", 0.05)
    download, bucket = Download(tmp_path), Bucket()
    download.land(0, next_end=len(DATA))  # alive, but the group never lands
    assert download.source(bucket).read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES


@pytest.mark.parametrize("way", ["sync", "async"])
def test_a_download_that_dies_while_waited_for_leaves_its_ranges_to_the_bucket(
    tmp_path: Path, way: str
) -> None:
    download, bucket = Download(tmp_path), Bucket()
    download.land(1000, next_end=len(DATA))  # alive, fetching the rest
    source = download.source(bucket)
    threading.Timer(0.1, download.die).start()  # and dead before the rest lands
    if way == "sync":
        got = source.read_ranges(RANGES)
    else:
        got = asyncio.run(source.read_ranges_async(RANGES))
    assert got == expected(RANGES)
    assert bucket.asked == RANGES[1:]  # the first range had landed


def test_a_download_this_process_runs_next_is_waited_for_before_its_record_exists(
    tmp_path: Path,
) -> None:
    partial, record = str(tmp_path / "partial"), str(tmp_path / "landed")
    bucket = Bucket()
    source = LandingSource(bucket, LandingView(partial, record, queued=lambda: True))

    def download_later() -> None:
        time.sleep(0.1)  # the read plans before the download has begun
        Download(tmp_path).land(len(DATA))

    thread = threading.Thread(target=download_later)
    thread.start()
    try:
        assert source.read_ranges(RANGES) == expected(RANGES)
    finally:
        thread.join()
    assert bucket.asked == []  # every range waited for the download


def test_a_download_not_coming_soon_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partial, record = str(tmp_path / "partial"), str(tmp_path / "landed")
    bucket = Bucket()
    later = LandingSource(bucket, LandingView(partial, record, queued=lambda: False))
    assert later.read_ranges(RANGES) == expected(RANGES)
    assert bucket.asked == RANGES
    monkeypatch.setattr(landing, "WAIT_S", 0.05)
    never, waited = Bucket(), LandingView(partial, record, queued=lambda: True)
    assert LandingSource(never, waited).read_ranges(RANGES) == expected(RANGES)  # gave up
    assert never.asked == RANGES


def test_a_process_s_downloads_know_which_run_now_or_next(monkeypatch: pytest.MonkeyPatch) -> None:
    from chute._remote import shard_cache

    monkeypatch.setattr(shard_cache, "DOWNLOADS", 1)
    release, began = threading.Event(), threading.Semaphore(0)

    class Cache:
        directory = "/nowhere"
        _closing = threading.Event()  # never closed

        def _download(self, *args: Any) -> bool:
            began.release()
            release.wait(30)
            return True

    downloads = shard_cache._Downloads()
    keys = [("/nowhere", shard_cache._name(f"s3://b/{n}", "v")) for n in "abc"]
    for n in "abc":
        downloads.submit(Cache(), f"s3://b/{n}", "v", 1, lambda: None)  # type: ignore[arg-type]
    assert began.acquire(timeout=10)  # a runs; b is next; c waits for b
    assert [downloads.soon(k) for k in keys] == [True, True, False]
    release.set()
    for _ in range(2):
        assert began.acquire(timeout=10)
    deadline = time.monotonic() + 10
    while any(downloads.soon(k) for k in keys) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(downloads.soon(k) for k in keys)  # all done: none is waited for


def test_a_streamed_download_cut_off_goes_on_from_where_it_stopped(s3: Any) -> None:
    from chute._remote.open import open_source

    data = bytes(np.random.default_rng(1).integers(0, 256, 4 << 20, dtype=np.uint8))
    url = s3.put("big", data)
    source = open_source(url)
    assert source.streams
    got = bytearray(len(data))
    writes: list[tuple[int, int]] = []

    def write(offset: int, chunk: Any) -> None:
        writes.append((offset, len(chunk)))
        got[offset : offset + len(chunk)] = chunk

    s3.proxy.configure(fault_rate=1.0, faults=("cut",), max_in_a_row=1)  # each range: cut once
    source.stream_into(0, len(data), write)
    assert bytes(got) == data
    assert s3.proxy.injected >= 1 and source.retries >= 1
    offsets = [o for o, _ in writes]
    assert offsets == sorted(set(offsets))  # no byte written twice: it went on, not over
    assert all(o + n == nxt for (o, n), nxt in zip(writes, offsets[1:]))


def test_streamed_downloads_make_whole_copies_of_empty_and_multi_chunk_objects(
    s3: Any, tmp_path: Path
) -> None:
    from test_shard_cache import wait_for

    from chute._remote.open import open_source

    cache = ShardCache(tmp_path / "cache")
    objects = {"empty": b"", "big": bytes(np.random.default_rng(2).bytes(3 << 20))}
    for key, data in objects.items():
        url = s3.put(key, data)
        version = open_source(url).version
        cache.fetch_later(url, version, len(data), lambda url=url: open_source(url))
        wait_for(lambda url=url, version=version: cache.has(url, version))
        copy = cache.open_copy(url, version)
        assert copy is not None and Path(copy.path).read_bytes() == data
        copy.close()
    assert not list((tmp_path / "cache" / "landed").iterdir())


# -- end to end: a download in another process ----------------------------------------------


SHARDS = 4


def _download_and_hold(env: dict[str, str], index: str, cache_dir: str) -> None:
    """Downloads every shard and then stops before making the copies whole."""
    os.environ.update(env)
    os.fdatasync = lambda fd: time.sleep(600)  # the copy is never made whole
    source = ArrayRecordDataSource(index, cache_dir=cache_dir)
    for start in range(0, len(source), len(source) // SHARDS):
        source[start]
    time.sleep(600)  # killed meanwhile


def _all_landed(cache_dir: Path) -> bool:
    partial = list((cache_dir / "partial").glob("*"))
    if len(partial) != SHARDS:
        return False
    for path in partial:
        view = LandingView(str(path), str(cache_dir / "landed" / path.name))
        if not view._open():
            return False
        record = view._record()
        view.close()
        if record is None or record[1] != path.stat().st_size:
            return False
    return True


def test_an_epoch_reads_another_process_s_download_with_no_request(s3: Any, tmp_path: Path) -> None:
    from test_shard_cache import upload, wait_for

    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    child = multiprocessing.get_context("spawn").Process(
        target=_download_and_hold, args=(env, index, str(cache_dir))
    )
    child.start()
    try:
        wait_for(lambda: _all_landed(cache_dir))
        source = ArrayRecordDataSource(index, cache_dir=cache_dir)
        local = ArrayRecordDataSource(files)
        starts = range(0, len(source), len(source) // SHARDS)
        assert [source[i] for i in starts] == [local[i] for i in starts]  # the index is read
        s3.proxy.configure()  # counts from 0
        epoch = MapDataset.source(source).seed(1).shuffle().batch(64)
        assert [r for b in epoch for r in b] == [
            r for b in MapDataset.source(local).seed(1).shuffle().batch(64) for r in b
        ]
        assert s3.proxy.requests == 0  # every record came from the landed bytes
        assert not list((cache_dir / "objects").iterdir())
        os.kill(child.pid, signal.SIGKILL)  # its landed bytes stay good
        child.join(10)
        assert [source[i] for i in range(0, len(source), 37)] == [
            local[i] for i in range(0, len(local), 37)
        ]
        assert s3.proxy.requests == 0
    finally:
        if child.is_alive():
            child.kill()
        child.join(10)


def test_a_download_s_record_goes_with_it(s3: Any, tmp_path: Path) -> None:
    from test_shard_cache import read_all, upload, wait_for

    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    source = ArrayRecordDataSource(index, cache_dir=cache_dir)
    assert read_all(source) == read_all(ArrayRecordDataSource(files))
    wait_for(lambda: len(list((cache_dir / "objects").iterdir())) == SHARDS)
    wait_for(lambda: not list((cache_dir / "landed").iterdir()))
    plain = Bucket()
    assert ShardCache(cache_dir).landing("s3://b/o", None, plain) is plain  # no version known
