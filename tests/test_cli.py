"""The ``chute`` command: convert each input format to ArrayRecord, inspect, and fail cleanly."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute._cli.decode import describe
from chute._cli.readers import READERS
from chute._cli.records import json_object_hook
from chute.cli import main

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("array_record")

from chute._sources.array_record.source import ArrayRecordDataSource  # noqa: E402
from chute._sources.array_record.writer import write_array_record  # noqa: E402
from chute._sources.tfrecord import write_tfrecord  # noqa: E402

ROWS = [{"id": i, "name": f"row {i}", "score": i / 4} for i in range(7)]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main(argv)`` in this process: exit status, stdout, stderr."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def read_back(prefix: Path) -> list[bytes]:
    """Every record of the shards ``convert`` wrote at ``prefix``, in shard order."""
    files = sorted(str(p) for p in prefix.parent.glob(f"{prefix.name}-*.array_record"))
    assert files, f"no shards at {prefix}"
    source = ArrayRecordDataSource(files)
    return [source[i] for i in range(len(source))]


def convert(capsys: pytest.CaptureFixture[str], source: Path, prefix: Path, *extra: str) -> str:
    status, out, err = run_cli(capsys, "convert", source, prefix, "--no-progress", *extra)
    assert (status, err) == (0, ""), err
    return out


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_images(root: Path) -> dict[str, bytes]:
    files = {"cat/1.png": b"\x89PNG one", "cat/2.png": b"\x89PNG two", "dog/3.jpg": b"\xff\xd8j"}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "notes.txt").write_text("not an image")
    return files


# Round trips, one per input format.


def test_parquet_rows_become_pickled_dicts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = write_parquet(tmp_path / "rows.parquet", ROWS)
    out = convert(capsys, source, tmp_path / "out" / "rows")
    assert [pickle.loads(r) for r in read_back(tmp_path / "out" / "rows")] == ROWS
    assert "rows-00000-of-00001.array_record" in out


def test_jsonl_lines_become_records(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    convert(capsys, source, tmp_path / "out")
    assert [pickle.loads(r) for r in read_back(tmp_path / "out")] == ROWS


def test_npy_rows_along_axis_0(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    array = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    np.save(tmp_path / "x.npy", array)
    convert(capsys, tmp_path / "x.npy", tmp_path / "out")
    rows = [pickle.loads(r) for r in read_back(tmp_path / "out")]
    assert all(type(row) is np.ndarray for row in rows)
    np.testing.assert_array_equal(np.stack(rows), array)


def test_npz_rows_are_dicts_of_array_rows(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    images, labels = np.arange(12).reshape(3, 2, 2), np.array([5, 6, 7], dtype=np.int32)
    np.savez(tmp_path / "d.npz", image=images, label=labels)
    convert(capsys, tmp_path / "d.npz", tmp_path / "out")
    rows = [pickle.loads(r) for r in read_back(tmp_path / "out")]
    assert [sorted(row) for row in rows] == [["image", "label"]] * 3
    np.testing.assert_array_equal(np.stack([row["image"] for row in rows]), images)
    assert [row["label"] for row in rows] == [5, 6, 7]
    assert rows[0]["label"].dtype == np.int32


def test_image_folder_records_bytes_filename_and_label(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    files = write_images(tmp_path / "images")
    convert(capsys, tmp_path / "images", tmp_path / "out")
    rows = [pickle.loads(r) for r in read_back(tmp_path / "out")]
    assert rows == [
        {"image": data, "filename": name, "label": name.split("/")[0], "label_id": i // 2}
        for i, (name, data) in enumerate(files.items())
    ]


def test_tfrecord_records_are_copied_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    records = [b"", b"first", bytes(range(256)) * 3]
    write_tfrecord(records, str(tmp_path / "data.tfrecord"))
    convert(capsys, tmp_path / "data.tfrecord", tmp_path / "out")
    assert read_back(tmp_path / "out") == records


def test_glob_input_reads_files_in_sorted_order(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_parquet(tmp_path / "b.parquet", ROWS[4:])
    write_parquet(tmp_path / "a.parquet", ROWS[:4])
    convert(capsys, tmp_path / "*.parquet", tmp_path / "out" / "all")
    assert [pickle.loads(r) for r in read_back(tmp_path / "out" / "all")] == ROWS


def test_json_serializer_writes_portable_json(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_images(tmp_path / "images")
    convert(capsys, tmp_path / "images", tmp_path / "out", "--serializer", "json")
    first = read_back(tmp_path / "out")[0]
    assert json.loads(first)["image"] == {"__bytes__": "iVBORyBvbmU="}
    assert json.loads(first, object_hook=json_object_hook)["image"] == b"\x89PNG one"


def test_json_serializer_turns_arrays_into_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    np.savez(tmp_path / "d.npz", x=np.arange(4).reshape(2, 2), y=np.array([0.5, 1.5]))
    convert(capsys, tmp_path / "d.npz", tmp_path / "out", "--serializer", "json")
    assert [json.loads(r) for r in read_back(tmp_path / "out")] == [
        {"x": [0, 1], "y": 0.5},
        {"x": [2, 3], "y": 1.5},
    ]


def test_huggingface_dataset_rows_as_stored(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list(ROWS)
    dataset.save_to_disk(str(tmp_path / "hf"))
    capsys.readouterr()  # save_to_disk's own progress bar
    convert(capsys, tmp_path / "hf", tmp_path / "out")
    assert [pickle.loads(r) for r in read_back(tmp_path / "out")] == ROWS
    datasets.DatasetDict({"train": dataset, "test": dataset}).save_to_disk(str(tmp_path / "dd"))
    capsys.readouterr()
    check_error(capsys, ["convert", tmp_path / "dd", tmp_path / "o"], "train, test", "dd/train")


@pytest.mark.skipif(importlib.util.find_spec("msgpack") is None, reason="needs msgpack")
def test_msgpack_serializer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import msgpack

    write_parquet(tmp_path / "rows.parquet", ROWS)
    convert(capsys, tmp_path / "rows.parquet", tmp_path / "out", "--serializer", "msgpack")
    assert [msgpack.unpackb(r) for r in read_back(tmp_path / "out")] == ROWS


# Shards and resuming.


def test_num_shards_deals_rows_round_robin(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_parquet(tmp_path / "rows.parquet", ROWS)
    out = convert(capsys, tmp_path / "rows.parquet", tmp_path / "out", "--num-shards", "3")
    assert "7 records into 3 shard(s)" in out
    shards = sorted(tmp_path.glob("out-*"))
    assert [p.name for p in shards] == [f"out-{i:05d}-of-00003.array_record" for i in range(3)]
    assert all(p.name in out for p in shards)
    for i, shard in enumerate(shards):
        with ArrayRecordDataSource(str(shard)) as source:
            assert [pickle.loads(r) for r in source] == ROWS[i::3]


def test_more_shards_than_rows_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_parquet(tmp_path / "rows.parquet", ROWS)
    argv = ["convert", tmp_path / "rows.parquet", tmp_path / "o", "--num-shards", "8"]
    check_error(capsys, argv, "--num-shards 7 or fewer")


def test_rerun_of_a_finished_conversion_does_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_parquet(tmp_path / "rows.parquet", ROWS)
    convert(capsys, source, tmp_path / "out", "--num-shards", "2")
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(tmp_path.glob("out-*"))]
    monkeypatch.setitem(READERS, "parquet", None)  # not read again
    out = convert(capsys, source, tmp_path / "out", "--num-shards", "2")
    assert "nothing to do" in out
    after = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(tmp_path.glob("out-*"))]
    assert after == before


def test_rerun_after_an_interruption_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = write_parquet(tmp_path / "rows.parquet", ROWS)
    convert(capsys, source, tmp_path / "out", "--num-shards", "2")
    first, second = sorted(tmp_path.glob("out-*"))
    second.unlink()
    Path(f"{second}.tmp").write_bytes(b"left by a killed run")
    convert(capsys, source, tmp_path / "out", "--num-shards", "2")
    assert sorted(tmp_path.glob("out-*")) == [first, second]
    rows = [pickle.loads(r) for r in read_back(tmp_path / "out")]
    assert sorted(rows, key=lambda r: r["id"]) == ROWS


def test_a_failed_conversion_leaves_no_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lines = [json.dumps(r) for r in ROWS] + ["{broken"]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines))
    argv = ["convert", tmp_path / "rows.jsonl", tmp_path / "out", "--num-shards", "2"]
    check_error(capsys, argv, "rows.jsonl line 8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]


def test_bad_writer_options(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_parquet(tmp_path / "rows.parquet", ROWS)
    argv = ["convert", tmp_path / "rows.parquet", tmp_path / "o", "--options", "bogus:1"]
    check_error(capsys, argv, "bogus")


# Inspect.


def test_inspect_prefix_counts_and_decodes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_parquet(tmp_path / "rows.parquet", ROWS)
    convert(capsys, tmp_path / "rows.parquet", tmp_path / "out", "--num-shards", "2")
    status, out, err = run_cli(capsys, "inspect", f"{tmp_path / 'out'}@2", "-n", "2")
    assert (status, err) == (0, "")
    assert "2 file(s), 7 record(s)" in out
    assert "out-00001-of-00002.array_record" in out
    assert out.count("pickle") == 2
    assert "'name': 'row 0'" in out
    assert "[2]" not in out


def test_inspect_counts_empty_shards(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_array_record([b"only"], str(tmp_path / "few"), num_shards=3)
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "few")
    assert status == 0 and "3 file(s), 1 record(s)" in out and "'only'" in out
    assert out.count(": 0 record(s)") == 2


def test_inspect_warns_of_missing_shards(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_array_record([b"a", b"b"], str(tmp_path / "two"), num_shards=2)
    (tmp_path / "two-00001-of-00002.array_record").unlink()
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "two")
    assert status == 0 and "only 1 of the 2 shards" in out


def test_inspect_decodes_each_kind_of_record(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    npy = io.BytesIO()
    np.save(npy, np.arange(3))
    records = [
        npy.getvalue(),
        b'{"a": [1, 2]}',
        "plain text ✓".encode(),
        bytes(range(200)),
        pickle.dumps(Path("x")),
    ]
    write_array_record(records, str(tmp_path / "mixed"))
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "mixed", "-n", "9", "--max-chars", "60")
    assert status == 0
    for text in ("npy int64 (3,)", "array([0, 1, 2])", '"a": [', "plain text ✓", "00 01 02"):
        assert text in out
    assert "pickle of pathlib.PosixPath, not loaded" in out  # unpickling: it would run code
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "mixed", "-n", "9", "--trust-pickle")
    assert "PosixPath('x')" in out or "WindowsPath('x')" in out


def test_inspect_cuts_long_records(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_array_record(
        [pickle.dumps({"text": "x" * 5000, "n": list(range(100))})], str(tmp_path / "a")
    )
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "a", "--max-chars", "300")
    assert status == 0
    assert "(+4880 chars)" in out and "(+88 more)" in out
    assert max(len(line) for line in out.splitlines()) < 400


def test_inspect_reads_convert_inputs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_tfrecord([b"alpha", b"beta"], str(tmp_path / "t.tfrecord"))
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "t.tfrecord")
    assert status == 0 and "2 record(s)" in out and "'alpha'" in out
    write_parquet(tmp_path / "rows.parquet", ROWS)
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "rows.parquet", "-n", "1")
    assert status == 0 and "7 record(s)" in out and "'name': 'row 0'" in out
    np.save(tmp_path / "x.npy", np.arange(6).reshape(3, 2))
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "x.npy")
    assert status == 0 and "3 record(s)" in out and "npy row" in out and "array([4, 5])" in out
    write_images(tmp_path / "images")
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "images", "-n", "1")
    assert status == 0 and "1 file(s), 3 record(s)" in out and "'label': 'cat'" in out


def test_describe_shortens_bytes_and_falls_back_to_hex() -> None:
    kind, text = describe(pickle.dumps({"image": bytes(1000)}), trust_pickle=False)
    assert kind == "pickle" and "(+984 bytes)" in text
    assert describe(b"\x00\xff" * 40, trust_pickle=False) == (
        "bytes",
        "00 ff " * 15 + "00 ff ...(+48 bytes)",
    )


# Help and mistakes.


def test_convert_help_documents_the_record_format(capsys: pytest.CaptureFixture) -> None:
    status, out, _ = run_cli(capsys, "convert", "--help")
    assert status == 0
    for text in ("Record format", "pickle.loads(record)", "__bytes__", "label_id", "interrupted"):
        assert text in out


def test_missing_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    check_error(capsys, ["convert", tmp_path / "nope.parquet", tmp_path / "out"], "nope.parquet")


def check_error(capsys: pytest.CaptureFixture, argv: list[Any], *needles: str) -> str:
    """The command exits with status 2 and one line on stderr that names ``needles``."""
    status, out, err = run_cli(capsys, *argv)
    assert status == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err
    return err


@pytest.mark.parametrize(
    ("name", "content", "needles"),
    [
        ("data.xyz", b"?", ("data.xyz", "--format")),
        ("empty.jsonl", b"\n\n", ("empty.jsonl", "no records")),
        ("bad.jsonl", b'{"a": 1}\n{oops\n', ("bad.jsonl line 2", "not valid JSON")),
        ("bad.parquet", b"not parquet", ("bad.parquet", "Parquet")),
        ("bad.npz", b"not a zip", ("bad.npz",)),
        ("bad.tfrecord", b"\x05\x00\x00", ("bad.tfrecord", "truncated")),
    ],
)
def test_bad_input_files(
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    name: str,
    content: bytes,
    needles: tuple[str, ...],
) -> None:
    (tmp_path / name).write_bytes(content)
    check_error(capsys, ["convert", tmp_path / name, tmp_path / "out"], *needles)
    assert not list(tmp_path.glob("out*"))


def test_empty_npy_and_ragged_npz(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    np.save(tmp_path / "empty.npy", np.zeros((0, 3)))
    check_error(capsys, ["convert", tmp_path / "empty.npy", tmp_path / "o"], "no records")
    np.savez(tmp_path / "ragged.npz", a=np.zeros(3), b=np.zeros(4))
    check_error(capsys, ["convert", tmp_path / "ragged.npz", tmp_path / "o"], "a: 3, b: 4")


def test_unknown_format_option(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_parquet(tmp_path / "rows.parquet", ROWS)
    status, _, err = run_cli(capsys, "convert", tmp_path / "rows.parquet", "o", "--format", "csv")
    assert status == 2 and "invalid choice: 'csv'" in err


def test_unwritable_output_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_parquet(tmp_path / "rows.parquet", ROWS)
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["convert", tmp_path / "rows.parquet", blocker / "out"]
    check_error(capsys, argv, str(blocker), "output folder")
    check_error(capsys, ["convert", tmp_path / "rows.parquet", tmp_path], "is a folder")


def test_folder_without_images(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "in").mkdir()
    check_error(capsys, ["convert", tmp_path / "in", tmp_path / "out"], "neither image files")


def test_json_serializer_rejects_what_json_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    np.save(tmp_path / "c.npy", np.array([1 + 2j]))
    argv = ["convert", tmp_path / "c.npy", tmp_path / "out", "--serializer", "json"]
    check_error(capsys, argv, "--serializer pickle")


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="datasets installed")
def test_huggingface_without_datasets_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "dataset_info.json").write_text("{}")
    check_error(capsys, ["convert", tmp_path / "hf", tmp_path / "out"], "pip install datasets")


def test_inspect_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    check_error(capsys, ["inspect", tmp_path / "nothing"], "nothing", "no such file")


def test_console_script_converts(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("chute")
    if not script.exists():
        pytest.skip("the chute console script is not installed (pip install -e .)")
    write_parquet(tmp_path / "rows.parquet", ROWS)
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    done = subprocess.run(
        [script, "convert", tmp_path / "rows.parquet", tmp_path / "out" / "rows"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert [pickle.loads(r) for r in read_back(tmp_path / "out" / "rows")] == ROWS
