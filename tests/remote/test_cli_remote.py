"""``chute convert`` into a bucket and ``chute inspect`` of bucket URLs, on S3 and GCS."""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
from pathlib import Path

import pytest

from chute._remote import RetryPolicy, open_source
from chute._remote.write import delete_object
from chute._sources.array_record.source import ArrayRecordDataSource
from chute.cli import main

pytest.importorskip("array_record")

ROWS = [{"id": i, "text": f"row {i}"} for i in range(10)]
SHARDS = [f"out/train-0000{i}-of-00003.array_record" for i in range(3)]
FAST = RetryPolicy(attempts=8, deadline=30, base_delay=0.001, max_delay=0.01)


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A fresh bucket on either server, whose clients wait milliseconds between retries."""
    monkeypatch.setattr("chute._remote.write.RetryPolicy", lambda: FAST)
    if request.param == "gcs":  # gcsfs retries by itself, waiting 1, 2, 4, ... s
        gcsfs_retry = pytest.importorskip("gcsfs.retry")

        class _Fast:
            @staticmethod
            async def sleep(seconds: float) -> None:
                pass

        monkeypatch.setattr(gcsfs_retry, "asyncio", _Fast)
    return request.getfixturevalue(request.param)


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def convert(
    capsys: pytest.CaptureFixture[str], source: Path, prefix: object, *extra: object
) -> str:
    status, out, err = cli(capsys, "convert", source, prefix, "--no-progress", *extra)
    assert (status, err) == (0, ""), err
    return out


def write_rows(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def records(source: ArrayRecordDataSource) -> list[bytes]:
    return list(source.__getitems__(range(len(source))))


def local_records(tmp_path: Path, source: Path, capsys: pytest.CaptureFixture[str]) -> list[bytes]:
    convert(capsys, source, tmp_path / "local" / "train", "--num-shards", 3)
    return records(ArrayRecordDataSource(str(tmp_path / "local" / "train")))


def test_convert_to_a_bucket_reads_back_what_a_local_convert_writes(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    out = convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    assert store.keys() == [*SHARDS, "out/train.chute-index", "out/train.manifest.json"]
    for key in SHARDS:
        assert re.search(rf"  {re.escape(store.url(key))} \([\d.]+ \w+\)", out)
    expected = local_records(tmp_path, source, capsys)
    assert records(ArrayRecordDataSource(store.url("out/train.chute-index"))) == expected
    assert records(ArrayRecordDataSource(store.url("out/train-*.array_record"))) == expected
    manifest = json.loads(_read(store, "out/train.manifest.json"))
    assert manifest["records"] == 10 and manifest["num_shards"] == 3


def _read(store, key: str) -> bytes:
    return open_source(store.url(key)).read_all()


def test_rerun_with_the_same_input_skips_and_rewrites_a_missing_index(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    versions = [open_source(store.url(k)).version for k in SHARDS]
    out = convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    assert "nothing to do" in out and store.url(SHARDS[2]) in out
    assert [open_source(store.url(k)).version for k in SHARDS] == versions
    delete_object(store.url("out/train.chute-index"))  # as a run that died before it does
    out = convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    assert "nothing to do" in out and "train.chute-index: was missing; written" in out
    assert len(ArrayRecordDataSource(store.url("out/train.chute-index"))) == 10


def test_other_input_is_refused_and_overwrite_replaces_every_old_shard(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    write_rows(source, [{"new": i} for i in range(4)])
    status, out, err = cli(capsys, "convert", source, store.url("out/train"), "--num-shards", 2)
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert "converted from another input" in err and "--overwrite" in err
    assert records(ArrayRecordDataSource(store.url("out/train.chute-index")))[0] == pickle.dumps(
        ROWS[0], protocol=5
    )
    convert(capsys, source, store.url("out/train"), "--num-shards", 2, "--overwrite")
    assert store.keys() == [
        "out/train-00000-of-00002.array_record",
        "out/train-00001-of-00002.array_record",
        "out/train.chute-index",
        "out/train.manifest.json",
    ]
    got = records(ArrayRecordDataSource(store.url("out/train.chute-index")))
    assert sorted(pickle.loads(r)["new"] for r in got) == [0, 1, 2, 3]


def test_failed_uploads_leave_no_shard_and_say_so_and_a_rerun_completes(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    store.proxy.configure(fault_rate=1.0, faults=(503,), methods=("PUT", "POST"))
    status, out, err = cli(capsys, "convert", source, store.url("out/train"), "--num-shards", 3)
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert re.search(r"out/train-0000\d-of-00003\.array_record: uploading the shard failed", err)
    assert "try again later" in err
    assert store.keys() == []
    store.proxy.configure()
    convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    assert len(ArrayRecordDataSource(store.url("out/train.chute-index"))) == 10


def test_a_full_local_disk_leaves_the_bucket_as_it_was_and_names_tmpdir(
    s3, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    def full(self: object, record: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    monkeypatch.setattr(ArrayRecordWriter, "write", full)
    status, out, err = cli(capsys, "convert", source, s3.url("out/train"), "--num-shards", 3)
    assert (status, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err
    assert re.search(r"chute-convert-\w+/shard-00000-of-00003\.array_record: cannot write", err)
    assert "No space left on device" in err and "set TMPDIR" in err
    assert "The bucket is as it was." in err
    assert s3.keys() == []


def test_transient_upload_failures_are_retried_into_a_complete_set(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    expected = local_records(tmp_path, source, capsys)
    store.proxy.configure(fault_rate=0.4, faults=(503, 500), methods=("PUT", "POST"), seed=5)
    convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    assert store.proxy.injected > 0
    store.proxy.configure()
    assert records(ArrayRecordDataSource(store.url("out/train.chute-index"))) == expected


def test_a_missing_bucket_is_one_line_naming_the_url(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    url = f"{store.scheme}://no-such-bucket-{store.bucket}/out/train"
    status, out, err = cli(capsys, "convert", source, url)
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert url in err and "does not exist" in err and "create it" in err


def test_denied_access_is_one_line_naming_the_credentials(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    variable = {"s3": "AWS_ACCESS_KEY_ID", "gs": "GOOGLE_APPLICATION_CREDENTIALS"}[store.scheme]
    for methods in (("GET",), ("PUT", "POST")):  # listing the bucket; uploading a shard
        store.proxy.configure(fault_rate=1.0, faults=(403,), methods=methods)
        status, out, err = cli(capsys, "convert", source, store.url("out/train"))
        assert (status, out) == (2, "") and err.count("\n") == 1
        assert "access denied" in err and variable in err and store.url("out/train") in err
        assert store.keys() == []


@pytest.mark.parametrize(
    ("spec", "files", "count"),
    [
        ("out/train", 3, 10),
        ("out/train-*.array_record", 3, 10),
        ("out/train@3", 3, 10),
        ("out/train-00001-of-00003.array_record", 1, 3),
        ("out/train.chute-index", 3, 10),
    ],
    ids=["prefix", "glob", "spec", "shard", "index"],
)
def test_inspect_counts_the_records_of_bucket_urls(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, files: int, count: int
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", ROWS)
    convert(capsys, source, store.url("out/train"), "--num-shards", 3)
    status, out, err = cli(capsys, "inspect", store.url(spec), "-n", 2)
    assert (status, err) == (0, ""), err
    assert out.startswith(f"{store.url(spec)}: {files} file(s), {count} record(s), ")
    assert f"  {store.url('out/train-00001-of-00003.array_record')}: 3 record(s)" in out
    first = 1 if files == 1 else 0  # shard 1 holds rows 1, 4, 7
    assert "first 2 record(s):" in out and f"'text': 'row {first}'" in out


def test_inspect_of_a_missing_object_is_one_line(s3, capsys: pytest.CaptureFixture[str]) -> None:
    for spec in ("out/train", "out/train-*.array_record", "out/train.chute-index"):
        status, out, err = cli(capsys, "inspect", s3.url(spec))
        assert (status, out) == (2, "") and err.count("\n") == 1 and s3.url(spec) in err


def test_missing_credentials_and_a_refused_endpoint_are_one_line_saying_what_to_do(
    s3, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    monkeypatch.setattr("chute._remote.open.RetryPolicy", lambda: FAST)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", refused)  # a machine outside AWS
    status, out, err = cli(capsys, "inspect", s3.url("out/train"))
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert "no credentials found" in err and "AWS_ACCESS_KEY_ID" in err
    assert "try again later" not in err
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "test")
    monkeypatch.setenv("AWS_ENDPOINT_URL", refused)
    status, out, err = cli(capsys, "inspect", s3.url("out/train"))
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert "connection was refused" in err and f"AWS_ENDPOINT_URL={refused}" in err


def test_bucket_inputs_convert_as_the_same_local_files_do(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from chute._sources.tfrecord import write_tfrecord

    jsonl = write_rows(tmp_path / "rows.jsonl", ROWS)
    pq.write_table(pa.table({"x": list(range(30))}), tmp_path / "a.parquet", row_group_size=7)
    pq.write_table(pa.table({"x": list(range(30, 50))}), tmp_path / "b.parquet")
    write_tfrecord([b"first", b"second", b"third"], str(tmp_path / "r.tfrecord"))
    for name in ("rows.jsonl", "a.parquet", "b.parquet", "r.tfrecord"):
        store.put(f"in/{name}", (tmp_path / name).read_bytes())
    cases = [
        (store.url("in/rows.jsonl"), jsonl),
        (store.url("in/*.parquet"), tmp_path / "*.parquet"),
        (store.url("in/r.tfrecord"), tmp_path / "r.tfrecord"),
    ]
    for k, (url, local) in enumerate(cases):
        convert(capsys, url, tmp_path / f"from-bucket-{k}", "--num-shards", 2)
        convert(capsys, local, tmp_path / f"from-disk-{k}", "--num-shards", 2)
        got = records(ArrayRecordDataSource(str(tmp_path / f"from-bucket-{k}")))
        assert got == records(ArrayRecordDataSource(str(tmp_path / f"from-disk-{k}")))
    assert len(records(ArrayRecordDataSource(str(tmp_path / "from-bucket-1")))) == 50


def test_a_bucket_input_rerun_skips_and_a_replaced_object_is_another_input(
    store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = store.put("in/rows.jsonl", write_rows(tmp_path / "rows.jsonl", ROWS).read_bytes())
    convert(capsys, url, store.url("out/train"), "--num-shards", 3)
    assert "nothing to do" in convert(capsys, url, store.url("out/train"), "--num-shards", 3)
    store.put("in/rows.jsonl", write_rows(tmp_path / "more.jsonl", ROWS * 2).read_bytes())
    status, _, err = cli(capsys, "convert", url, store.url("out/train"), "--num-shards", 3,
                         "--no-progress")  # fmt: skip
    assert status == 2 and "--overwrite" in err


def test_bucket_inputs_of_other_formats_are_refused_with_what_to_do(
    s3, capsys: pytest.CaptureFixture[str]
) -> None:
    url = s3.put("in/arrays.npy", b"\x93NUMPY")
    status, _, err = cli(capsys, "convert", url, "out/train", "--no-progress")
    assert status == 2 and "cannot tell one format" in err
    status, _, err = cli(capsys, "convert", url, "out/train", "--format", "npy", "--no-progress")
    assert status == 2 and "copy npy input to a local folder first" in err
    status, _, err = cli(capsys, "convert", s3.url("none/*.jsonl"), "out/train", "--no-progress")
    assert status == 2 and "no object matches" in err
