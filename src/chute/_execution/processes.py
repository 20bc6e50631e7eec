"""Starting worker processes: a fork server preloaded with chute and numpy.

Why a fork server:

* ``spawn`` starts a fresh interpreter per worker and imports numpy and chute
  in each: one to two seconds before the first batch.
* ``fork`` is fast but copies the parent as it is, threads and locks
  included; a parent running JAX, or chute's own reader threads, can
  deadlock its children.
* a fork server is started once per process, imports chute and numpy once,
  and forks every worker from that clean, single-threaded state: each
  worker costs a few milliseconds.

The pipeline travels to the worker by cloudpickle, so lambdas and closures
work.  Unlike multiprocessing's own fork server, chute's workers never
re-import the user's ``__main__`` module: a script without an
``if __name__ == "__main__":`` guard just works, and does not run again in
every worker.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import threading
import traceback
from multiprocessing import popen_forkserver, spawn
from typing import Any

import cloudpickle

_LOCK = threading.Lock()
_context: Any = None


def context() -> Any:
    """The forkserver context, its server preloaded with chute and numpy."""
    global _context
    with _LOCK:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["numpy", "cloudpickle", "chute"])
            _context = ctx
    return _context


def _without_main(prepare: Any) -> Any:
    def preparation_data(name: str) -> dict[str, Any]:
        data = prepare(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return dict(data)

    return preparation_data


class WorkerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver process that does not re-import the parent's ``__main__``."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        context()  # make sure the server gets chute's preload list
        with _LOCK:
            original = spawn.get_preparation_data
            spawn.get_preparation_data = _without_main(original)
            try:
                return popen_forkserver.Popen(process_obj)
            finally:
                spawn.get_preparation_data = original


def start(target: Any, args: tuple[Any, ...], name: str) -> WorkerProcess:
    """Starts ``target(*args)`` in a fresh worker process (daemonic)."""
    process = WorkerProcess(target=target, args=args, name=name, daemon=True)
    process.start()
    return process


def dumps(obj: Any) -> bytes:
    return cloudpickle.dumps(obj)


def exception_message(exc: BaseException) -> tuple[bytes | None, str]:
    """(the pickled exception, or None if it cannot be pickled; its traceback text)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        return cloudpickle.dumps(exc), text
    except Exception:
        return None, text


def ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the parent, which stops them by closing their pipes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_for(conn: multiprocessing.connection.Connection, process: WorkerProcess) -> bool:
    """Waits until ``conn`` has data (True) or the process has died (False)."""
    ready = multiprocessing.connection.wait([conn, process.sentinel])
    return conn in ready or conn.poll()


__all__ = ["WorkerProcess", "context", "dumps", "exception_message", "start", "wait_for"]
