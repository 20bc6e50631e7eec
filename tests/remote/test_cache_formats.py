"""``cache_dir=`` of the Parquet and TFRecord readers: whole local copies of files in a bucket.

Real parts: moto's S3 behind the fault proxy (``conftest.py``, which counts the requests
by method), pyarrow's Parquet files, chute's TFRecord writer, worker processes sharing
one cache directory.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import MapDataset, MultiprocessingOptions
from chute._sources import tfrecord
from chute._sources.tfrecord import TFRecordIterDataset, write_tfrecord

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from chute.experimental import InterleaveIterDataset, ParquetIterDataset  # noqa: E402
from chute.sources import ParquetDataSource  # noqa: E402

FILES = 3
ROWS = 400  # a file's rows (Parquet, in row groups of 100) or records (TFRecord)
FORMATS = ["parquet_source", "parquet_iter", "tfrecord"]


def write_file(fmt: str, path: Path, seed: int) -> None:
    """One local file of ``ROWS`` rows or records, different for each seed."""
    rng = np.random.default_rng(seed)
    if fmt == "tfrecord":
        write_tfrecord([b"%d-%05d:" % (seed, i) + rng.bytes(i % 300) for i in range(ROWS)], path)
    else:
        x = np.arange(seed * ROWS, (seed + 1) * ROWS)
        text = [f"{seed}-{i}-" + "y" * int(rng.integers(0, 50)) for i in range(ROWS)]
        pq.write_table(pa.table({"x": x, "s": text}), path, row_group_size=100)


def upload(s3: Any, tmp_path: Path, fmt: str, prefix: str = "data") -> tuple[list[str], list[str]]:
    """``FILES`` files written locally and put in the bucket: (urls, local paths)."""
    suffix = "tfrecord" if fmt == "tfrecord" else "parquet"
    (tmp_path / prefix).mkdir()
    urls, paths = [], []
    for k in range(FILES):
        path = tmp_path / prefix / f"part-{k}.{suffix}"
        write_file(fmt, path, seed=k)
        paths.append(str(path))
        urls.append(s3.put(f"{prefix}/{path.name}", path.read_bytes()))
    return urls, paths


def reader(fmt: str, paths: list[str], **options: Any) -> Any:
    if fmt == "parquet_source":
        return ParquetDataSource(paths, **options)
    if fmt == "parquet_iter":
        return ParquetIterDataset(paths, cycle_length=2, **options)
    return TFRecordIterDataset(paths, **options)


def plain(records: Any) -> list[Any]:
    """Records as comparable values: Parquet rows as tuples, TFRecord records as bytes."""
    return [r if isinstance(r, bytes) else (int(r["x"]), r["s"]) for r in records]


def copies(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "objects").iterdir()) if (cache_dir / "objects").exists() else []


def wait_for(what: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def held(copy: Path) -> bool:
    """Whether a reader holds ``copy`` (its shared lock keeps an eviction's exclusive one out)."""
    fd = os.open(copy, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """TFRecord objects read 4 KiB a request (and copies 4 KiB a read), so a file takes many."""
    monkeypatch.setattr(tfrecord, "_REMOTE_CHUNK_BYTES", 4096)
    monkeypatch.setattr(tfrecord, "_CHUNK_BYTES", 4096)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("fmt", FORMATS)
def test_cached_reads_are_the_local_records_and_keep_whole_copies(
    s3: Any, tmp_path: Path, fmt: str
) -> None:
    urls, paths = upload(s3, tmp_path, fmt)
    cache_dir = tmp_path / "cache"
    remote = reader(fmt, urls, cache_dir=cache_dir, cache_limit="10MB")
    expected = plain(reader(fmt, paths))
    assert plain(remote) == expected
    wait_for(lambda: len(copies(cache_dir)) == FILES)
    assert sorted(p.read_bytes() for p in copies(cache_dir)) == sorted(
        Path(p).read_bytes() for p in paths
    )
    assert not list((cache_dir / "partial").iterdir())
    assert f"cache_dir={str(cache_dir)!r}" in repr(remote)
    again = pickle.loads(pickle.dumps(remote))  # as a worker gets it
    s3.proxy.configure()
    assert plain(again) == expected
    assert set(s3.proxy.methods) == {"HEAD"}  # each file's version, then its copy


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_new_reader_reads_the_copies_with_one_head_a_file(
    s3: Any, tmp_path: Path, fmt: str
) -> None:
    urls, paths = upload(s3, tmp_path, fmt)
    cache_dir = tmp_path / "cache"
    list(reader(fmt, urls, cache_dir=cache_dir))
    wait_for(lambda: len(copies(cache_dir)) == FILES)
    s3.proxy.configure()  # counts from 0
    assert plain(reader(fmt, urls, cache_dir=cache_dir)) == plain(reader(fmt, paths))
    # ParquetDataSource opens each file twice: to index it, and to read it.
    opens = 2 * FILES if fmt == "parquet_source" else FILES
    assert s3.proxy.methods == {"HEAD": opens}


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("fmt", ["parquet_iter", "tfrecord"])
def test_an_iterator_moves_onto_a_copy_once_it_is_whole(s3: Any, tmp_path: Path, fmt: str) -> None:
    urls, paths = upload(s3, tmp_path, fmt)
    cache_dir = tmp_path / "cache"

    def in_order(files: list[str], **options: Any) -> Any:  # one file after another
        if fmt == "tfrecord":
            return TFRecordIterDataset(files, **options)
        return ParquetIterDataset(files, cycle_length=1, **options)

    it = iter(in_order(urls, cache_dir=cache_dir))
    got = [next(it)]  # the first file opens from the bucket; its download starts
    wait_for(lambda: len(copies(cache_dir)) == 1)
    s3.proxy.configure()
    got += [next(it) for _ in range(ROWS - 1)]  # the rest of the first file
    assert s3.proxy.requests == 0  # read from the copy
    got += list(it)
    assert plain(got) == plain(in_order(paths))
    it.close()


def test_a_source_reads_its_copies_in_the_next_epoch_without_a_request(
    s3: Any, tmp_path: Path
) -> None:
    urls, paths = upload(s3, tmp_path, "parquet_source")
    cache_dir = tmp_path / "cache"
    source = ParquetDataSource(urls, cache_bytes=0, cache_dir=cache_dir)
    local = ParquetDataSource(paths)
    assert plain(source) == plain(local)
    wait_for(lambda: len(copies(cache_dir)) == FILES)
    s3.proxy.configure()
    idx = np.random.default_rng(0).permutation(len(local))
    assert plain(source.__getitems__(idx)) == plain(local.__getitems__(idx))
    assert s3.proxy.requests == 0  # the open files moved onto their copies


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_copy_is_held_while_read_and_let_go_when_closed(
    s3: Any, tmp_path: Path, fmt: str
) -> None:
    urls, _ = upload(s3, tmp_path, fmt)
    cache_dir = tmp_path / "cache"
    list(reader(fmt, urls[:1], cache_dir=cache_dir))
    wait_for(lambda: len(copies(cache_dir)) == 1)
    (copy,) = copies(cache_dir)
    ds = reader(fmt, urls[:1], cache_dir=cache_dir)
    if fmt == "parquet_source":
        ds[0]
        assert held(copy)
        ds.close()
    else:
        it = iter(ds)
        next(it)
        assert held(copy)
        it.close()
    assert not held(copy)


@pytest.mark.usefixtures("small_chunks")
def test_readers_of_one_copy_do_not_disturb_each_other(s3: Any, tmp_path: Path) -> None:
    urls, paths = upload(s3, tmp_path, "tfrecord")
    cache_dir = tmp_path / "cache"
    list(TFRecordIterDataset(urls[:1], cache_dir=cache_dir))
    wait_for(lambda: len(copies(cache_dir)) == 1)
    first = iter(TFRecordIterDataset(urls[:1], cache_dir=cache_dir))
    got = [next(first)]
    time.sleep(0.01)  # the next reader's open marks the copy used: its mtime moves
    second = iter(TFRecordIterDataset(urls[:1], cache_dir=cache_dir))
    expected = plain(TFRecordIterDataset(paths[:1]))
    assert plain(got + list(first)) == expected  # a copy is not a changed file
    assert plain(second) == expected


def test_worker_processes_share_one_cache(s3: Any, tmp_path: Path) -> None:
    # The store holds the credentials: a fork server started earlier has not this test's
    # environment.
    store = s3.obstore_store()
    options = MultiprocessingOptions(num_workers=2)
    parquet_urls, parquet_paths = upload(s3, tmp_path, "parquet_source")
    cache_dir = tmp_path / "cache"
    source = ParquetDataSource(parquet_urls, filesystem=store, cache_dir=cache_dir)
    local = ParquetDataSource(parquet_paths)
    for epoch in range(2):
        if epoch == 1:  # from the copies: each worker asks each file's version only
            wait_for(lambda: len(copies(cache_dir)) == FILES)
            s3.proxy.configure()
        pipeline = MapDataset.source(source).seed(epoch).shuffle().batch(100).to_iter_dataset()
        expected = MapDataset.source(local).seed(epoch).shuffle().batch(100).to_iter_dataset()
        got = [(b["x"].tolist(), list(b["s"])) for b in pipeline.mp_prefetch(options)]
        assert got == [(b["x"].tolist(), list(b["s"])) for b in expected]
    assert set(s3.proxy.methods) == {"HEAD"}
    for k, fmt in enumerate(("parquet_iter", "tfrecord"), start=2):
        urls, paths = upload(s3, tmp_path, fmt, prefix=fmt)
        expected = sorted(plain(reader(fmt, paths)))
        datasets = [reader(fmt, [url], filesystem=store, cache_dir=cache_dir) for url in urls]
        for epoch in range(2):
            if epoch == 1:
                wait_for(lambda n=k * FILES: len(copies(cache_dir)) == n)
                s3.proxy.configure()
            pipeline = InterleaveIterDataset(datasets, cycle_length=2).mp_prefetch(options)
            assert sorted(plain(pipeline)) == expected
        assert s3.proxy.methods == {"HEAD": FILES}  # one open of each file
    assert not list((cache_dir / "partial").iterdir())


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_replaced_object_is_read_at_its_new_version(s3: Any, tmp_path: Path, fmt: str) -> None:
    urls, paths = upload(s3, tmp_path, fmt)
    cache_dir = tmp_path / "cache"
    list(reader(fmt, urls, cache_dir=cache_dir))
    wait_for(lambda: len(copies(cache_dir)) == FILES)
    replaced = tmp_path / f"replaced{Path(paths[0]).suffix}"
    write_file(fmt, replaced, seed=7)
    s3.put(f"data/{Path(paths[0]).name}", replaced.read_bytes())
    expected = plain(reader(fmt, [str(replaced), *paths[1:]]))
    assert plain(reader(fmt, urls, cache_dir=cache_dir)) == expected
    wait_for(lambda: len(copies(cache_dir)) == FILES + 1)  # the new version's copy
    s3.proxy.configure()
    assert plain(reader(fmt, urls, cache_dir=cache_dir)) == expected  # from the new copy
    assert set(s3.proxy.methods) == {"HEAD"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_cache_options_are_checked(s3: Any, tmp_path: Path, fmt: str) -> None:
    urls, paths = upload(s3, tmp_path, fmt)
    cache_dir = tmp_path / "cache"
    with pytest.raises(ValueError, match="cache_limit needs cache_dir"):
        reader(fmt, urls, cache_limit="1GB")
    with pytest.raises(ValueError, match="cannot read '20 parsecs' as a size"):
        reader(fmt, urls, cache_dir=cache_dir, cache_limit="20 parsecs")
    too_small = "cache_limit of 1,000 bytes is smaller than s3://"
    if fmt == "parquet_source":  # the source opens every file when it is built
        with pytest.raises(ValueError, match=too_small):
            reader(fmt, urls, cache_dir=cache_dir, cache_limit=1000)
    else:  # a dataset opens its files when they are read
        ds = reader(fmt, urls, cache_dir=cache_dir, cache_limit=1000)
        with pytest.raises(ValueError, match=too_small):
            list(ds)
    local = reader(fmt, paths, cache_dir=tmp_path / "unused", cache_limit=1000)
    assert plain(local) == plain(reader(fmt, paths))  # local files are read where they are
    assert not (tmp_path / "unused").exists()


def test_a_parquet_cache_refuses_a_filesystem_pyarrow_reads(tmp_path: Path) -> None:
    from pyarrow import fs as pafs

    path = tmp_path / "rows.parquet"
    write_file("parquet_source", path, seed=0)
    for make in (ParquetDataSource, ParquetIterDataset):
        with pytest.raises(ValueError, match="LocalFileSystem is read by pyarrow itself"):
            make([str(path)], filesystem=pafs.LocalFileSystem(), cache_dir=tmp_path / "cache")
