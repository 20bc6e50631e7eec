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

**Idle.**  The loop's thread (and the threads that run its blocking calls) lives only
while it has work: while a source that may send requests is open (``hold``) or a
request runs.  When the last source closes, or is garbage collected, and no request
runs, the thread ends; the next request starts another.  So a program that closed its
sources has no thread of chute's left.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import itertools
import os
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
_held: set[int] = set()  # the open sources of this process that may send requests
_tokens = itertools.count()
_calls = 0  # run_on_io_loop calls of this process that have not returned
_lingering: list[_Loop] = []  # idle loops stopped while the client still held a future
_let_go_of: list[int] = []  # holds let go of, to drop from _held (see _settle)


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

        # Its blocking calls (asyncio.to_thread) run on threads that end with the loop.
        self.executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="chute-io-call")
        self.loop.set_default_executor(self.executor)
        self.thread = threading.Thread(target=serve, name="chute-io", daemon=True)
        self.thread.start()
        started.wait()

    def released(self) -> bool:
        """Whether the client's threads have let go of every future of this loop."""
        return not any(not f.released for f in list(self.loop.client_futures))

    def end(self, deadline: float, idle: bool) -> bool:
        """Stops the loop and its threads, waiting for the client to let go of its futures
        until ``deadline`` (``time.monotonic()``); whether it did (the loop is closed).
        An ``idle`` loop's blocking-call threads are waited for too (they have no work)."""
        while not self.released() and time.monotonic() < deadline:
            time.sleep(0.002)  # lets the client's threads take the GIL and leave
        released = self.released()
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.get_ident() == self.loop.thread_id:  # a finalizer on its own thread
            self.executor.shutdown(wait=False)
            return False
        self.thread.join(max(0.0, deadline - time.monotonic()))
        mine = threading.current_thread().name.startswith("chute-io-call")  # (a finalizer)
        self.executor.shutdown(wait=idle and not mine and not self.thread.is_alive())
        if released and not self.thread.is_alive():
            self.loop.close()  # else a late completion would find it closed and say so
            return True
        return False


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
    global _calls
    coroutine = make()
    with _lock:  # a request is either submitted before stop() cancels all, or refused
        if _stopped_here():
            coroutine.close()
            raise _stopped_error()
        state = _loop
        if state is None or state.made.forked():
            state = _loop = _Loop()
        done = asyncio.run_coroutine_threadsafe(coroutine, state.loop)
        _calls += 1
    try:
        return done.result()
    except concurrent.futures.CancelledError:
        if _stopped_here():
            raise _stopped_error() from None
        raise
    finally:
        with _lock:
            _calls -= 1
        _settle()


def hold(owner: object) -> Callable[[], None]:
    """Keeps the loop's thread while ``owner`` (an open source) is alive; call the result
    to let go (at ``close()``; it runs by itself when ``owner`` is garbage collected).  The
    thread ends once nothing holds it and no request runs, and starts again when needed."""
    with _lock:
        token = next(_tokens)
        _held.add(token)
    _settle()
    finalizer = weakref.finalize(owner, _let_go, token)
    finalizer.atexit = False  # at exit, stop() ends the loop
    return finalizer


def _let_go(token: int) -> None:
    _let_go_of.append(token)  # (atomic: a finalizer may run while this thread holds _lock)
    _settle()


def _settle() -> None:
    """Drops the holds let go of, and ends the loop if that left it idle.  Never waits for
    ``_lock``: a garbage collection may run a finalizer while this very thread holds it;
    whoever holds it settles when it lets go."""
    while _let_go_of:
        if not _lock.acquire(blocking=False):
            return
        try:
            while _let_go_of:
                _held.discard(_let_go_of.pop())
            idle = _take_idle()
        finally:
            _lock.release()
        if idle is not None:
            _end_idle(idle)
    if _calls == 0 and not _held and _lock.acquire(blocking=False):
        try:
            idle = _take_idle()
        finally:
            _lock.release()
        if idle is not None:
            _end_idle(idle)


def _take_idle() -> _Loop | None:
    """The loop, taken out of service, when nothing holds it and no call runs (under
    ``_lock``); a later request starts another."""
    global _loop
    if _held or _calls or _loop is None or _loop.made.forked():
        return None
    state, _loop = _loop, None
    return state


def _end_idle(state: _Loop) -> None:
    if not state.end(time.monotonic() + EXIT_WAIT_S, idle=True):
        _lingering.append(state)  # stop() waits for its futures at exit


def _after_fork() -> None:
    global _calls, _lingering
    _held.clear()  # the parent's sources: a child's copies never close them here
    _let_go_of.clear()
    _calls, _lingering = 0, []


def on_loop_thread() -> bool:
    """Whether the caller runs on an I/O loop's own thread (where it must not wait for a
    request)."""
    state = _loop
    return state is not None and threading.get_ident() == state.loop.thread_id


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
    global _loop, _stopped_why, _stopped_in, _lingering
    with _lock:
        state, _loop = _loop, None
        _stopped_why, _stopped_in = why, ForkCheck()
        lingering, _lingering = _lingering, []
    deadline = time.monotonic() + EXIT_WAIT_S
    for old in lingering:
        while not old.released() and time.monotonic() < deadline:
            time.sleep(0.002)
    if state is None or state.made.forked():
        return
    try:
        asyncio.run_coroutine_threadsafe(_cancel_all(), state.loop).result(
            max(0.0, deadline - time.monotonic())
        )
    except (concurrent.futures.TimeoutError, RuntimeError):
        pass  # a request that ignores cancellation: the wait below is bounded too
    state.end(deadline, idle=False)
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


os.register_at_fork(after_in_child=_after_fork)
