"""``WorkerIterator``: a dataset iterator that runs in a worker process.

The worker iterates its dataset and sends, for every element, the element
and its iterator's state right after producing it; the parent's
``get_state()`` is therefore the state of the last element it *received*,
and a restore starts a worker from exactly there.  The parent grants the
worker credits, one per element it may produce ahead: ``buffer_size`` may
wait in the pipe while the worker makes the next one (as a Grain worker
fills its queue of ``per_worker_buffer_size`` and then holds one more), so
a worker never idles while the parent takes what it made.

An exception in the worker reaches the parent as the same exception type
with the worker's traceback in a note; the worker carries on with the
following element, as an inline iterator would.  A worker that dies (killed
by the OS, out of memory) raises ``WorkerDiedError`` at once, never a hang.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import signal
import time
import weakref
from collections.abc import Callable
from typing import Any

from chute._core import metrics
from chute._core.errors import WorkerDiedError, add_note, closed_error
from chute._execution import (
    processes,
    shutdown,
    unpicklable,
    worker_errors,
    worker_loop,
    worker_seeds,
)
from chute._execution.transport import RingReader
from chute._execution.worker import Worker
from chute._execution.worker_loop import END, FAILED, READY, REFUSED, worker_main

logger = logging.getLogger("chute")

__all__ = ["WorkerIterator", "WorkerDiedError"]  # WorkerDiedError: its old home, still importable


# How long a closed worker may take to leave before it is killed.  close() does not wait
# for the element in the making (no one wants it): it tells the worker to stop now
# (SIGTERM, see worker_loop), which ends whatever wait the worker is in (a read from a
# store that stopped answering, a sleep, a lock) and lets it clean up within milliseconds.
# Only a worker stuck in native code that never returns to Python takes the whole grace.
STOP_GRACE_S = 0.5


def _stop(process: Any, pipes: list[Any], reader: RingReader, deadline: list[float]) -> None:
    for conn in pipes:
        conn.close()
    _interrupt(process)
    process.join(
        timeout=max(0.0, (deadline[0] or time.monotonic() + STOP_GRACE_S) - time.monotonic())
    )
    if process.is_alive():
        logger.warning(
            "chute: %s did not stop within %.1f s of close() (it is stuck inside native "
            "code that does not return, e.g. a read that never returns); it was killed.",
            process.name,
            STOP_GRACE_S,
        )
        process.kill()
        process.join(timeout=5)
    reader.close()
    metrics.forget(process.pid)  # its gauges; what it counted stays counted


def _interrupt(process: Any) -> None:
    """Tells a worker to stop now, whatever it is doing (SIGTERM: see ``worker_loop``)."""
    try:
        if process.is_alive():
            process.terminate()
    except (OSError, ValueError):  # it is gone already
        pass


class WorkerIterator(Worker):
    """Iterates ``dataset`` in a worker process (worker ``index`` of ``count``).

    ``seed`` seeds the worker's global random generators (``random``, NumPy's,
    torch's if imported); by default a fresh one (see ``worker_seeds``).  A
    worker started at a saved state (restored, or restarted after it died)
    seeds them from ``seed`` and that state instead, so a restarted worker does
    not replay the draws it made before.  ``stack_batches(dataset, leaves_fn)``,
    when given, lets the worker stack its batches' arrays straight into shared
    memory (see ``worker_loop``).
    """

    _stage = "remote"

    def __init__(
        self,
        dataset: Any,
        *,
        index: int = 0,
        count: int = 1,
        buffer_size: int = 1,
        worker_init_fn: Any = None,
        state: dict[str, Any] | None = None,
        seed: int | None = None,
        restart: bool = False,
        stack_batches: Callable[[Any, Callable[[list[Any]], Any]], Any] | None = None,
    ) -> None:
        if seed is None:
            seed = worker_seeds.worker_seed(worker_seeds.base_seed(None, 0), index)
        super().__init__(index=index, count=count, seed=seed, restart=restart)
        self._dataset = dataset
        self._credit_count = max(1, buffer_size) + 1  # buffer_size waiting + one in the making
        self._init_fn, self._stack_batches = worker_init_fn, stack_batches
        self._start(state)

    def _launch(self, state: dict[str, Any] | None) -> None:
        receive, send = multiprocessing.Pipe(duplex=False)
        credit_in, credit_out = multiprocessing.Pipe(duplex=False)
        processes.keep_out_of_children(receive, credit_out)
        method = processes.start_method()
        job: Any = (self._dataset, state, self._init_fn, self._stack_batches)
        if method != "fork":
            job = self._pickled(job)
        self._ring = RingReader()
        self.start_method = method
        with worker_loop.stop_signal_held():
            self._process = processes.start(
                worker_main,
                (
                    job,
                    send,
                    credit_in,
                    self._index,
                    self._count,
                    self._ring.prefix,
                    worker_seeds.resumed_seed(self._seed, state),
                ),
                name=f"chute-worker-{self._index}",
                method=method,
            )
        send.close()
        credit_in.close()
        self._results, self._credits = receive, credit_out
        self._stop_deadline = [0.0]  # set by begin_stop(); 0: none yet
        self._finalizer = weakref.finalize(
            self, _stop, self._process, [receive, credit_out], self._ring, self._stop_deadline
        )
        shutdown.on_terminate(self._finalizer)  # SIGTERM stops the worker as exit would
        shutdown.install()
        try:
            for _ in range(self._credit_count):
                self._credits.send_bytes(b"1")
        except OSError:  # the worker could not start and is gone: the next read says why
            pass

    def _pickled(self, job: tuple[Any, ...]) -> bytes:
        """The job pickled for the fork server, or the error naming what cannot be pickled."""
        try:
            return processes.dumps(job)
        except Exception as exc:
            why = processes.fork_unsafe_reason() or f"{processes.START_ENV}=forkserver"
            what = unpicklable.culprit(self._dataset, self._init_fn)
            add_note(
                exc,
                f"chute: the pipeline of worker {self._index} must be pickled for the fork "
                f"server, because this process cannot fork its workers now ({why}); "
                + (f"{what}, which cannot be pickled. " if what else "")
                + "Create such objects (locks, open files, connections) inside the function "
                "that uses them, e.g. lazily on first call, or in worker_init_fn, which runs "
                "in each worker; not in the code that builds the pipeline.",
            )
            raise

    def _receive(self) -> tuple[str, Any, dict[str, Any]]:
        message = self._receive_one()
        if message[0] == READY:
            self._state_now = message[2]
            message = self._receive_one()
        return message

    def _receive_one(self) -> tuple[str, Any, dict[str, Any]]:
        if self._closed:
            raise closed_error("WorkerIterator")
        if not processes.wait_for(self._results, self._process):
            raise self._died()
        try:
            data = self._results.recv_bytes()
        except EOFError:
            raise self._died() from None
        message = self._ring.decode(data[1:]) if data[:1] == b"R" else pickle.loads(data[1:])
        if message[0] == FAILED:
            raise self._failed(message[1])
        if len(message) > 3:  # the worker's statistics and metrics ride along (worker_loop)
            if message[3] is not None:
                self._stats = message[3]
            if len(message) > 4:
                metrics.merge(message[4], source=self._process.pid)
            message = message[:3]
        return message

    def _failed(self, report: worker_errors.Report) -> BaseException:
        """The error of a worker that could not start, with the worker's error in its notes."""
        who = f"chute worker {self._index} of {self._count}"
        needs = "picklable and importable in a fresh process"
        return worker_errors.could_not_start(report, self._index, self._count, who, needs)

    def _died(self, why: str = "") -> WorkerDiedError:
        self._process.join(timeout=1)
        code = self._process.exitcode
        how = why or (
            "stopped before its share ended (exit code 0: something other than this iterator "
            "sent it SIGTERM)"
            if code == 0
            else f"died with exit code {code} (a negative code is the signal that killed it, "
            "e.g. -9 when the system ran out of memory)"
        )
        return WorkerDiedError(
            f"chute worker {self._index} of {self._count} (pid {self._process.pid}) {how}. "
            "Restore the last state to go on."
        )

    def _delivered(self, kind: str) -> None:
        if kind == END:
            return
        try:
            self._credits.send_bytes(b"1")
        except OSError:  # the worker is gone: this element is good, the next receive says so
            pass

    def _restart_report(self, exc: WorkerDiedError) -> tuple[str, str]:
        code = self._process.exitcode
        how = f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
        return f"worker {self._index} of {self._count}", how

    def _first_state(self) -> dict[str, Any]:
        state: dict[str, Any] = self._receive_one()[2]  # the worker's READY message
        return state

    def _alive(self) -> bool:
        return bool(self._process.is_alive())

    def _discard(self) -> None:
        # Replaced before it delivered anything: nothing it holds is wanted, and a graceful
        # stop would first finish the reads in flight on its pipeline's threads (a Parquet
        # file opening, say), on the cores the new worker needs.  Its ring goes with it.
        try:
            self._process.kill()
        except (OSError, ValueError):  # gone already
            pass
        self._finalizer()

    def _starts_cheaply(self) -> bool:
        return self.start_method == "fork"  # the fork server unpickles and imports again

    def _moved(self) -> None:
        for _ in range(self._credit_count):
            self._credits.send_bytes(b"1")

    def _stop_now(self) -> None:
        self._finalizer()

    def _move_to(self, state: Any) -> worker_errors.Report | None:
        """Sends the worker to ``state``, dropping what it made ahead; the worker's error
        where its pipeline refused the state (it then stays where it was, elements ahead
        dropped: the caller moves it back)."""
        self._credits.send_bytes(pickle.dumps(state, protocol=5))
        while (message := self._receive_one())[0] not in (READY, REFUSED):
            pass  # elements the worker made ahead from the old position
        self._state_now, self._ended = message[2], False
        return message[1] if message[0] == REFUSED else None

    @property
    def buffer_size(self) -> int:
        """Elements the worker may have made and waiting, beyond the one it is making."""
        return self._credit_count - 1

    def ready(self) -> bool:
        """Whether the worker's next message has arrived (never waits)."""
        try:
            return self._closed or self._ended or self._results.poll()
        except OSError:  # closed under us: the next read says why
            return True

    def grant(self, extra: int) -> None:
        """Lets the worker make ``extra`` more elements ahead, from now on (restarts too)."""
        self._credit_count += extra
        try:
            for _ in range(extra):
                self._credits.send_bytes(b"1")
        except OSError:  # the worker is gone: the next read says so
            pass

    def begin_stop(self) -> None:
        """Tells the worker to stop (its pipes close) without waiting for it; ``close()``
        waits for each only until a deadline shared by all the workers told."""
        if not self._closed and not self._stop_deadline[0]:
            self._stop_deadline[0] = time.monotonic() + STOP_GRACE_S
            for conn in (self._credits, self._results):
                conn.close()
            _interrupt(self._process)
