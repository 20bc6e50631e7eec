"""The worker process's side of ``WorkerIterator``: load the pipeline, then serve credits.

One message goes back per credit: ``ITEM`` (an element), ``ERROR`` (the
element's exception, reported by ``worker_errors``), or ``END``, each with
the iterator's state right after it; ``READY`` with the state after a start
or a restore; ``REFUSED`` when a restore failed (the error, and the state the
worker is in now: the parent moves it back); ``FAILED`` when the worker cannot
start.  A message may carry two more fields: the worker's statistics
(``chute._stats``, when they are tracked and due, else ``None``) and the changes of its
metrics (``chute._core.metrics``: at most once a second, and always with ``END``).
Messages starting
with ``b"R"`` are ``RingWriter`` messages (large arrays in shared memory),
``b"P"`` plain pickles.

SIGTERM (what the parent's ``close()`` sends) stops the worker at once: the handler
raises ``WorkerStopped`` in the worker's main thread, which ends whatever wait it is in
(a read from a store that stopped answering, a sleep, a lock); the object-store requests
in flight are cancelled, the pipeline is closed and the worker exits with status 0.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import pickle
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np

from chute._core import metrics, nesting, tree
from chute._execution import processes, tuning, worker_errors, worker_seeds
from chute._execution.transport import RING_MIN_BYTES, RingWriter

__all__ = [
    "END",
    "ERROR",
    "FAILED",
    "ITEM",
    "READY",
    "REFUSED",
    "WorkerStopped",
    "plain",
    "worker_main",
]

ITEM, ERROR, END, READY, FAILED = "item", "error", "end", "ready", "failed"
REFUSED = "refused"


class WorkerStopped(SystemExit):
    """The parent told the worker to stop (SIGTERM); it leaves the element it was making."""


@contextlib.contextmanager
def stop_signal_held() -> Iterator[None]:
    """Holds SIGTERM back in this thread while it starts a worker: the worker inherits the
    mask (a forked one would otherwise run this process's own SIGTERM handler) and lets
    the signal through once its handler is installed."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


_stop_asked = False  # SIGTERM came: a WorkerStopped that a finalizer swallowed still counts


def _stop_now(signum: int, frame: Any) -> None:
    global _stop_asked
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the cleanup that follows runs whole
    _stop_asked = True
    raise WorkerStopped(0)


def _quiet_about_stops(report: Any, hook: Any = sys.unraisablehook) -> None:
    """Python prints an exception raised inside a finalizer (``weakref.finalize``, ``__del__``)
    and goes on; when that exception is the stop signal, the worker stops at its next
    element instead (``_serve``), without the traceback."""
    if not isinstance(report.exc_value, WorkerStopped):
        hook(report)


def _stop_requests() -> None:
    """Cancels the object-store requests in flight (their reads raise at once), so that
    closing the pipeline does not wait for a store that stopped answering."""
    io_loop = sys.modules.get("chute._remote.io_loop")  # not imported: no request was made
    if io_loop is not None:
        io_loop.stop("this worker process was told to stop")


def plain(message: tuple[Any, ...]) -> bytes:
    return b"P" + pickle.dumps(message, protocol=5)


def worker_main(
    job: bytes | tuple[Any, Any, Any, Any],
    results: Any,
    credits: Any,
    index: int,
    count: int,
    ring: str,
    seed: int,
) -> None:
    """The worker's loop: one credit in, one element (or error, or end) out.

    ``job`` is ``(dataset, state, init_fn, stack_batches)``, pickled when the
    worker did not fork from the parent (``stack_batches``: see
    ``_batches_in_ring``).  The global random generators are seeded from
    ``seed`` once the pipeline is loaded (it may import torch), before
    ``init_fn`` runs (it may seed them again).
    """
    processes.ignore_interrupts()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_now)
        sys.unraisablehook = _quiet_about_stops
        if hasattr(signal, "pthread_sigmask"):  # held back while this worker started
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    processes.keep_freed_memory()
    tuning.in_worker_process()
    try:
        writer = RingWriter(ring)
        dataset, state, init_fn, stack_batches = (
            cloudpickle.loads(job) if isinstance(job, bytes) else job
        )
        dataset = _batches_in_ring(dataset, writer, stack_batches)
        worker_seeds.seed_globals(seed)
        if init_fn is not None:
            init_fn(index, count)
        nesting.forget_nesting()  # forked inside the parent's iter(): this one is outermost
        it = iter(dataset)
        if state is not None:
            it.set_state(state)
    except Exception as exc:  # report why this worker cannot start, then stop
        worker_errors.explain_import(exc)
        try:
            results.send_bytes(plain((FAILED, worker_errors.report(exc), {})))
        except OSError:
            pass  # the parent is gone already (another worker's failure ended it)
        return

    def send(message: tuple[Any, ...]) -> None:
        try:
            data = b"R" + writer.encode(message)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError):
            try:
                data = b"P" + cloudpickle.dumps(message)  # what plain pickle cannot carry
            except Exception as exc:  # the element cannot cross: it becomes its error
                error = worker_errors.unpicklable_element(message[1], exc, it)
                data = plain((ERROR, worker_errors.report(error), message[2]))
        results.send_bytes(data)

    # Statistics (when on) and metrics ride along with a message now and then.
    send = functools.partial(_with_reports, send, getattr(it, "_chute_stats", None))
    try:
        send((READY, None, it.get_state()))
        _serve(it, credits, send)
    except (EOFError, BrokenPipeError, OSError, WorkerStopped) as exc:
        if isinstance(exc, WorkerStopped):
            _stop_requests()
        writer.sweep()  # the parent is gone or stopped us: leave no slot behind
        return
    finally:
        it.close()
        writer.close()


