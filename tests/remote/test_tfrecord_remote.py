"""TFRecord files in a bucket read as the local files do, through chute's transport."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import chute
from chute._sources import tfrecord
from chute._sources.tfrecord import TFRecordIterDataset, read_tfrecord, write_tfrecord

RECORDS = [os.urandom(i % 700) + b"%05d" % i for i in range(300)]


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remote reads of 4 KiB, so a file takes many ranged GETs and records straddle them."""
    monkeypatch.setattr(tfrecord, "_REMOTE_CHUNK_BYTES", 4096)


def upload(store: Any, tmp_path: Path, parts: int = 3) -> tuple[list[str], list[str]]:
    """``parts`` TFRecord files written locally and put in the bucket: (urls, paths)."""
    urls, paths = [], []
    step = len(RECORDS) // parts
    for k in range(parts):
        path = str(tmp_path / f"part-{k}.tfrecord")
        write_tfrecord(RECORDS[k * step : (k + 1) * step], path)
        paths.append(path)
        urls.append(store.put(f"tf/part-{k}.tfrecord", Path(path).read_bytes()))
    return urls, paths


@pytest.mark.usefixtures("small_chunks")
def test_bucket_files_yield_the_local_records(store: Any, tmp_path: Path) -> None:
    urls, paths = upload(store, tmp_path)
    assert list(TFRecordIterDataset(urls)) == list(TFRecordIterDataset(paths)) == RECORDS
    assert list(read_tfrecord(urls[1])) == list(read_tfrecord(paths[1]))


def test_a_local_checkpoint_restores_on_the_bucket_copy(store: Any, tmp_path: Path) -> None:
    urls, paths = upload(store, tmp_path)
    local = iter(TFRecordIterDataset(paths))
    taken = 0
    for step in [*range(0, len(RECORDS), 37), len(RECORDS)]:
        for _ in range(step - taken):
            next(local)
        taken = step
        state = local.get_state()
        remote = iter(TFRecordIterDataset(urls))
        remote.set_state(state)
        assert remote.get_state() == state
        assert list(remote) == RECORDS[step:]


@pytest.mark.usefixtures("small_chunks")
def test_faults_are_retried_and_no_record_is_lost_or_repeated(s3: Any, tmp_path: Path) -> None:
    (url,), (path,) = upload(s3, tmp_path, parts=1)
    s3.proxy.configure(fault_rate=0.2, faults=(503, "reset"), seed=5, methods=("GET", "HEAD"))
    it = iter(TFRecordIterDataset(url))
    got = [next(it)]
    source = it._reader._source  # type: ignore[attr-defined]
    got += list(it)
    assert got == list(read_tfrecord(path))
    assert s3.proxy.injected > 0
    assert source.retries == s3.proxy.injected


def test_a_missing_object_raises_at_once_naming_its_url(store: Any) -> None:
    url = store.url("tf/missing.tfrecord")
    store.proxy.configure()
    with pytest.raises(FileNotFoundError, match=url):
        iter(TFRecordIterDataset(url))
    with pytest.raises(FileNotFoundError, match=url):
        next(read_tfrecord(url))


def test_a_missing_object_is_not_retried(s3: Any) -> None:
    s3.proxy.configure()
    with pytest.raises(FileNotFoundError, match=s3.url("tf/missing.tfrecord")):
        iter(TFRecordIterDataset(s3.url("tf/missing.tfrecord")))
    assert s3.proxy.requests == 1  # one HEAD, answered 404


@pytest.mark.usefixtures("small_chunks")
def test_an_object_replaced_while_read_raises_source_changed(store: Any, tmp_path: Path) -> None:
    urls, _ = upload(store, tmp_path, parts=2)
    it = iter(TFRecordIterDataset(urls))
    next(it)
    store.put("tf/part-0.tfrecord", Path(tmp_path / "part-1.tfrecord").read_bytes())
    with pytest.raises(chute.SourceChangedError, match=urls[0]) as info:
        list(it)
    assert info.value.chute_source_file == urls[0]  # type: ignore[attr-defined]


def test_an_explicit_obstore_store_reads_the_bucket(s3: Any, tmp_path: Path) -> None:
    urls, paths = upload(s3, tmp_path, parts=2)
    store = s3.obstore_store()
    keys = [u.split("/", 3)[3] for u in urls]
    assert list(TFRecordIterDataset(keys, filesystem=store)) == list(TFRecordIterDataset(paths))
    assert list(TFRecordIterDataset(urls, filesystem=store)) == list(TFRecordIterDataset(paths))


def test_an_explicit_fsspec_filesystem_reads_the_bucket(gcs: Any, tmp_path: Path) -> None:
    from gcsfs.core import GCSFileSystem

    urls, paths = upload(gcs, tmp_path, parts=2)
    fs = GCSFileSystem(token="anon", endpoint_url=gcs.proxy.url, skip_instance_cache=True)
    ds = TFRecordIterDataset([u.removeprefix("gs://") for u in urls], filesystem=fs)
    assert list(ds) == list(TFRecordIterDataset(paths))
    assert "filesystem=<GCSFileSystem>" in repr(ds)


def test_an_http_url_reads_a_public_object(s3: Any, tmp_path: Path) -> None:
    _, (path,) = upload(s3, tmp_path, parts=1)
    data = Path(path).read_bytes()
    s3._client.put_object(Bucket=s3.bucket, Key="pub/a.tfrecord", Body=data, ACL="public-read")
    url = f"{s3.proxy.url}/{s3.bucket}/pub/a.tfrecord"
    assert list(TFRecordIterDataset(url)) == RECORDS
