"""How workers start (forked, or by the fork server), what they inherit, and their threads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import chute as grain
from chute import MultiprocessingOptions
from chute._execution import processes
from chute._execution.worker_process import WorkerIterator


@pytest.fixture
def busy_thread() -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="busy")
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.mark.forks
def test_auto_forks_a_single_threaded_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(processes.START_ENV, raising=False)
    if processes.fork_unsafe_reason() is not None:
        pytest.skip(f"this test process cannot fork: {processes.fork_unsafe_reason()}")
    it = iter(grain.MapDataset.range(8).to_iter_dataset().mp_prefetch(MultiprocessingOptions(2)))
    assert [w.start_method for w in it._parents] == ["fork", "fork"]
    assert list(it) == list(range(8))
    it.close()


def test_auto_uses_the_fork_server_while_other_threads_run(
    monkeypatch: pytest.MonkeyPatch, busy_thread: None
) -> None:
    monkeypatch.delenv(processes.START_ENV, raising=False)
    assert (processes.fork_unsafe_reason() or "").startswith("2 threads are running (")
    it = iter(grain.MapDataset.range(8).to_iter_dataset().mp_prefetch(MultiprocessingOptions(2)))
    assert [w.start_method for w in it._parents] == ["forkserver", "forkserver"]
    assert list(it) == list(range(8))
    it.close()


def test_a_bad_start_method_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(processes.START_ENV, "spawn")
    with pytest.raises(ValueError, match="CHUTE_WORKER_START must be one of auto, fork"):
        processes.start_method()


def test_a_closed_worker_exits_by_itself_although_later_workers_were_forked(
    start_method: str,
) -> None:
    ds = grain.MapDataset.range(100).to_iter_dataset()
    first = WorkerIterator(ds, index=0, count=2)
    second = WorkerIterator(ds, index=1, count=2)
    assert next(first) == 0 and next(second) == 0
    process = first._process
    first.close()  # joins it; a child still holding its pipes open would get it killed
    assert process.exitcode == 0
    second.close()
    assert second._process.exitcode == 0


def test_a_forked_worker_runs_a_pipeline_that_cannot_be_pickled(start_method: str) -> None:
    lock = threading.Lock()

    def locked(x: int) -> int:
        with lock:
            return x + 1

    ds = grain.MapDataset.range(6).map(locked).to_iter_dataset()
    if start_method == "fork":
        it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
        assert sorted(it) == [1, 2, 3, 4, 5, 6]
        it.close()
    else:
        with pytest.raises(TypeError, match="cannot pickle") as info:
            iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
        assert "must be pickled for the fork server" in "".join(info.value.__notes__)


def _spin(x: int) -> tuple[int, int]:
    deadline = time.thread_time() + 0.0005
    while time.thread_time() < deadline:
        pass
    return x, threading.active_count()


def _sleep(x: int) -> tuple[int, int]:
    time.sleep(0.003)
    return x, threading.active_count()


def test_workers_read_inline_when_the_work_holds_the_cpu(start_method: str) -> None:
    ds = grain.MapDataset.range(1200).map(_spin).to_iter_dataset()
    out = list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    assert sorted(x for x, _ in out) == list(range(1200))
    assert {threads for _, threads in out} == {1}


def test_workers_read_ahead_on_threads_when_reads_wait(start_method: str) -> None:
    ds = grain.MapDataset.range(400).map(_sleep).to_iter_dataset()
    out = list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    assert sorted(x for x, _ in out) == list(range(400))
    assert max(threads for _, threads in out[-50:]) > 1


PREPARE = """
import threading, multiprocessing.forkserver as fs
import chute as grain
stop = threading.Event()
if {thread}:
    threading.Thread(target=stop.wait).start()
ds = grain.MapDataset.range(4).to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(2))
print(fs._forkserver._forkserver_pid is not None)
print(sorted(ds))
stop.set()
"""


@pytest.mark.parametrize("thread", [False, True])
def test_the_fork_server_starts_when_the_pipeline_is_built_only_if_needed(thread: bool) -> None:
    code = textwrap.dedent(PREPARE.format(thread=thread))
    env: dict[str, Any] = dict(os.environ)
    env.pop(processes.START_ENV, None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [str(thread), "[0, 1, 2, 3]"]


BESIDE_JAX = """
import multiprocessing.forkserver as fs
{first}
import chute
print(fs._forkserver._forkserver_pid is not None)
"""


@pytest.mark.parametrize("first", ["", "import jax"])
def test_importing_chute_beside_jax_starts_the_fork_server(first: str) -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop(processes.START_ENV, None)
    code = textwrap.dedent(BESIDE_JAX.format(first=first))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(bool(first))


def test_workers_read_an_array_record_file_the_parent_has_read_from_the_fork_server(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child forked after array_record's reader or writer ran here crashes as it reads, so
    # chute starts these workers from the fork server (the test runs after those that fork).
    pytest.importorskip("array_record")
    from chute.experimental import write_array_record

    monkeypatch.delenv(processes.START_ENV, raising=False)
    paths = write_array_record([bytes([i % 256]) * 100 for i in range(500)], tmp_path / "r")
    source = grain.ArrayRecordDataSource(paths)
    assert source[7][:1] == b"\x07"  # the parent's reader is open and has read
    ds = grain.MapDataset.source(source).seed(1).shuffle().map(lambda r: r[0]).to_iter_dataset()
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    got = list(it)
    assert [w.start_method for w in it._parents] == ["forkserver", "forkserver"]
    assert sorted(got) == sorted(i % 256 for i in range(500))


def _no_gpu(index: int, count: int) -> None:
    raise RuntimeError("no GPU here")


def test_a_worker_gone_before_its_first_credit_still_says_why_it_could_not_start(
    start_method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = processes.start

    def start_and_wait_for_the_end(*args: Any, **kwargs: Any) -> Any:
        process = start(*args, **kwargs)
        process.join()  # the worker failed and left before the parent sends its credits
        return process

    monkeypatch.setattr(processes, "start", start_and_wait_for_the_end)
    ds = grain.MapDataset.range(4).to_iter_dataset()
    it = WorkerIterator(ds, worker_init_fn=_no_gpu)
    with pytest.raises(grain.WorkerDiedError, match="could not start: RuntimeError: no GPU"):
        it.get_state()
    it.close()
