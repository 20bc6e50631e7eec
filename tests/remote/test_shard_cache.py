"""The shard cache: whole local copies of shards in a bucket, shared, bounded and never stale.

Real parts: moto's S3 behind the fault proxy (``conftest.py``), array_record files,
worker processes that share one cache directory.
"""

from __future__ import annotations

import fcntl
import logging
import multiprocessing
import os
import resource
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import ArrayRecordDataSource, MapDataset, MultiprocessingOptions
from chute._core import metrics
from chute._core.errors import SourceChangedError
from chute._remote.ranged_source import LocalRanges
from chute._remote.shard_cache import CONFIRMED_FOR_S, ShardCache, parse_bytes
from chute._sources.array_record.cached import CachedShardReader
from chute._sources.array_record.index import write_index
from chute._sources.array_record.indexed import LOOK_FOR_COPIES_S
from chute._sources.array_record.writer import write_array_record

pytest.importorskip("array_record")

SHARDS = 4


def upload(s3: Any, tmp_path: Path, prefix: str = "data", seed: int = 0) -> tuple[str, list[str]]:
    """``SHARDS`` shards of 400 records each (about 100 KiB a shard) and their index."""
    rng = np.random.default_rng(seed)
    data = [b"%s-%05d:" % (prefix.encode(), i) + rng.bytes(200) for i in range(400 * SHARDS)]
    files = write_array_record(data, str(tmp_path / prefix / "train"), num_shards=SHARDS)
    urls = [s3.put(f"{prefix}/{Path(f).name}", Path(f).read_bytes()) for f in files]
    return write_index(urls, s3.url(f"{prefix}/train.chute-index")), files


def copies(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "objects").iterdir())


