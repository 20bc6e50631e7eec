"""A rerun of ``chute convert`` over shards it wrote: nothing to do for the same input,
refused for another one (or for shards it cannot vouch for), replaced with --overwrite."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.array_record.writer import write_array_record
from chute.cli import main

pytest.importorskip("array_record")


def convert(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    status = main(["convert", *map(str, argv), "--no-progress"])
    out, err = capsys.readouterr()
    return status, out, err


def write_rows(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read(prefix: Path) -> list[object]:
    return sorted(pickle.loads(r) for r in ArrayRecordDataSource(str(prefix)))


def shard_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("out-*"))


def test_a_rerun_on_another_input_is_refused_and_overwrite_replaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [1, 2, 3, 4])
    assert convert(capsys, source, tmp_path / "out", "--num-shards", "2")[0] == 0
    write_rows(source, [10, 20, 30, 40, 50])
    status, out, err = convert(capsys, source, tmp_path / "out", "--num-shards", "2")
    assert (status, out) == (2, "")
    assert "converted from another input" in err and "rows.jsonl changed (size)" in err
    assert "--overwrite" in err and err.count("\n") == 1
    assert read(tmp_path / "out") == [1, 2, 3, 4]
    status, _, err = convert(capsys, source, tmp_path / "out", "--num-shards", "2", "--overwrite")
    assert (status, err) == (0, "")
    assert read(tmp_path / "out") == [10, 20, 30, 40, 50]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "out-00000-of-00002.array_record",
        "out-00001-of-00002.array_record",
        "out.chute-index",
        "out.manifest.json",
        "rows.jsonl",
    ]
    status, out, _ = convert(capsys, source, tmp_path / "out", "--num-shards", "2")
    assert status == 0 and "nothing to do" in out


def test_a_touched_input_counts_as_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [1, 2])
    convert(capsys, source, tmp_path / "out")
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    status, _, err = convert(capsys, source, tmp_path / "out")
    assert status == 2 and "rows.jsonl changed (modification time)" in err


def test_other_settings_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [1, 2])
    convert(capsys, source, tmp_path / "out")
    status, _, err = convert(capsys, source, tmp_path / "out", "--serializer", "json")
    assert status == 2 and "--serializer pickle then, json now" in err


def test_shards_without_a_manifest_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_array_record([b"old"], tmp_path / "out")
    source = write_rows(tmp_path / "rows.jsonl", [1, 2])
    status, _, err = convert(capsys, source, tmp_path / "out")
    assert status == 2 and "no manifest (out.manifest.json)" in err
    assert convert(capsys, source, tmp_path / "out", "--overwrite")[0] == 0
    assert read(tmp_path / "out") == [1, 2]


def test_another_shard_count_is_refused_and_overwrite_leaves_one_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [1, 2, 3, 4])
    convert(capsys, source, tmp_path / "out", "--num-shards", "4")
    status, _, err = convert(capsys, source, tmp_path / "out", "--num-shards", "2")
    assert status == 2 and "--num-shards 4 then, 2 now" in err
    assert len(shard_names(tmp_path)) == 4
    convert(capsys, source, tmp_path / "out", "--num-shards", "2", "--overwrite")
    assert shard_names(tmp_path) == [f"out-0000{i}-of-00002.array_record" for i in range(2)]
    assert read(tmp_path / "out") == [1, 2, 3, 4]


def test_overwrite_ignores_shards_left_by_a_killed_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [1, 2])
    convert(capsys, source, tmp_path / "out")
    write_array_record([b"stale"], tmp_path / ".out.overwrite")  # as if killed before renaming
    write_rows(source, [7, 8, 9])
    assert convert(capsys, source, tmp_path / "out", "--overwrite")[0] == 0
    assert read(tmp_path / "out") == [7, 8, 9]
    assert not list(tmp_path.glob(".out.overwrite*"))


def test_the_manifest_records_the_input_and_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [1, 2, 3])
    convert(capsys, source, tmp_path / "out", "--num-shards", "3")
    manifest = json.loads((tmp_path / "out.manifest.json").read_text())
    assert manifest["format"] == "jsonl" and manifest["num_shards"] == 3
    assert manifest["records"] == 3 and manifest["files"] == 1
    assert manifest["bytes"] == source.stat().st_size


def test_an_output_inside_the_input_folder_is_not_taken_for_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "images" / "cat").mkdir(parents=True)
    (tmp_path / "images" / "cat" / "1.png").write_bytes(b"png")
    assert convert(capsys, tmp_path / "images", tmp_path / "images" / "out")[0] == 0
    status, out, _ = convert(capsys, tmp_path / "images", tmp_path / "images" / "out")
    assert status == 0 and "nothing to do" in out


def test_a_rerun_writes_the_index_a_killed_run_did_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [{"i": i} for i in range(10)])
    assert convert(capsys, rows, tmp_path / "out", "--num-shards", 2)[0] == 0
    index = tmp_path / "out.chute-index"
    index.unlink()  # as if the run died between its manifest and its index
    status, out, _ = convert(capsys, rows, tmp_path / "out", "--num-shards", 2)
    assert status == 0 and "nothing to do" in out
    assert sorted(pickle.loads(r)["i"] for r in ArrayRecordDataSource(str(index))) == list(
        range(10)
    )
