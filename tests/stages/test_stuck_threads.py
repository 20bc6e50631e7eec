"""close() of a thread prefetch whose parent is stuck returns, says so, and exit is not held."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading

import pytest

from chute import MapDataset
from chute.experimental import ThreadPrefetchIterDataset


class Stuck:
    """Reads past the first record wait for ``release``; ``stuck`` is set when one starts."""

    def __init__(self) -> None:
        self.stuck = threading.Event()
        self.release = threading.Event()

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int) -> int:
        if index >= 1:
            self.stuck.set()
            self.release.wait()
        return index


def test_close_returns_and_names_the_stuck_stage(caplog: pytest.LogCaptureFixture) -> None:
    before = set(threading.enumerate())
    source = Stuck()
    try:
        read = MapDataset.source(source).to_iter_dataset()
        it = iter(ThreadPrefetchIterDataset(read, prefetch_buffer_size=4))
        assert next(it) == 0
        assert source.stuck.wait(timeout=30)
        with caplog.at_level(logging.WARNING, logger="chute"):
            it.close()
        assert any("thread_prefetch" in r.getMessage() for r in caplog.records)
    finally:  # the read returns at last: the thread that was stuck in it ends
        source.release.set()
        started = set(threading.enumerate()) - before
        for thread in started:
            thread.join(timeout=30)
    assert not [t.name for t in started if t.is_alive()]


def test_a_stuck_reading_thread_does_not_keep_the_interpreter_from_exiting() -> None:
    script = textwrap.dedent(
        """
        import threading, sys
        from chute import MapDataset
        from chute.experimental import ThreadPrefetchIterDataset

        class Stuck:
            def __len__(self): return 100
            def __getitem__(self, i):
                if i >= 1:
                    threading.Event().wait()
                return i

        it = iter(ThreadPrefetchIterDataset(MapDataset.source(Stuck()), prefetch_buffer_size=2))
        print(next(it), flush=True)
        it.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr


def test_a_stuck_read_ahead_thread_of_to_iter_dataset_does_not_hold_exit() -> None:
    script = textwrap.dedent(
        """
        import threading
        import chute

        class Stuck:
            def __len__(self): return 1000
            def __getitem__(self, i):
                if i >= 1:
                    threading.Event().wait()
                return i

        options = chute.ReadOptions(num_threads=2, prefetch_buffer_size=8, autotune=False)
        it = iter(chute.MapDataset.source(Stuck()).to_iter_dataset(options))
        print(next(it), flush=True)
        it.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr
    assert "still inside a read" in done.stderr


class Slow:
    """Every read takes a while; ``in_flight`` counts the reads started and not finished."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 100_000

    def __getitems__(self, indices: list[int]) -> list[int]:
        with self.lock:
            self.in_flight += 1
        threading.Event().wait(0.2)
        with self.lock:
            self.in_flight -= 1
        return list(indices)

    def __getitem__(self, index: int) -> int:
        return self.__getitems__([index])[0]


def test_close_waits_for_the_reads_in_flight_to_finish() -> None:
    source = Slow()
    it = iter(MapDataset.source(source).to_iter_dataset())
    next(it)
    for _ in range(3000):  # until a read ahead is in flight
        if source.in_flight:
            break
        threading.Event().wait(0.01)
    assert source.in_flight
    it.close()
    assert source.in_flight == 0  # nothing is still reading once close() returned