def wait_for(what: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def read_all(source: Any, seed: int = 0) -> list[bytes]:
    batches = MapDataset.source(source).seed(seed).shuffle().batch(100)
    return [record for batch in batches for record in batch]


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def test_a_cached_set_reads_the_records_and_keeps_whole_copies(store: Any, tmp_path: Path) -> None:
    index, files = upload(store, tmp_path)
    cache_dir = tmp_path / "cache"
    remote = ArrayRecordDataSource(index, cache_dir=cache_dir, cache_limit="10MB")
    local = ArrayRecordDataSource(files)
    assert read_all(remote) == read_all(local)
    wait_for(lambda: len(copies(cache_dir)) == SHARDS)
    assert sorted(p.read_bytes() for p in copies(cache_dir)) == sorted(
        Path(f).read_bytes() for f in files
    )
    assert not list((cache_dir / "partial").iterdir())
    time.sleep(LOOK_FOR_COPIES_S)  # the source looks for copies this often
    assert read_all(remote, seed=1) == read_all(local, seed=1)  # now from the copies
    readers = remote._open._readers.values()
    assert len(readers) == SHARDS and all(isinstance(r, CachedShardReader) for r in readers)
    assert "cache_dir=" in repr(remote)


def test_a_new_source_reads_the_copies_with_one_request_a_shard(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    read_all(ArrayRecordDataSource(index, cache_dir=cache_dir))
    wait_for(lambda: len(copies(cache_dir)) == SHARDS)
    for mark in (cache_dir / "confirmed").iterdir():  # the versions were seen long ago
        os.utime(mark, (time.time() - CONFIRMED_FOR_S - 1,) * 2)
    s3.proxy.configure()  # counts from 0
    before = metrics.snapshot()
    again = ArrayRecordDataSource(index, cache_dir=cache_dir)
    assert read_all(again) == read_all(ArrayRecordDataSource(files))
    # the index's header and each shard's version check; no record is fetched
    assert SHARDS <= s3.proxy.requests <= SHARDS + 3
    after = metrics.snapshot()  # every read (a batch's records in one shard) is a hit
    assert after["cache_hits"] - before["cache_hits"] >= SHARDS
    assert after["cache_misses"] == before["cache_misses"]
    assert metrics.snapshot()["cache_bytes_read"] >= sum(len(r) for r in read_all(again))
    # Seen lately by a process of the host, the versions need no request at all.
    s3.proxy.configure()
    assert read_all(ArrayRecordDataSource(index, cache_dir=cache_dir)) == read_all(
        ArrayRecordDataSource(files)
    )
    assert s3.proxy.requests <= 3  # the index's header only


def test_worker_processes_share_one_cache(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    # The store holds the credentials: a fork server started earlier has not this test's
    # environment.
    store = s3.obstore_store()
    source = ArrayRecordDataSource(index, filesystem=store, cache_dir=cache_dir, cache_limit="10MB")
    options = MultiprocessingOptions(num_workers=2)
    for epoch in range(2):
        pipeline = MapDataset.source(source).seed(epoch).shuffle().batch(100).to_iter_dataset()
        expected = MapDataset.source(ArrayRecordDataSource(files)).seed(epoch).shuffle().batch(100)
        got = [list(b) for b in pipeline.mp_prefetch(options)]
        assert got == [list(b) for b in expected.to_iter_dataset()]
    wait_for(lambda: len(copies(cache_dir)) == SHARDS)
    assert not list((cache_dir / "partial").iterdir())


def _started_here(cache_dir: Path, source: Any) -> set[str]:
    """The shards whose downloads this process was asked for in ``cache_dir``."""
    from chute._remote import shard_cache

    asked = shard_cache._downloads()._asked
    return {
        s.path
        for s in source.shards
        if (str(cache_dir), shard_cache._name(s.path, s.version)) in asked
    }


@pytest.mark.parametrize("loader", ["mp_prefetch", "DataLoader"])
def test_the_training_process_starts_the_downloads_before_its_workers(
    s3: Any, tmp_path: Path, loader: str
) -> None:
    from chute import DataLoader, IndexSampler

    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    source = ArrayRecordDataSource(index, filesystem=s3.obstore_store(), cache_dir=cache_dir)
    if loader == "mp_prefetch":
        pipeline = MapDataset.source(source).seed(3).shuffle().to_iter_dataset()
        it = iter(pipeline.mp_prefetch(MultiprocessingOptions(num_workers=2)))
        expected = list(MapDataset.source(ArrayRecordDataSource(files)).seed(3).shuffle())
    else:
        sampler = IndexSampler(len(source), shuffle=True, seed=3, num_epochs=1)
        it = iter(DataLoader(data_source=source, sampler=sampler, worker_count=2))
        plain = DataLoader(data_source=ArrayRecordDataSource(files), sampler=sampler)
        expected = list(plain)
    with it:
        assert _started_here(cache_dir, source) == {s.path for s in source.shards}
        assert list(it) == expected
    wait_for(lambda: len(copies(cache_dir)) == SHARDS)


def test_a_set_larger_than_the_cache_is_left_to_the_workers_reads(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    largest = max(Path(f).stat().st_size for f in files)
    source = ArrayRecordDataSource(
        index, filesystem=s3.obstore_store(), cache_dir=cache_dir, cache_limit=2 * largest
    )
    pipeline = MapDataset.source(source).to_iter_dataset()
    with iter(pipeline.mp_prefetch(MultiprocessingOptions(num_workers=2))) as it:
        assert _started_here(cache_dir, source) == set()  # in index order, it would churn
        assert list(it) == list(ArrayRecordDataSource(files))


def test_a_sliced_pipeline_is_left_to_the_workers_reads(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    source = ArrayRecordDataSource(index, filesystem=s3.obstore_store(), cache_dir=cache_dir)
    pipeline = MapDataset.source(source)[:400].to_iter_dataset()  # this host's share: 1 shard
    with iter(pipeline.mp_prefetch(MultiprocessingOptions(num_workers=2))) as it:
        assert _started_here(cache_dir, source) == set()
        assert list(it) == list(ArrayRecordDataSource(files))[:400]


def _read_in_a_process(index: str, cache_dir: str, out: Any) -> None:
    source = ArrayRecordDataSource(index, cache_dir=cache_dir)
    records = read_all(source)
    wait_for(lambda: len(os.listdir(os.path.join(cache_dir, "objects"))) == SHARDS)
    out.put((records, metrics.snapshot()["cache_bytes_downloaded"]))


def test_concurrent_processes_download_each_shard_once(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    s3.proxy.configure(latency=0.02)  # the downloads overlap
    cache_dir = str(tmp_path / "cache")
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    processes = [context.Process(target=_with_env, args=(env, index, cache_dir, out))
                 for _ in range(3)]  # fmt: skip
    for p in processes:
        p.start()
    results = [out.get(timeout=120) for _ in processes]
    for p in processes:
        p.join(30)
        assert p.exitcode == 0
    expected = read_all(ArrayRecordDataSource(files))
    assert all(records == expected for records, _ in results)
    total = sum(Path(f).stat().st_size for f in files)
    assert sum(downloaded for _, downloaded in results) == total  # each byte fetched once
    assert len(copies(Path(cache_dir))) == SHARDS


def _with_env(env: dict[str, str], *args: Any) -> None:
    os.environ.update(env)
    _read_in_a_process(*args)


def _start_a_download(index: str, cache_dir: str) -> None:
    source = ArrayRecordDataSource(index, cache_dir=cache_dir)
    source[0]
    time.sleep(60)  # killed meanwhile


def test_a_process_killed_mid_download_leaves_nothing_trusted(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    s3.proxy.configure(latency=0.5)  # a download takes a while
    context = multiprocessing.get_context("spawn")
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    child = context.Process(target=_with_env_start, args=(env, index, str(cache_dir)))
    child.start()
    wait_for(lambda: (cache_dir / "partial").exists() and any((cache_dir / "partial").iterdir()))
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    assert not copies(cache_dir)  # the half-written file is not a copy
    assert list((cache_dir / "partial").iterdir())
    s3.proxy.configure()
    source = ArrayRecordDataSource(index, cache_dir=cache_dir)
    assert read_all(source) == read_all(ArrayRecordDataSource(files))
    wait_for(lambda: len(copies(cache_dir)) == SHARDS)
    assert not list((cache_dir / "partial").iterdir())  # the dead process's file went
    assert sorted(p.read_bytes() for p in copies(cache_dir)) == sorted(
        Path(f).read_bytes() for f in files
    )


def _with_env_start(env: dict[str, str], *args: Any) -> None:
    os.environ.update(env)
    _start_a_download(*args)


def test_a_replaced_shard_is_never_read_from_its_old_copy(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    cache_dir = tmp_path / "cache"
    read_all(ArrayRecordDataSource(index, cache_dir=cache_dir))
    wait_for(lambda: len(copies(cache_dir)) == SHARDS)
    # The bucket's first shard is replaced by another set's: the index is stale now.
    _, others = upload(s3, tmp_path, prefix="other", seed=5)
    first = s3.url(f"data/{Path(files[0]).name}")
    s3.put(f"data/{Path(files[0]).name}", Path(others[0]).read_bytes())
    # Within CONFIRMED_FOR_S of the download, the host trusts the version it saw; after it,
    # a process asks the bucket again.
    for mark in (cache_dir / "confirmed").iterdir():
        os.utime(mark, (time.time() - CONFIRMED_FOR_S - 1,) * 2)
    with pytest.raises(SourceChangedError, match="changed since"):
        read_all(ArrayRecordDataSource(index, cache_dir=cache_dir))
    # Opened by its URLs, the set is the bucket's new version, never the old copy.
    urls = [first] + [s3.url(f"data/{Path(f).name}") for f in files[1:]]
    fresh = ArrayRecordDataSource(urls, cache_dir=cache_dir)
    expected = ArrayRecordDataSource([others[0], *files[1:]])
    assert read_all(fresh) == read_all(expected)
    wait_for(lambda: len(copies(cache_dir)) == SHARDS + 1)
    assert read_all(fresh, seed=2) == read_all(expected, seed=2)  # from the new copy


def test_the_limit_is_never_exceeded_and_copies_not_in_use_are_evicted(
    s3: Any, tmp_path: Path
) -> None:
    index, files = upload(s3, tmp_path)
    other_index, other_files = upload(s3, tmp_path, prefix="other", seed=3)
    shard = max(Path(f).stat().st_size for f in files + other_files)
    limit = int(2.5 * shard)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    held: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            total = 0
            # Under the directory's lock, as every reservation and eviction is: a sample
            # then never counts an evicted copy beside the download that took its room.
            lock = os.open(cache_dir / ".lock", os.O_RDWR | os.O_CREAT)
            fcntl.flock(lock, fcntl.LOCK_EX)
            for folder in ("objects", "partial"):
                for entry in (
                    os.scandir(cache_dir / folder) if (cache_dir / folder).exists() else ()
                ):
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:
                        pass
            os.close(lock)
            held.append(total)
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    evicted = metrics.snapshot()["cache_evictions"]
    try:
        for idx, local in ((index, files), (other_index, other_files), (index, files)):
            source = ArrayRecordDataSource(idx, cache_dir=cache_dir, cache_limit=limit)
            for seed in range(3):
                assert read_all(source, seed) == read_all(ArrayRecordDataSource(local), seed)
                time.sleep(0.2)  # the downloads land
            source.close()  # its copies are no longer in use
    finally:
        stop.set()
        sampler.join()
    assert len(held) > 100 and max(held) <= limit
    assert max(held) >= 2 * shard  # it did cache
    assert metrics.snapshot()["cache_evictions"] > evicted


def test_a_limit_smaller_than_a_shard_is_refused(s3: Any, tmp_path: Path) -> None:
    index, _ = upload(s3, tmp_path)
    with pytest.raises(ValueError, match="cache_limit of 1,000 bytes is smaller than s3://"):
        ArrayRecordDataSource(index, cache_dir=tmp_path / "cache", cache_limit=1000)
    with pytest.raises(ValueError, match="cache_limit needs cache_dir"):
        ArrayRecordDataSource(index, cache_limit="1GB")
    with pytest.raises(ValueError, match="cannot read '20 parsecs' as a size"):
        ArrayRecordDataSource(index, cache_dir=tmp_path / "cache", cache_limit="20 parsecs")


def _read_with_a_file_size_limit(env: dict[str, str], index: str, cache_dir: str, out: Any) -> None:
    os.environ.update(env)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("chute").addHandler(handler)
    source = ArrayRecordDataSource(index, cache_dir=cache_dir)
    first = read_all(source)
    time.sleep(1.0)  # the downloads tried
    second = read_all(source, seed=1)
    out.put((first, second, said, os.listdir(os.path.join(cache_dir, "partial"))))


def test_a_full_disk_degrades_to_bucket_reads_with_one_warning(s3: Any, tmp_path: Path) -> None:
    index, files = upload(s3, tmp_path)
    cache_dir = str(tmp_path / "cache")
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    child = context.Process(target=_read_with_a_file_size_limit, args=(env, index, cache_dir, out))
    child.start()
    first, second, said, partial = out.get(timeout=120)
    child.join(30)
    local = ArrayRecordDataSource(files)
    assert first == read_all(local) and second == read_all(local, seed=1)
    warnings = [m for m in said if "could not allocate" in m]
    assert len(warnings) == 1, said
    assert not partial and not copies(Path(cache_dir))


def test_shard_cache_by_itself(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    (tmp_path / "object").write_bytes(data)
    cache = ShardCache(tmp_path / "cache", "7MB")
    assert cache.open_copy("s3://b/k", "v1") is None
    cache.fetch_later("s3://b/k", "v1", len(data), lambda: LocalRanges(str(tmp_path / "object")))
    wait_for(lambda: cache.has("s3://b/k", "v1"))
    copy = cache.open_copy("s3://b/k", "v1")
    assert copy is not None and Path(copy.path).read_bytes() == data
    assert not cache.has("s3://b/k", "v2")  # another version is another copy
    # Held, the copy survives a download that needs its room; let go, it is evicted.
    for i in (2, 3):
        cache.fetch_later(
            f"s3://b/k{i}", "v1", len(data), lambda: LocalRanges(str(tmp_path / "object"))
        )
        time.sleep(0.5)
    assert cache.has("s3://b/k", "v1") and cache.held_bytes() <= cache.limit
    copy.close()
    cache.fetch_later("s3://b/k4", "v1", len(data), lambda: LocalRanges(str(tmp_path / "object")))
    wait_for(lambda: cache.has("s3://b/k4", "v1"))
    assert not cache.has("s3://b/k", "v1") and cache.held_bytes() <= cache.limit
    assert parse_bytes("1.5 GiB", "x") == 3 << 29
    with pytest.raises(ValueError, match="more than 0"):
        parse_bytes(0, "cache_limit")


def test_a_disk_full_before_the_first_download_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import errno

    from chute._remote import shard_cache

    def full(*args: Any) -> Any:  # the progress record is the first file a download makes
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    (tmp_path / "object").write_bytes(b"x" * 1000)
    cache = ShardCache(tmp_path / "cache")
    monkeypatch.setattr(shard_cache, "Progress", full)
    monkeypatch.setattr(shard_cache, "_said", set())
    opener = lambda: LocalRanges(str(tmp_path / "object"))  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="chute"):
        for url in ("s3://b/k1", "s3://b/k2"):
            assert not cache._download(url, "v1", 1000, opener, shard_cache._Bytes(1 << 20))
    said = [r.getMessage() for r in caplog.records if r.name == "chute"]
    assert len(said) == 1 and "is full (No space left on device)" in said[0], said
    assert "read from the bucket" in said[0]
    assert not os.listdir(tmp_path / "cache" / "partial")
    assert not os.listdir(tmp_path / "cache" / "landed")


def test_a_cache_dir_this_user_cannot_write_is_refused_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._remote import shard_cache

    ShardCache(tmp_path / "cache")  # made by another user, say
    objects = str(tmp_path / "cache" / "objects")
    real_access = os.access
    monkeypatch.setattr(  # as for root, where every access is allowed
        shard_cache.os, "access", lambda p, mode: p != objects and real_access(p, mode)
    )
    with pytest.raises(PermissionError, match="cannot be written by this user") as info:
        ShardCache(tmp_path / "cache")
    assert str(tmp_path / "cache") in str(info.value) and "cache_dir of your own" in str(info.value)


def test_another_user_s_copy_in_a_shared_cache_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._remote import shard_cache

    data = b"y" * 5000
    (tmp_path / "object").write_bytes(data)
    cache = ShardCache(tmp_path / "cache")
    opener = lambda: LocalRanges(str(tmp_path / "object"))  # noqa: E731
    assert cache._download("s3://b/k", "v1", len(data), opener, shard_cache._Bytes(1 << 20))

    def not_owner(*args: Any) -> None:  # utime of a file another user owns
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(shard_cache.os, "utime", not_owner)
    copy = cache.open_copy("s3://b/k", "v1")
    assert copy is not None and Path(copy.path).read_bytes() == data
    copy.close()


def test_a_process_s_downloads_share_a_budget_of_bytes_in_flight() -> None:
    from chute._remote import shard_cache

    budget, entered = shard_cache._Bytes(100), threading.Event()

    def second() -> None:
        with budget.taking(60):
            entered.set()

    with budget.taking(60):
        thread = threading.Thread(target=second)
        thread.start()
        assert not entered.wait(0.2)  # 120 bytes would exceed the budget: it waits
    assert entered.wait(10)
    thread.join()
    with budget.taking(10_000):  # more than the whole budget: takes all of it
        pass
