"""Parquet files in a bucket read as the local files do, through chute's transport."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute
from chute import MapDataset

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from chute.experimental import ParquetIterDataset  # noqa: E402
from chute.sources import ParquetDataSource  # noqa: E402

ROWS = 1200


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def upload(store: Any, tmp_path: Path, parts: int = 3) -> tuple[list[str], list[str]]:
    """``parts`` Parquet files of 100-row groups written locally and put in the bucket."""
    urls, paths = [], []
    step = ROWS // parts
    for k in range(parts):
        x = np.arange(k * step, (k + 1) * step)
        table = pa.table(
            {"x": x, "s": [f"row-{i}" for i in x], "l": [[int(i)] * (i % 4) for i in x]}
        )
        path = str(tmp_path / f"part-{k}.parquet")
        pq.write_table(table, path, row_group_size=100)
        paths.append(path)
        urls.append(store.put(f"pq/part-{k}.parquet", Path(path).read_bytes()))
    return urls, paths


def plain(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows as comparable tuples (list columns come as arrays)."""
    return [(int(r["x"]), r["s"], list(r["l"])) for r in rows]


def s3_store(s3: Any) -> Any:
    return s3.obstore_store()


def test_a_bucket_source_reads_the_local_rows(store: Any, tmp_path: Path) -> None:
    urls, paths = upload(store, tmp_path)
    remote, local = ParquetDataSource(urls), ParquetDataSource(paths)
    assert len(remote) == len(local) == ROWS
    idx = np.random.default_rng(0).integers(0, ROWS, 200)
    assert plain(remote.__getitems__(idx)) == plain(local.__getitems__(idx))
    assert plain(list(remote)) == plain(list(local))
    assert plain([pickle.loads(pickle.dumps(remote))[777]]) == plain([local[777]])


def test_a_global_shuffle_of_a_bucket_source_is_the_local_one(store: Any, tmp_path: Path) -> None:
    urls, paths = upload(store, tmp_path)
    remote = MapDataset.source(ParquetDataSource(urls, columns=["x"])).seed(4).shuffle()
    local = MapDataset.source(ParquetDataSource(paths, columns=["x"])).seed(4).shuffle()
    remote_x = [int(r["x"]) for r in remote.to_iter_dataset()]
    assert remote_x == [int(r["x"]) for r in local.to_iter_dataset()]
    assert sorted(remote_x) == list(range(ROWS))


def test_an_iter_dataset_yields_the_local_rows_and_restores_local_checkpoints(
    store: Any, tmp_path: Path
) -> None:
    urls, paths = upload(store, tmp_path)
    expected = plain(list(ParquetIterDataset(paths, cycle_length=2)))
    assert plain(list(ParquetIterDataset(urls, cycle_length=2))) == expected
    local = iter(ParquetIterDataset(paths, cycle_length=2))
    taken = 0
    for step in (0, 1, 150, 799, ROWS):
        for _ in range(step - taken):
            next(local)
        taken = step
        state = local.get_state()
        remote = iter(ParquetIterDataset(urls, cycle_length=2))
        remote.set_state(state)
        assert remote.get_state() == state
        assert plain(list(remote)) == expected[step:]


def test_faults_are_retried_and_no_row_is_lost_or_repeated(s3: Any, tmp_path: Path) -> None:
    urls, paths = upload(s3, tmp_path)
    s3.proxy.configure(fault_rate=0.25, faults=(503, "reset"), seed=9, methods=("GET", "HEAD"))
    remote = ParquetDataSource(urls)
    assert plain(list(remote)) == plain(list(ParquetDataSource(paths)))
    assert plain(list(ParquetIterDataset(urls))) == plain(list(ParquetIterDataset(paths)))
    assert s3.proxy.injected > 0


def test_opening_and_reading_a_row_group_take_few_requests(s3: Any, tmp_path: Path) -> None:
    (url,), _ = upload(s3, tmp_path, parts=1)
    s3.proxy.configure()
    source = ParquetDataSource(url)
    assert s3.proxy.requests == 2  # HEAD, and one GET of the footer
    s3.proxy.configure()
    source[555]  # opens the file for this thread, then reads one row group
    assert s3.proxy.requests == 3
    s3.proxy.configure()
    source[0]
    assert s3.proxy.requests == 1  # one GET for all of a row group's column chunks


def test_a_damaged_page_of_a_checksummed_object_raises_naming_url_and_row_group(
    store: Any, tmp_path: Path
) -> None:
    path = tmp_path / "checked.parquet"
    table = pa.table({"x": np.arange(ROWS), "s": [f"row-{i}" for i in range(ROWS)]})
    pq.write_table(table, path, row_group_size=400, write_page_checksum=True)
    chunk = pq.read_metadata(path).row_group(1).column(0)  # x of rows 400-799
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 8] ^= 0xFF
    url = store.put("pq/checked.parquet", bytes(data))
    source = ParquetDataSource(url)
    assert int(source[5]["x"]) == 5
    with pytest.raises(OSError, match=f"row group 1 of '{url}' is damaged: a page's checksum"):
        source[450]
    with pytest.raises(OSError, match=f"ParquetIterDataset: row group 1 of '{url}' is damaged"):
        list(ParquetIterDataset(url))


