"""The process's I/O loop ends cleanly at exit, whatever the store does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import chute

_FAILED_READ = """
import chute
try:
    chute.ArrayRecordDataSource({url!r})
except FileNotFoundError:
    pass
else:
    raise SystemExit("the source opened: expected FileNotFoundError")
"""

_READ_AT_EXIT = """
import atexit, sys, threading
import chute
from chute._remote import open_source

def read():
    source = open_source({url!r}, known=(1000, '"etag"'))
    try:
        source.read_ranges([(0, 10)])
    except BaseException as exc:
        with open({out!r}, "w") as out:
            out.write(f"{{type(exc).__name__}}: {{exc}}")

reader = threading.Thread(target=read, daemon=True)
atexit.register(reader.join, 10)  # runs after chute's exit handler, which it registered later
reader.start()
sys.stdin.readline()  # the test says when to exit: the read is in flight then
"""


def _env() -> dict[str, str]:
    """This process's environment (the store's variables), with chute importable."""
    here = str(Path(chute.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}


def _run(script: Path, count: int, at_once: int) -> list[subprocess.CompletedProcess[str]]:
    done: list[subprocess.CompletedProcess[str]] = []
    command = [sys.executable, str(script)]
    while len(done) < count:
        batch = [
            subprocess.Popen(command, env=_env(), text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
            for _ in range(min(at_once, count - len(done)))
        ]  # fmt: skip
        for child in batch:
            stdout, stderr = child.communicate(timeout=60)
            done.append(subprocess.CompletedProcess(command, child.returncode, stdout, stderr))
    return done


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_program_exits_cleanly_after_a_failed_bucket_read(s3: Any, tmp_path: Path) -> None:
    # Before chute stopped its I/O loop at exit, about one run in ten aborted in the
    # interpreter's finalisation (obstore's thread handing over the HEAD's answer).
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent(_FAILED_READ.format(url=s3.url("wrong/prefix"))))
    runs = _run(script, count=50, at_once=5)  # side by side: the load makes the race likelier
    failed = [(r.returncode, r.stderr[-2000:]) for r in runs if r.returncode or r.stderr]
    assert not failed, f"{len(failed)} of 50 runs: {failed[0]}"


def test_exit_cancels_a_read_from_a_silent_store_instead_of_waiting(
    silent: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", silent.url)
    out = tmp_path / "what-the-read-saw.txt"
    script = tmp_path / "exits.py"
    script.write_text(_READ_AT_EXIT.format(url="s3://bucket/silent.bin", out=str(out)))
    child = subprocess.Popen(
        [sys.executable, str(script)], env=_env(), text=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    silent.wait_for_requests(1)
    _, stderr = child.communicate("\n", timeout=60)
    assert (child.returncode, stderr) == (0, "")
    # The read in flight was cancelled at exit and told why; not waited on, nor left to
    # the interpreter's finalisation.
    seen = out.read_text()
    assert seen.startswith("RuntimeError: chute's object-store requests have stopped"), seen
    assert "the interpreter is exiting" in seen


def _chute_threads() -> set[str]:
    import threading

    return {t.name for t in threading.enumerate() if t.name.startswith("chute")}


def test_the_io_thread_lives_while_a_source_is_open_or_a_request_runs(s3: Any) -> None:
    import gc

    from chute._remote import list_prefix, open_source, write_object

    gc.collect()  # sources other tests left unclosed
    before = _chute_threads()
    url = s3.put("k.bin", b"abc")
    source = open_source(url)
    assert "chute-io" in _chute_threads()
    assert list_prefix(url) == [url] and "chute-io" in _chute_threads()  # still held
    source.close()
    assert _chute_threads() <= before
    write_object(s3.url("other.bin"), [b"x" * 10])  # a request with no source open
    assert list_prefix(s3.url("other")) == [s3.url("other.bin")]
    assert _chute_threads() <= before
    unclosed = open_source(url)
    assert unclosed.read_all() == b"abc"
    del unclosed
    gc.collect()
    assert _chute_threads() <= before


def test_a_source_collected_while_its_thread_holds_the_loops_lock_does_not_deadlock(
    s3: Any,
) -> None:
    # A garbage collection runs finalizers in whichever thread allocates, even inside
    # chute's own locked sections: letting go must never wait for the lock there.
    import gc

    from chute._remote import io_loop, open_source

    gc.collect()
    before = _chute_threads()
    source = open_source(s3.put("k.bin", b"abc"))
    with io_loop._lock:  # as if the collection ran inside run_on_io_loop's section
        source.close()
    io_loop._settle()  # what every section does as it lets go of the lock
    assert _chute_threads() <= before
