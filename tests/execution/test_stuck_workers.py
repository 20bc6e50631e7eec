"""close() does not wait for workers: it stops them at once, and kills, naming them, those
stuck in native code that never returns to Python."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest

import chute as grain
from chute import MultiprocessingOptions
from chute._execution import worker_process

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.usefixtures("start_method")


class Stuck:
    """A source whose reads past the first record never return (each leaves a mark first).

    Each such read waits with SIGTERM blocked, as native code that never returns to
    Python does: the worker cannot be told to stop, only killed.  With ``interruptible``
    the read waits in Python, as a read from a store that stopped answering does.
    """

    def __init__(self, marks: Path, interruptible: bool = False) -> None:
        self.marks, self.interruptible = marks, interruptible

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int) -> int:
        if index >= 1:
            if not self.interruptible:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            (self.marks / f"{os.getpid()}-{index}").touch()
            threading.Event().wait()
        return index


def _wait_for_marks(marks: Path, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(list(marks.iterdir())) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_close_kills_stuck_workers_and_says_which(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    source = Stuck(tmp_path)
    ds = grain.MapDataset.source(source).to_iter_dataset(grain.ReadOptions(num_threads=0))
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    assert next(it) == 0
    _wait_for_marks(tmp_path, 2)  # both workers are inside a read that never returns
    pids = [worker._process.pid for worker in it._parents]
    with caplog.at_level(logging.WARNING, logger="chute"):
        it.close()
    stuck = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert len(stuck) == 2 and all("chute-worker-" in m for m in stuck)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)


def test_close_stops_workers_inside_a_read_at_once_instead_of_waiting(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker that close() waited on would take this whole grace and then be killed.
    monkeypatch.setattr(worker_process, "STOP_GRACE_S", 60.0)
    source = Stuck(tmp_path, interruptible=True)
    ds = grain.MapDataset.source(source).to_iter_dataset(grain.ReadOptions(num_threads=0))
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    assert next(it) == 0
    _wait_for_marks(tmp_path, 2)  # both workers wait inside a read (a store gone silent)
    workers = [worker._process for worker in it._parents]
    with caplog.at_level(logging.WARNING, logger="chute"):
        it.close()
    assert [w.exitcode for w in workers] == [0, 0]  # each left on its own: none was killed
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1].startswith("Z")


def test_workers_that_are_not_stuck_stop_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ds = grain.MapDataset.range(100).to_iter_dataset()
    pipeline = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    with caplog.at_level(logging.WARNING, logger="chute"), iter(pipeline) as it:
        next(it)
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]


class Slow:
    """A source whose every read takes ``seconds`` (a batch fetched from a far bucket)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 100

    def __getitem__(self, index: int) -> int:
        threading.Event().wait(self.seconds)
        return index


def test_workers_with_slow_elements_stop_at_once_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ds = grain.MapDataset.source(Slow(0.7)).to_iter_dataset(grain.ReadOptions(num_threads=0))
    pipeline = ds.mp_prefetch(MultiprocessingOptions(num_workers=1, per_worker_buffer_size=1))
    with caplog.at_level(logging.WARNING, logger="chute"), iter(pipeline) as it:
        assert [next(it), next(it)] == [0, 1]  # elements 2 (and 3) are in the making
        pid = it._parents[0]._process.pid
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]
    assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)
