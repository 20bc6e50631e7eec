"""``DaemonPool``: the read-ahead thread pool, which never keeps the interpreter from exiting.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the
interpreter exits, so one read that never returns (a stuck network file
system, a source that blocks) hangs the program's exit forever.  This pool
has the same ``submit``/``shutdown`` calls, but its threads are daemons: at
exit chute waits for the reads in flight (10 s at most, all pools together, so
that a thread is not left inside a native library while it shuts down) and
then lets the interpreter go, saying on the ``chute`` logger which threads it
left.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

_EXIT_WAIT_S = 10.0
_busy: weakref.WeakKeyDictionary[threading.Thread, DaemonPool] = weakref.WeakKeyDictionary()
_pools: weakref.WeakSet[DaemonPool] = weakref.WeakSet()
logger = logging.getLogger("chute")


class DaemonPool:
    """Runs submitted calls on up to ``max_workers`` daemon threads named ``prefix_N``.

    Args:
      max_workers: the most threads.
      thread_name_prefix: the threads' names start with it.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "chute-pool") -> None:
        self._max, self._prefix = max(1, max_workers), thread_name_prefix
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False
        # atexit runs the last registered handler first: the wait then comes before the
        # exit handlers of libraries imported earlier (a read may be inside one of them).
        atexit.unregister(_wait_for_reads_in_flight)
        atexit.register(_wait_for_reads_in_flight)
        _pools.add(self)

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Runs ``fn(*args)`` on a pool thread; its future holds the result or the error."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a DaemonPool after shutdown()")
            self._tasks.put((future, fn, args))
            if self._idle == 0 and len(self._threads) < self._max:
                thread = threading.Thread(
                    target=_work,
                    args=(self._tasks, self),
                    name=f"{self._prefix}_{len(self._threads)}",
                    daemon=True,
                )
                thread.start()  # listed once started: an interrupted start leaves no thread to join
                self._threads.append(thread)
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def shutdown(
        self, wait: bool = False, cancel_futures: bool = False, timeout: float | None = None
    ) -> None:
        """Stops the threads once they finish their call; queued calls are cancelled if asked.

        With ``wait``, returns when the threads have stopped, or after ``timeout`` seconds.
        """
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._tasks.put(None)
        if wait:
            deadline = None if timeout is None else time.monotonic() + timeout
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _now_idle(self) -> None:
        with self._lock:
            self._idle += 1


def _work(tasks: queue.SimpleQueue[Any], pool: DaemonPool) -> None:
    me = threading.current_thread()
    while True:
        item = tasks.get()
        if item is None:
            return
        future, fn, args = item
        if not future.set_running_or_notify_cancel():
            continue
        _busy[me] = pool
        try:
            result = fn(*args)
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)
        finally:
            _busy.pop(me, None)
        del future, fn, args, item
        pool._now_idle()


def _wait_for_reads_in_flight() -> None:
    threads = []
    for pool in list(_pools):  # every thread stops after its read, as a normal exit would
        pool.shutdown(cancel_futures=True)
        threads += pool._threads
    deadline = time.monotonic() + _EXIT_WAIT_S
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = sorted(t.name for t in list(_busy) if t.is_alive())
    if stuck:
        logger.warning(
            "chute: at exit, read-ahead threads %s were still inside a read (a source that "
            "never returns?); the interpreter exits without them.",
            ", ".join(stuck),
        )
