"""How an error raised in a worker process reads in the parent's stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from chute._execution import worker_errors

FAILING_MAP = """
import chute as grain

def check(x):
    if x == 3:
        raise ValueError("element three is bad")
    return x

options = grain.MultiprocessingOptions(num_workers=2)
for x in grain.MapDataset.range(6).map(check).to_iter_dataset().mp_prefetch(options):
    pass
"""

CORRUPT_RECORD = """
import subprocess, sys
import chute as grain

# Written by another process: once array_record's writer has run here, workers cannot be
# forked from this process, and the test forks them.
WRITE = "import sys; from chute.experimental import write_array_record as w; " \\
    "print(w([bytes([i]) * 1000 for i in range(50)], sys.argv[1])[0])"
paths = [subprocess.check_output([sys.executable, "-c", WRITE, sys.argv[1]], text=True).strip()]
data = bytearray(open(paths[0], "rb").read())
data[3000:3100] = bytes(b ^ 0xFF for b in data[3000:3100])
open(paths[0], "wb").write(bytes(data))
ds = grain.MapDataset.source(grain.ArrayRecordDataSource(paths)).to_iter_dataset()
list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
"""


def _stderr(script: str, folder: Path, *args: Any, **env: str) -> str:
    path = folder / "train.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run(
        [sys.executable, str(path), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert done.returncode == 1, done.stderr
    return done.stderr


def test_a_worker_error_shows_the_users_exception_once_with_the_users_frames(
    start_method: str, tmp_path: Path
) -> None:
    stderr = _stderr(FAILING_MAP, tmp_path)
    assert stderr.count("ValueError: element three is bad") == 1, stderr
    assert "During handling" not in stderr and "raised while handling" not in stderr
    assert "map(check)" in stderr and "element index 3" in stderr
    assert "worker process 1 of 2" in stderr and "CHUTE_FULL_TRACEBACKS=1" in stderr
    assert 'raise ValueError("element three is bad")' in stderr
    assert "_stages" not in stderr and "_serve" not in stderr  # no frames of chute's in the worker
    assert len(stderr.splitlines()) <= 16, stderr


def test_full_tracebacks_show_chutes_frames_when_asked_for(
    start_method: str, tmp_path: Path
) -> None:
    stderr = _stderr(FAILING_MAP, tmp_path, CHUTE_FULL_TRACEBACKS="1")
    assert "full traceback" in stderr and "_serve" in stderr


def test_a_corrupt_record_read_in_a_worker_is_reported_in_a_few_lines(
    start_method: str, tmp_path: Path
) -> None:
    pytest.importorskip("array_record")
    stderr = _stderr(CORRUPT_RECORD, tmp_path, tmp_path / "records")
    assert stderr.count("chunk header hash mismatch") == 1, stderr
    assert "cannot read record" in stderr and "worker process" in stderr
    assert len(stderr.splitlines()) <= 16, stderr


MAIN_ERROR = """
import chute as grain


class MyError(Exception):
    pass


def check(x):
    if x == 3:
        raise MyError("element three is bad")
    return x


def caught(iterable):
    try:
        list(iterable)
    except MyError as exc:
        note = "worker process 1 of 2" in exc.__notes__[-1]
        return f"caught {type(exc) is MyError} note {note}"
    except Exception as exc:
        return f"missed {type(exc)!r}"
    return "nothing raised"


ds = grain.MapDataset.range(6).map(check).to_iter_dataset()
print("mp_prefetch", caught(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))))
loader = grain.DataLoader(
    data_source=list(range(6)),
    sampler=grain.SequentialSampler(num_records=6),
    operations=[grain.transforms.Map(check)],
    worker_count=2,
)
print("DataLoader", caught(loader))
"""


@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_an_exception_class_of_the_script_is_caught_by_its_except(
    start: str, tmp_path: Path
) -> None:
    path = tmp_path / "train.py"
    path.write_text(MAIN_ERROR)
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "CHUTE_WORKER_START": start},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mp_prefetch caught True note True",
        "DataLoader caught True note True",
    ], done.stdout + done.stderr


def test_the_short_traceback_keeps_a_distinct_cause() -> None:
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError as exc:
            raise KeyError("no such record") from exc

    try:
        parse("x")
    except KeyError as exc:
        short = worker_errors.short_traceback(exc)
    assert "raised while handling ValueError: invalid literal" in short
    assert short.count("in parse") == 2
