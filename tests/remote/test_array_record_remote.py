"""ArrayRecord sets in a bucket, opened from their index: the local records, byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute
from chute import ArrayRecordDataSource, MapDataset
from chute._remote.ranged_source import LocalRanges
from chute._sources.array_record.index import write_index
from chute._sources.array_record.ranged import RangedArrayRecordReader
from chute._sources.array_record.writer import write_array_record
from chute.cli import main

pytest.importorskip("array_record")


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def upload(store: Any, tmp_path: Path, options: str = "zstd:3") -> tuple[list[str], list[str]]:
    data = [b"rec%05d:" % i + b"z" * (i % 300) for i in range(1200)]
    files = write_array_record(data, str(tmp_path / "train"), num_shards=4, options=options)
    return [store.put(f"data/{Path(f).name}", Path(f).read_bytes()) for f in files], files


def test_a_bucket_set_opened_from_its_index_reads_the_local_records(
    store: Any, tmp_path: Path
) -> None:
    urls, files = upload(store, tmp_path)
    index = write_index(urls, store.url("data/train.chute-index"))
    remote, local = ArrayRecordDataSource(index), ArrayRecordDataSource(files)
    assert len(remote) == len(local) == 1200
    idx = np.random.default_rng(0).integers(0, 1200, 300)
    assert remote.__getitems__(idx) == local.__getitems__(idx)
    shuffled = MapDataset.source(remote).seed(3).shuffle().batch(64).to_iter_dataset()
    expected = MapDataset.source(local).seed(3).shuffle().batch(64).to_iter_dataset()
    assert [list(b) for b in shuffled] == [list(b) for b in expected]


def test_a_bucket_set_opens_from_its_index_in_one_request(s3: Any, tmp_path: Path) -> None:
    urls, files = upload(s3, tmp_path)
    index = write_index(urls, s3.url("data/train.chute-index"))
    s3.proxy.configure()
    remote = ArrayRecordDataSource(index)
    assert len(remote) == 1200
    assert dict(s3.proxy.methods) == {"GET": 1}  # the index's header, its size with it
    assert remote[7] == ArrayRecordDataSource(files)[7]


def test_reads_from_a_flaky_bucket_are_whole_and_retried(s3: Any, tmp_path: Path) -> None:
    urls, files = upload(s3, tmp_path, options="group_size:10,uncompressed")
    index = write_index(urls, s3.url("data/train.chute-index"))
    remote, local = ArrayRecordDataSource(index), ArrayRecordDataSource(files)
    s3.proxy.configure(fault_rate=0.2, faults=(503, "reset"), seed=11, methods=("GET", "HEAD"))
    idx = np.random.default_rng(1).integers(0, 1200, 200)
    assert remote.__getitems__(idx) == local.__getitems__(idx)
    assert s3.proxy.injected > 0


def test_a_shard_replaced_in_the_bucket_raises(s3: Any, tmp_path: Path) -> None:
    urls, _ = upload(s3, tmp_path)
    index = write_index(urls, s3.url("data/train.chute-index"))
    source = ArrayRecordDataSource(index)
    other = (tmp_path / "train-00000-of-00004.array_record").read_bytes()
    s3.put("data/train-00001-of-00004.array_record", other)  # another shard's bytes
    with pytest.raises(chute.SourceChangedError, match="changed since"):
        source[300]


def test_chute_index_indexes_a_bucket_glob(s3: Any, tmp_path: Path) -> None:
    upload(s3, tmp_path)
    assert main(["index", s3.url("data/train-*.array_record")]) == 0
    assert len(ArrayRecordDataSource(s3.url("data/train.chute-index"))) == 1200


def test_bucket_shards_without_an_index_open_by_glob_and_pickle(store: Any, tmp_path: Path) -> None:
    import pickle

    urls, files = upload(store, tmp_path)
    remote = ArrayRecordDataSource(store.url("data/train-*.array_record"))
    local = ArrayRecordDataSource(files)
    assert remote.paths == urls and len(remote) == 1200
    idx = np.random.default_rng(2).integers(0, 1200, 100)
    assert remote.__getitems__(idx) == local.__getitems__(idx)
    assert pickle.loads(pickle.dumps(remote))[77] == local[77]
    assert ArrayRecordDataSource(urls[1:3])[0] == local[300]


def test_a_url_with_its_scheme_in_capitals_opens_the_same_bucket_set(
    s3: Any, tmp_path: Path
) -> None:
    urls, files = upload(s3, tmp_path)
    shouted = s3.url("data/train-*.array_record").replace("s3://", "S3://", 1)
    remote = ArrayRecordDataSource(shouted)  # RFC 3986: schemes are case-insensitive
    assert remote.paths == urls and remote[7] == ArrayRecordDataSource(files)[7]


@pytest.mark.parametrize("spec", ["data/train@4", "data/train"], ids=["spec", "prefix"])
def test_a_bucket_shard_spec_and_a_shard_prefix_open_as_local_paths_do(
    store: Any, tmp_path: Path, spec: str
) -> None:
    urls, _ = upload(store, tmp_path)
    store.put("data/train.manifest.json", b"{}")  # what chute convert writes beside them
    remote = ArrayRecordDataSource(store.url(spec))
    assert remote.paths == urls and len(remote) == 1200
    local = ArrayRecordDataSource(str(tmp_path / Path(spec).name))
    assert remote.__getitems__(range(0, 1200, 7)) == local.__getitems__(range(0, 1200, 7))


def test_a_bucket_prefix_of_one_file_opens_its_array_record_object(s3: Any, tmp_path: Path) -> None:
    data = [b"a", b"bc", b"def"]
    (file,) = write_array_record(data, str(tmp_path / "one"), num_shards=1)
    url = s3.put("one.array_record", Path(file).read_bytes())
    remote = ArrayRecordDataSource(s3.url("one"))
    assert remote.paths == [url] and list(remote.__getitems__(range(3))) == data


def test_bucket_paths_that_name_nothing_say_which_forms_work(s3: Any, tmp_path: Path) -> None:
    urls, _ = upload(s3, tmp_path)
    with pytest.raises(FileNotFoundError, match=r"train@3 names 3 shards, but .*train@4"):
        ArrayRecordDataSource(s3.url("data/train@3"))
    with pytest.raises(FileNotFoundError, match=r"no object at .*PREFIX@N .*index"):
        ArrayRecordDataSource(s3.url("data/nope"))
    with pytest.raises(ValueError, match="a slice of an object's records"):
        ArrayRecordDataSource(urls[0] + "[0:10]")


def chute_threads() -> list[str]:
    import threading

    return sorted(t.name for t in threading.enumerate() if t.name.startswith("chute"))


def downloads_end() -> None:
    """Waits for the downloads of collected sources, told to stop, to end their threads."""
    import threading

    for thread in threading.enumerate():
        if thread.name.startswith("chute-cache"):
            thread.join(60)


@pytest.mark.parametrize("cache", [False, True], ids=["bucket", "cache_dir"])
def test_closed_and_collected_bucket_sources_leave_no_thread(
    s3: Any, tmp_path: Path, cache: bool
) -> None:
    import gc

    urls, _ = upload(s3, tmp_path)
    index = write_index(urls, s3.url("data/train.chute-index"))
    gc.collect()  # sources other tests left unclosed
    before = set(chute_threads())  # what a source still referenced elsewhere holds
    options = {"cache_dir": str(tmp_path / "cache")} if cache else {}
    for spec in (index, s3.url("data/train@4")):
        source = ArrayRecordDataSource(spec, **options)
        source.__getitems__(range(0, 1200, 5))  # every shard: their downloads start
        source.close()
        assert set(chute_threads()) <= before, spec
        source.__getitems__([3, 700])  # a closed source reads again
        del source  # unclosed: collecting it ends its threads
        gc.collect()
        downloads_end()
        assert set(chute_threads()) <= before, spec


def test_a_bucket_glob_that_matches_nothing_says_so(s3: Any) -> None:
    with pytest.raises(FileNotFoundError, match="no objects match"):
        ArrayRecordDataSource(s3.url("nothing-*.array_record"))


def test_retries_show_in_the_source_and_the_statistics(s3: Any, tmp_path: Path) -> None:
    from chute import experimental

    urls, files = upload(s3, tmp_path, options="group_size:10,uncompressed")
    remote = ArrayRecordDataSource(write_index(urls, s3.url("data/train.chute-index")))
    assert remote.retries == 0
    s3.proxy.configure(fault_rate=0.2, faults=(503,), seed=5, methods=("GET",))
    options = experimental.DatasetOptions(
        execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING
    )
    ds = MapDataset.source(remote).seed(1).shuffle().batch(100).to_iter_dataset()
    it = iter(experimental.WithOptionsIterDataset(ds, options))
    batches = [list(b) for b in it]
    local = MapDataset.source(ArrayRecordDataSource(files)).seed(1).shuffle().batch(100)
    assert batches == [list(b) for b in local.to_iter_dataset()]
    assert s3.proxy.injected > 0 and remote.retries == s3.proxy.injected
    summary = experimental.execution_summary(it)
    [source] = [s for s in summary.stages if s.retries is not None]
    assert source.name.startswith("source") and source.retries == remote.retries
    assert "retries" in str(summary).splitlines()[0]
    assert f"failed {remote.retries:,} request(s)" in summary.verdict


def test_local_sources_show_no_retries_column(tmp_path: Path) -> None:
    from chute import experimental

    files = write_array_record([b"x"] * 10, str(tmp_path / "t"), num_shards=1)
    local = ArrayRecordDataSource(write_index(files, str(tmp_path / "t.chute-index")))
    assert local.retries is None
    chute.config.update("py_debug_mode", True)
    try:
        it = iter(MapDataset.source(local).to_iter_dataset())
        assert len(list(it)) == 10
        summary = experimental.execution_summary(it)
    finally:
        chute.config.update("py_debug_mode", False)
    assert all(s.retries is None for s in summary.stages)
    assert "retries" not in str(summary)


def test_a_set_served_over_plain_http_reads_the_local_records(s3: Any, tmp_path: Path) -> None:
    urls, files = upload(s3, tmp_path)
    for url in urls:  # readable without credentials: moto is then a plain HTTP server
        s3._client.put_object_acl(Bucket=s3.bucket, Key=url.split("/", 3)[3], ACL="public-read")
    served = [u.replace("s3://", s3.proxy.url + "/") for u in urls]
    remote, local = ArrayRecordDataSource(served), ArrayRecordDataSource(files)
    idx = np.random.default_rng(2).integers(0, 1200, 100)
    assert remote.__getitems__(idx) == local.__getitems__(idx)


def test_shards_reopened_in_a_bucket_cost_no_requests_beyond_their_chunks(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._sources.array_record import indexed as indexed_array_record

    monkeypatch.setattr(indexed_array_record, "MAX_OPEN", 2)  # 4 shards: each read reopens
    urls, files = upload(s3, tmp_path, options="group_size:1,uncompressed")
    source = ArrayRecordDataSource(write_index(urls, s3.url("data/train.chute-index")))
    local = ArrayRecordDataSource(files)
    one_per_shard = [0, 300, 600, 900]
    assert source.__getitems__(one_per_shard) == local.__getitems__(one_per_shard)
    for shift in (1, 2):  # other chunks of the same shards, all reopened
        before = s3.proxy.requests
        wanted = [i + shift for i in one_per_shard]
        assert source.__getitems__(wanted) == local.__getitems__(wanted)
        assert s3.proxy.requests - before == 4  # one GET a chunk: no HEAD, no offsets


def test_a_batch_over_bucket_shards_has_every_shards_requests_in_flight_at_once(
    s3: Any, tmp_path: Path
) -> None:
    urls, files = upload(s3, tmp_path, options="group_size:1,uncompressed")
    source = ArrayRecordDataSource(write_index(urls, s3.url("data/train.chute-index")))
    idx = [0, 300, 600, 900]  # a chunk in each of the 4 shards
    assert source.__getitems__([5, 305, 605, 905])  # the shards' offsets are read now
    s3.proxy.configure(latency=0.05)
    assert source.__getitems__(idx) == ArrayRecordDataSource(files).__getitems__(idx)
    assert s3.proxy.requests == 4 and s3.proxy.max_in_flight == 4


@pytest.mark.parametrize("where", ["header", "data"])
def test_a_corrupted_chunk_in_one_bucket_shard_names_that_shard_and_record(
    s3: Any, tmp_path: Path, where: str
) -> None:
    from chute._sources.array_record.format import ArrayRecordFormatError

    files = write_array_record([b"r%04d" % i for i in range(400)], str(tmp_path / "t"),
                               num_shards=4, options="group_size:1,uncompressed")  # fmt: skip
    expected = ArrayRecordDataSource(files).__getitems__([3, 103, 206, 303])
    starts = RangedArrayRecordReader(LocalRanges(files[2]))._footer.starts
    data = bytearray(Path(files[2]).read_bytes())
    # The chunk header, or a byte of the value, of record 7 of shard 2: record 207 (the data
    # is uncompressed: a compression byte, the sizes' length, one size, then the value).
    data[starts[7] + (20 if where == "header" else 45)] ^= 0x01
    Path(files[2]).write_bytes(bytes(data))
    urls = [s3.put(f"c/{Path(f).name}", Path(f).read_bytes()) for f in files]
    source = ArrayRecordDataSource(write_index(urls, s3.url("c/t.chute-index")))
    assert source.__getitems__([3, 103, 206, 303]) == expected
    with pytest.raises(ArrayRecordFormatError, match=f"t-00002-of-00004.*{where}") as info:
        source.__getitems__([3, 103, 207, 303])
    assert info.value.chute_source_index == 207  # type: ignore[attr-defined]
    assert info.value.chute_source_record == 7  # type: ignore[attr-defined]


def test_an_explicit_obstore_store_holds_the_endpoint_and_credentials(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle

    urls, files = upload(s3, tmp_path)
    index = write_index(urls, s3.url("data/train.chute-index"))
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)  # only the store knows where and who
    store = s3.obstore_store()
    idx = np.random.default_rng(4).integers(0, 1200, 100)
    expected = ArrayRecordDataSource(files).__getitems__(idx)
    for spec in (index, s3.url("data/train-*.array_record")):
        source = ArrayRecordDataSource(spec, filesystem=store)
        assert source.__getitems__(idx) == expected
        assert pickle.loads(pickle.dumps(source)).__getitems__(idx) == expected


def test_an_explicit_fsspec_filesystem_reads_a_gcs_set(
    gcs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gcsfs.core import GCSFileSystem

    _, files = upload(gcs, tmp_path)
    fs = GCSFileSystem(token="anon", endpoint_url=gcs.proxy.url, skip_instance_cache=True)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")  # only the filesystem knows the emulator
    source = ArrayRecordDataSource(gcs.url("data/train-*.array_record"), filesystem=fs)
    idx = np.random.default_rng(5).integers(0, 1200, 100)
    assert source.__getitems__(idx) == ArrayRecordDataSource(files).__getitems__(idx)


def test_a_filesystem_takes_urls_not_paths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="with filesystem=, name the objects by URL"):
        ArrayRecordDataSource(str(tmp_path / "train.chute-index"), filesystem=object())


def test_retries_in_worker_processes_reach_the_statistics(s3: Any, tmp_path: Path) -> None:
    import datetime

    from chute import experimental

    urls, files = upload(s3, tmp_path, options="group_size:10,uncompressed")
    index = write_index(urls, s3.url("data/train.chute-index"))
    # The workers get the store with the pipeline, whatever their environment; a store
    # without retries of its own lets its failures reach chute's retries, which count.
    store = s3.obstore_store(
        retry_config={"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=60)}
    )
    remote = ArrayRecordDataSource(index, filesystem=store)
    # No request fails more than 3 times in a row, so none spends its 5 retries: one that
    # did would raise, and the read-ahead would read its records again one by one, a
    # retry that no source counts (the proxy counts that last failure, chute does not).
    s3.proxy.configure(fault_rate=0.2, faults=(503,), seed=9, methods=("GET",), max_in_a_row=3)
    options = experimental.DatasetOptions(
        execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING
    )
    ds = MapDataset.source(remote).seed(1).shuffle().batch(100).to_iter_dataset()
    ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=2))
    with iter(experimental.WithOptionsIterDataset(ds, options)) as it:
        batches = [list(b) for b in it]
        summary = experimental.execution_summary(it)
    local = MapDataset.source(ArrayRecordDataSource(files)).seed(1).shuffle().batch(100)
    assert batches == [list(b) for b in local.to_iter_dataset()]
    [source] = [s for s in summary.stages if s.retries is not None]
    # The workers' retries reach the summary, every one, and none is counted twice.
    assert source.where == "workers" and source.retries > 0
    assert source.retries + (remote.retries or 0) == s3.proxy.injected


def test_close_stops_workers_waiting_on_a_store_that_never_answers(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from chute._execution import worker_process as worker_side

    urls, _ = upload(s3, tmp_path)
    index = write_index(urls, s3.url("data/train.chute-index"))
    source = ArrayRecordDataSource(index, filesystem=s3.obstore_store())  # with the workers
    s3.proxy.configure(fault_rate=1.0, faults=("hang",))  # the store goes silent
    # A worker that close() waited on would take this whole grace, then be killed.
    monkeypatch.setattr(worker_side, "STOP_GRACE_S", 60.0)
    ds = MapDataset.source(source).batch(10).to_iter_dataset()
    it = iter(ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=2)))
    s3.proxy.wait_for_hung(2)  # the workers wait inside reads of their first batches
    workers = [worker._process for worker in it._parents]
    warnings: list[str] = []
    with monkeypatch.context() as patch:
        patch.setattr(logging.getLogger("chute"), "warning", lambda m, *a: warnings.append(m % a))
        it.close()
    assert [w.exitcode for w in workers] == [0, 0]  # told to stop, each left at once
    assert not warnings


def memory_set(tmp_path: Path) -> tuple[Any, str, list[str], list[str]]:
    """A set in fsspec's memory filesystem, which reports neither ETag nor mtime: the
    filesystem, the bucket's URL, the shards' URLs and the local shards."""
    from fsspec.implementations.memory import MemoryFileSystem

    fs, bucket = MemoryFileSystem(), f"s3://mem-{tmp_path.name}"
    data = [b"rec%05d:" % i + b"z" * (i % 300) for i in range(1200)]
    files = write_array_record(data, str(tmp_path / "train"), num_shards=4)
    urls = [f"{bucket}/{Path(f).name}" for f in files]
    for url, f in zip(urls, files):
        fs.pipe(url.removeprefix("s3://"), Path(f).read_bytes())
    return fs, bucket, urls, files


def test_a_filesystem_without_versions_reads_from_an_index_and_a_glob(tmp_path: Path) -> None:
    fs, bucket, urls, files = memory_set(tmp_path)
    index = write_index(urls, f"{bucket}/train.chute-index", filesystem=fs)
    idx = np.random.default_rng(6).integers(0, 1200, 200)
    expected = ArrayRecordDataSource(files).__getitems__(idx)
    for spec in (index, f"{bucket}/train-*.array_record"):
        source = ArrayRecordDataSource(spec, filesystem=fs)
        assert all(shard.version is None for shard in source.shards)
        assert source.__getitems__(idx) == expected
        assert source[1199] == ArrayRecordDataSource(files)[1199]


def test_an_index_that_recorded_no_version_as_the_string_none_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._sources.array_record import index as array_record_index

    fs, bucket, urls, files = memory_set(tmp_path)
    with monkeypatch.context() as patch:  # as chute wrote it before: str(None)
        patch.setattr(array_record_index, "_version", str)
        index = write_index(urls, f"{bucket}/train.chute-index", filesystem=fs)
    assert fs.cat_file(index.removeprefix("s3://")).count(b'"version": "None"') == 4
    source = ArrayRecordDataSource(index, filesystem=fs)
    assert all(shard.version is None for shard in source.shards)
    idx = np.random.default_rng(7).integers(0, 1200, 100)
    assert source.__getitems__(idx) == ArrayRecordDataSource(files).__getitems__(idx)
