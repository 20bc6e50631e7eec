"""What the ``chute`` command prints: one line when an extra is missing, nothing more
once its reader has gone (``| head``), array summaries, single error messages, --version."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import chute
from chute._sources import checksums
from chute._sources.array_record.writer import write_array_record
from chute.cli import main

pytest.importorskip("array_record")

# Runs the chute command with array_record made unimportable, as if not installed.
WITHOUT_ARRAY_RECORD = (
    "import sys; sys.modules['array_record'] = None; "
    "from chute.cli import main; sys.exit(main(sys.argv[1:]))"
)
PLAIN = "import sys; from chute.cli import main; sys.exit(main(sys.argv[1:]))"


def chute_env() -> dict[str, str]:
    """The environment for a child that imports this same chute."""
    src = str(Path(chute.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": src, "PYTHONWARNINGS": "error"}


def run_child(code: str, *argv: object) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-c", code, *map(str, argv)]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=chute_env())


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_convert_without_array_record_fails_in_one_line_before_reading(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    done = run_child(WITHOUT_ARRAY_RECORD, "convert", tmp_path / "rows.jsonl", tmp_path / "out")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "needs the array_record package: pip install array_record" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]


def test_inspect_without_array_record_fails_in_one_line(tmp_path: Path) -> None:
    write_array_record([b"a", b"b"], tmp_path / "data")
    done = run_child(WITHOUT_ARRAY_RECORD, "inspect", tmp_path / "data")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "reading ArrayRecord files needs the array_record package" in done.stderr


def test_inspect_stops_quietly_when_its_reader_closes_the_pipe(tmp_path: Path) -> None:
    write_array_record([f"record {i}".encode() for i in range(10000)], tmp_path / "many")
    args = [sys.executable, "-c", PLAIN, "inspect", str(tmp_path / "many"), "-n", "10000"]
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=chute_env()
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        assert "10000 record(s)" in child.stdout.readline()  # then stop reading, as head does
        child.stdout.close()
        err = child.stderr.read()
        status = child.wait(timeout=60)
    assert (status, err) == (0, "")


def test_version_prints_the_package_version_and_which_checksum_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run_cli(capsys, "--version")
    runs = checksums.implementation()
    assert (status, out) == (0, f"chute {chute.__version__} (ArrayRecord checksums: {runs})\n")
    previous = checksums.use_compiled(False)
    try:
        status, out, _ = run_cli(capsys, "--version")
    finally:
        checksums.use_compiled(previous)
    assert status == 0 and "(ArrayRecord checksums: NumPy, " in out


def test_inspect_summarises_arrays_by_dtype_shape_and_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = np.zeros((32, 32, 3), np.uint8)
    image[0, 0, 0] = 200
    record = pickle.dumps({"image": image, "label": np.int64(3), "box": np.arange(4)})
    write_array_record([record], tmp_path / "images")
    status, out, _ = run_cli(capsys, "inspect", tmp_path / "images")
    assert status == 0
    assert "'image': ndarray(dtype=uint8, shape=(32, 32, 3), min=0, max=200)" in out
    assert "array([0, 1, 2, 3])" in out  # small arrays still show their values
    assert len(out.splitlines()) < 8


def test_inspect_of_a_file_that_is_not_array_record_says_so_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.array_record").write_text("not an ArrayRecord file")
    status, _, err = run_cli(capsys, "inspect", tmp_path / "bad.array_record")
    assert status == 2
    assert err.count("readable ArrayRecord file") == 1, err
    assert "bad.array_record" in err


def test_inspect_with_a_wrong_shard_count_names_the_counts_that_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_array_record([b"a", b"b", b"c", b"d"], tmp_path / "train", num_shards=4)
    status, _, err = run_cli(capsys, "inspect", f"{tmp_path / 'train'}@5")
    assert status == 2
    assert f"has 4 shards (use {tmp_path / 'train'}@4)" in err


def test_inspect_of_a_local_index_counts_each_shard_it_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"id": {i}}}\n' for i in range(5)))
    assert main(["convert", str(tmp_path / "rows.jsonl"), str(tmp_path / "out"),
                 "--num-shards", "2", "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    index = str(tmp_path / "out.chute-index")
    status, out, err = run_cli(capsys, "inspect", index, "-n", "1")
    assert (status, err) == (0, "")
    assert out.startswith(f"{index}: 2 file(s), 5 record(s), ")
    assert f"  {tmp_path / 'out-00001-of-00002.array_record'}: 2 record(s)" in out
    assert "{'id': 0}" in out


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("s3://bucket", "names a bucket but no file-name prefix; give one, e.g. s3://bucket/data"),
        ("gs://bucket/folder/", "is a folder; give a file-name prefix inside it"),
        ("s3://bucket/train-*", "holds a wildcard"),
        ("https://host/data/train", "cannot write to https:// URLs"),
    ],
)
def test_bucket_outputs_that_name_no_prefix_are_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str, says: str
) -> None:
    (tmp_path / "rows.jsonl").write_text('{"id": 1}\n')
    status, out, err = run_cli(capsys, "convert", tmp_path / "rows.jsonl", output)
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert output in err and says in err