def _batches_in_ring(dataset: Any, writer: RingWriter, stack_batches: Any) -> Any:
    """The worker's pipeline, stacking its batches' large array leaves into the ring.

    ``stack_batches(dataset, leaves_fn)`` (given by whoever built the job, which
    knows its stages; ``None``: no such rewrite) returns the pipeline whose
    batches combine each group of leaves with ``leaves_fn``; here that stacks
    them straight into reserved shared memory, so a batch crosses to the
    parent without an intermediate copy.
    """
    if stack_batches is None:
        return dataset
    return stack_batches(dataset, functools.partial(_stack_here, threading.get_ident(), writer))


def _stack_here(thread: int, writer: RingWriter, leaves: list[Any]) -> Any:
    """Stacks ``leaves`` into the ring on the thread that sends the elements (``thread``);
    a batch made on a thread reading ahead is stacked as usual, since the ring is not
    thread-safe and the batch is not the next one sent."""
    if threading.get_ident() != thread:
        return tree.stack(leaves)
    return _stack_in_ring(writer, leaves)


def _stack_in_ring(writer: RingWriter, leaves: list[Any]) -> Any:
    first = leaves[0]
    if (
        isinstance(first, np.ndarray)
        and first.dtype != object
        and first.nbytes * len(leaves) >= RING_MIN_BYTES
        and all(isinstance(x, np.ndarray) and x.dtype == first.dtype for x in leaves)
    ):
        slot, view = writer.reserve((len(leaves), *first.shape), first.dtype)
        try:
            np.stack(leaves, out=view)
        except ValueError:
            return tree.stack(leaves)  # different shapes: the usual error
        return slot
    return tree.stack(leaves)


def _with_reports(send: Any, stats: Any, message: tuple[Any, ...]) -> None:
    """Sends ``message``, with this worker's statistics (``stats``: None when untracked) and
    the changes of its metrics, each when due and at the end."""
    end = message[0] == END
    report = stats.report() if stats is not None and (stats.due or end) else None
    changed = metrics.changes() if end or metrics.due() else None
    if changed is not None:
        message = (*message, report, changed)
    elif report is not None:
        message = (*message, report)
    send(message)


def _next_command(credits: Any, queued: collections.deque[bytes]) -> bytes:
    """The next command from the parent: a credit (``b"1"``) or a state to move to.

    Credits waiting in front of a state are dropped: the elements they ask for are of
    the old position, which the parent drops too (it grants a full set again after the
    move), so the worker moves as soon as the element in the making is done, not after
    every element it was granted.  The parent sends a state only after the last one
    was answered, so at most one waits.
    """
    if not queued:
        queued.append(credits.recv_bytes())
    while credits.poll():
        queued.append(credits.recv_bytes())
    for i, command in enumerate(queued):
        if command != b"1":
            for _ in range(i):
                queued.popleft()
            break
    return queued.popleft()


def _serve(it: Any, credits: Any, send: Any) -> None:
    queued: collections.deque[bytes] = collections.deque()
    while command := _next_command(credits, queued):
        if _stop_asked:  # the stop signal was swallowed by a finalizer it interrupted
            raise WorkerStopped(0)
        if command != b"1":  # a new state to start from
            try:
                it.set_state(pickle.loads(command))
            except Exception as exc:  # the parent raises it and moves this worker back
                send((REFUSED, worker_errors.report(exc), it.get_state()))
                continue
            send((READY, None, it.get_state()))
            continue
        try:
            x = next(it)
        except StopIteration:  # stay alive: the parent may rewind us for another epoch
            send((END, None, it.get_state()))
            continue
        except Exception as exc:
            send((ERROR, worker_errors.report(exc), it.get_state()))
            continue
        send((ITEM, x, it.get_state()))
