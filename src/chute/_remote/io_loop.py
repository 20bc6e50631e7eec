"""The process's I/O loop: one event loop, on a daemon thread, for every object-store request.

``run_on_io_loop(make)`` runs the coroutine ``make()`` there and waits for its result, from
any thread, inside a running event loop too (a notebook, an async program): reads, writes
and deletes all come here, so none of them makes an event loop of its own.

**Exit.** obstore completes each request's future from one of its own threads (tokio's),
which enters the interpreter to hand the result over.  If the interpreter starts to
finalise while such a thread is inside (waiting for the GIL), CPython ends that thread
with ``pthread_exit``, which cannot unwind through its Rust frames: the process aborts
(``Fatal Python error: Aborted``), even after a clean run.  So at exit, after the
program's own threads have ended and before the read-ahead pools wait for their reads,
``stop()`` cancels every request in flight, waits (``EXIT_WAIT_S`` at most) until obstore's
threads have let go of every future they were handed (each future says so, see
``ClientFuture``), stops the loop and drops the stores.  Requests after that raise.
A worker process does the same when it is told to stop, and at its own exit.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from chute._core.fork import ForkCheck

T = TypeVar("T")

EXIT_WAIT_S = 1.0  # how long stop() waits for requests to end and obstore to let go of them

_lock = threading.Lock()
_loop: _Loop | None = None  # this process's loop, while it runs
_stopped_why = ""  # set by stop(): later requests raise, naming it
_stopped_in: ForkCheck | None = None  # the process stop() was called in
_on_stop: list[Callable[[], None]] = []


class ClientFuture(asyncio.Future[Any]):
    """A future of the I/O loop; ``released`` once the client's thread is done with it.

    obstore's thread either asks ``cancelled()`` (and, finding it cancelled, leaves) or
    completes the future through ``call_soon_threadsafe`` (see ``_IOLoop``): the flag is
    set as the very last step of either, so a thread that set it never waits for the
    GIL again on this future's behalf.
    """

    released = False

    def cancelled(self) -> bool:
        cancelled = super().cancelled()
        if cancelled and threading.get_ident() != self.get_loop().thread_id:  # type: ignore[attr-defined]
            self.released = True  # the client's thread saw the cancellation: it leaves now
        return cancelled


class _IOLoop(asyncio.SelectorEventLoop):
    """The loop whose futures say when the client's threads are done with them."""

    thread_id = 0  # the loop's own thread, once it runs

    def __init__(self) -> None:
        super().__init__()
        self.client_futures: weakref.WeakSet[ClientFuture] = weakref.WeakSet()  # see client()

    def create_future(self) -> ClientFuture:
        return ClientFuture(loop=self)

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        handle = super().call_soon_threadsafe(callback, *args, context=context)
        for arg in args:
            if type(arg) is ClientFuture:
                arg.released = True  # last: only returning to the client remains
                return handle
        return handle


class _Loop:
    def __init__(self) -> None:
        self.made = ForkCheck()
        self.loop = _IOLoop()
        started = threading.Event()

        def serve() -> None:
            self.loop.thread_id = threading.get_ident()
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, name="chute-io", daemon=True)
        self.thread.start()
        started.wait()


def run_on_io_loop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Runs the coroutine ``make()`` on this process's I/O loop and waits for its result.

    One event loop, on a daemon thread named ``chute-io`` started on first use, serves
    every obstore request of the process: the threads that read shards at once share it,
    instead of each making, running and closing a loop of its own for every batch (which
    cost about a fifth of the client's time per request).  A forked child starts its own.

    Raises:
        RuntimeError: the loop was stopped (the interpreter is exiting, or this worker
            process is stopping), before or while the request ran.
    """
    global _loop
    if threading.main_thread().is_alive():  # not yet exiting: see _stop_at_exit
        atexit.unregister(_stop_at_exit)
        atexit.register(_stop_at_exit)
    coroutine = make()
    with _lock:  # a request is either submitted before stop() cancels all, or refused
        if _stopped_here():
            coroutine.close()
            raise _stopped_error()
        state = _loop
        if state is None or state.made.forked():
            state = _loop = _Loop()
        done = asyncio.run_coroutine_threadsafe(coroutine, state.loop)
    try:
        return done.result()
    except concurrent.futures.CancelledError:
        if _stopped_here():
            raise _stopped_error() from None
        raise


def client(future: Any) -> Any:
    """Marks ``future``, which the object-store client completes from its own thread, so that
    ``stop()`` waits until that thread is done with it; returns it (to be awaited)."""
    if type(future) is ClientFuture:
        future.get_loop().client_futures.add(future)  # type: ignore[attr-defined]
    return future


def on_stop(callback: Callable[[], None]) -> None:
    """Runs ``callback`` (dropping cached clients, say) each time the loop stops."""
    _on_stop.append(callback)


def stop(why: str = "the interpreter is exiting") -> None:
    """Stops this process's I/O loop for good: requests in flight are cancelled, and later
    ones raise ``RuntimeError`` naming ``why``.

    Returns once obstore's threads have let go of every request (``EXIT_WAIT_S`` at most).
    """
    global _loop, _stopped_why, _stopped_in
    with _lock:
        state, _loop = _loop, None
        _stopped_why, _stopped_in = why, ForkCheck()
    if state is None or state.made.forked():
        return
    deadline = time.monotonic() + EXIT_WAIT_S
    try:
        asyncio.run_coroutine_threadsafe(_cancel_all(), state.loop).result(
            max(0.0, deadline - time.monotonic())
        )
    except (concurrent.futures.TimeoutError, RuntimeError):
        pass  # a request that ignores cancellation: the wait below is bounded too
    futures = state.loop.client_futures
    while any(not f.released for f in list(futures)) and time.monotonic() < deadline:
        time.sleep(0.002)  # lets the client's threads take the GIL and leave
    released = not any(not f.released for f in list(futures))
    state.loop.call_soon_threadsafe(state.loop.stop)
    state.thread.join(max(0.0, deadline - time.monotonic()))
    if released and not state.thread.is_alive():
        state.loop.close()  # else a late completion would find it closed and say so
    for callback in _on_stop:
        callback()


async def _cancel_all() -> None:
    me = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _stopped_here() -> bool:
    """Whether ``stop()`` was called in this process (a forked child may start a loop)."""
    return _stopped_in is not None and not _stopped_in.forked()


def _stopped_error() -> RuntimeError:
    return RuntimeError(
        f"chute's object-store requests have stopped in this process: {_stopped_why}."
    )


def _stop_at_exit() -> None:
    """At interpreter exit, after the program's threads have ended (atexit), and before the
    read-ahead pools wait for their reads: ``run_on_io_loop`` registers this again at each
    call, so it runs first among chute's exit handlers (atexit runs the last one first)."""
    stop(
        "the interpreter is exiting (read and write buckets before the program ends, "
        "not in atexit handlers)"
    )