def test_a_missing_object_raises_at_once_naming_its_url(store: Any) -> None:
    url = store.url("pq/missing.parquet")
    for build in (ParquetDataSource, lambda u: next(iter(ParquetIterDataset(u)))):
        with pytest.raises(FileNotFoundError, match=url):
            build(url)


def test_a_missing_object_is_not_retried(s3: Any) -> None:
    s3.proxy.configure()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ParquetDataSource(s3.url("pq/missing.parquet"))
    assert s3.proxy.requests == 1  # one HEAD, answered 404


def test_an_object_replaced_under_an_open_source_raises(store: Any, tmp_path: Path) -> None:
    urls, _ = upload(store, tmp_path)
    source = ParquetDataSource(urls)
    source[0]  # this thread's file 0 is open now, on the version of that time
    other = (tmp_path / "part-1.parquet").read_bytes()
    store.put("pq/part-0.parquet", other)
    with pytest.raises(chute.SourceChangedError, match=urls[0]):
        source[350]  # another row group of file 0
    fresh = ParquetDataSource(urls)
    store.put("pq/part-2.parquet", (tmp_path / "part-0.parquet").read_bytes())
    with pytest.raises(chute.SourceChangedError, match="changed since the source was built"):
        fresh[1000]  # file 2 is opened now, and is not the version the source indexed


def test_an_object_replaced_under_an_iterator_raises(store: Any, tmp_path: Path) -> None:
    urls, _ = upload(store, tmp_path, parts=2)
    it = iter(ParquetIterDataset(urls[:1]))
    next(it)
    store.put("pq/part-0.parquet", (tmp_path / "part-1.parquet").read_bytes())
    with pytest.raises(chute.SourceChangedError, match=urls[0]):
        list(it)


def test_an_explicit_obstore_store_reads_through_chute(s3: Any, tmp_path: Path) -> None:
    urls, paths = upload(s3, tmp_path)
    store = s3_store(s3)
    keys = [u.split("/", 3)[3] for u in urls]
    local = plain(list(ParquetDataSource(paths)))
    assert plain(list(ParquetDataSource(keys, filesystem=store))) == local
    assert plain(list(ParquetDataSource(urls, filesystem=store))) == local
    source = pickle.loads(pickle.dumps(ParquetDataSource(keys, filesystem=store)))
    assert plain([source[999]]) == local[999:1000]
    it_rows = plain(list(ParquetIterDataset(keys, filesystem=store)))
    assert it_rows == plain(list(ParquetIterDataset(paths)))


def test_an_explicit_fsspec_filesystem_still_reads_through_pyarrow(
    gcs: Any, tmp_path: Path
) -> None:
    from gcsfs.core import GCSFileSystem

    urls, paths = upload(gcs, tmp_path)
    fs = GCSFileSystem(token="anon", endpoint_url=gcs.proxy.url, skip_instance_cache=True)
    inner = [u.removeprefix("gs://") for u in urls]
    assert plain(list(ParquetDataSource(inner, filesystem=fs))) == plain(
        list(ParquetDataSource(paths))
    )


def test_an_http_url_reads_a_public_object(s3: Any, tmp_path: Path) -> None:
    _, (path,) = upload(s3, tmp_path, parts=1)
    data = Path(path).read_bytes()
    s3._client.put_object(Bucket=s3.bucket, Key="pub/a.parquet", Body=data, ACL="public-read")
    url = f"{s3.proxy.url}/{s3.bucket}/pub/a.parquet"
    assert plain(list(ParquetDataSource(url))) == plain(list(ParquetDataSource(path)))
    assert plain(list(ParquetIterDataset(url))) == plain(list(ParquetIterDataset(path)))


@pytest.mark.parametrize("cache", [False, True], ids=["bucket", "cache_dir"])
def test_a_closed_or_collected_bucket_source_leaves_no_thread(
    s3: Any, tmp_path: Path, cache: bool
) -> None:
    import gc
    import threading

    def chute_threads() -> list[str]:
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("chute"))

    urls, _ = upload(s3, tmp_path)
    gc.collect()  # sources other tests left unclosed
    before = set(chute_threads())  # what a source still referenced elsewhere holds
    options = {"cache_dir": str(tmp_path / "cache")} if cache else {}
    source = ParquetDataSource(urls, **options)
    source.__getitems__(range(0, ROWS, 7))
    source.close()
    assert set(chute_threads()) <= before
    source.__getitems__([5, ROWS - 1])  # a closed source reads again
    del source
    gc.collect()
    for thread in threading.enumerate():  # its downloads, told to stop, end their threads
        if thread.name.startswith("chute-cache"):
            thread.join(60)
    assert set(chute_threads()) <= before
