"""DaemonPool: the read-ahead threads of to_iter_dataset."""

from __future__ import annotations

import threading

import pytest

from chute._execution.daemon_pool import DaemonPool


class _Stopped(BaseException):
    """What a worker's SIGTERM handler raises, at any point of the code it interrupts."""


def test_a_start_interrupted_by_a_stop_leaves_nothing_to_join(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = DaemonPool(2, thread_name_prefix="test")
    original = threading.Thread.start

    def interrupted(self: threading.Thread) -> None:
        monkeypatch.setattr(threading.Thread, "start", original)
        raise _Stopped

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(_Stopped):
        pool.submit(int, "1")
    assert pool.submit(int, "2").result(timeout=60) == 2
    pool.shutdown(wait=True)  # raised "cannot join thread before it is started"
