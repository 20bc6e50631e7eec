"""A write that fails (a full disk, a file size limit) ends ``chute convert`` with one line
naming the file, the cause and what to do, exit status 2, and nothing under a final name."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import chute
from chute.cli import main

pytest.importorskip("array_record")

from array_record.python.array_record_module import ArrayRecordWriter

from chute._sources.array_record.source import ArrayRecordDataSource

ROWS = 3000  # about 600 KiB of records
SRC = str(Path(chute.__file__).resolve().parents[1])  # the chute these tests import

LIMITED = textwrap.dedent(
    """
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from chute.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


def write_rows(path: Path) -> Path:
    path.write_text("".join(json.dumps({"i": i, "text": "x" * 200}) + "\n" for i in range(ROWS)))
    return path


def convert_limited(limit: int, *argv: object) -> subprocess.CompletedProcess[str]:
    """``chute convert`` in a process that may write files of ``limit`` bytes at most."""
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-c", LIMITED, str(limit), "convert", *map(str, argv)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def check_one_line(err: str, *needles: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("chute convert: error: "), err
    for needle in needles:
        assert needle in err, err


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_file_size_limit_is_one_line_and_leaves_no_shard(tmp_path: Path) -> None:
    source = write_rows(tmp_path / "rows.jsonl")
    out = tmp_path / "out"
    done = convert_limited(100_000, source, out / "data", "--num-shards", 2, "--no-progress")
    assert done.returncode == 2, done.stderr
    check_one_line(
        done.stderr,
        "data-0000",  # the shard being written
        "File too large",
        "ulimit -f",
        "--num-shards",
        "No shard was left under its final name",
    )
    assert listing(out) == []  # no shard, temporary file, manifest or index


def test_a_failed_overwrite_leaves_the_old_set_as_it_was(tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"old": i}) + "\n" for i in range(10)))
    out = tmp_path / "out"
    assert main(["convert", str(source), str(out / "data"), "--no-progress"]) == 0
    before = {name: (out / name).read_bytes() for name in listing(out)}
    write_rows(source)
    done = convert_limited(
        100_000, source, out / "data", "--overwrite", "--num-shards", 2, "--no-progress"
    )
    assert done.returncode == 2, done.stderr
    check_one_line(done.stderr, "File too large", f"The old shards at {out / 'data'}")
    assert {name: (out / name).read_bytes() for name in listing(out)} == before
    assert len(ArrayRecordDataSource(str(out / "data.chute-index"))) == 10


def _full_disk_after(count: int) -> Any:
    """An ``ArrayRecordWriter.write`` that fails as a full disk does after ``count`` records."""
    real = ArrayRecordWriter.write
    written = [0]

    def write(self: Any, record: bytes) -> None:
        written[0] += 1
        if written[0] > count:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, record)

    return write


def test_a_full_disk_is_one_line_and_leaves_no_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_rows(tmp_path / "rows.jsonl")
    out = tmp_path / "out"
    monkeypatch.setattr(ArrayRecordWriter, "write", _full_disk_after(1000))
    status = main(["convert", str(source), str(out / "data"), "--num-shards", "3", "--no-progress"])
    captured = capsys.readouterr()
    assert (status, captured.out) == (2, "")
    check_one_line(
        captured.err,
        f"{out / 'data'}-0000",
        "No space left on device (the disk is full)",
        "free space",
        "No shard was left under its final name",
    )
    assert listing(out) == []
    monkeypatch.undo()  # room again: the same command converts
    assert main(["convert", str(source), str(out / "data"), "--num-shards", "3"]) == 0
    assert len(ArrayRecordDataSource(str(out / "data.chute-index"))) == ROWS


def test_a_full_disk_at_the_manifest_leaves_no_shard_claimed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_rows(tmp_path / "rows.jsonl")
    out = tmp_path / "out"

    def no_room(prefix: str, described: object, records: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{prefix}.manifest.json.tmp")

    monkeypatch.setattr("chute._cli.convert_local.write_manifest", no_room)
    status = main(["convert", str(source), str(out / "data"), "--num-shards", "2", "--no-progress"])
    captured = capsys.readouterr()
    assert (status, captured.out) == (2, "")
    check_one_line(captured.err, "data.manifest.json.tmp", "No space left on device")
    assert listing(out) == []  # the shards went with the manifest that would vouch for them
