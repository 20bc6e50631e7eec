"""``Worker``: one worker of a pool, whatever runs it, and the algorithm every kind shares.

A worker iterates its share of a pipeline somewhere else (a local process:
``WorkerIterator``; a Ray actor: ``RayWorkerIterator``) and hands this process
its elements in order, each with the state its pipeline had right after making
it.  This class is the contract the pool and the statistics rely on, and it
holds what does not depend on where the worker runs:

* ``next()`` delivers the next element; a worker's own error arrives as the
  same exception type with the worker's traceback in a note, and the next call
  goes on.  A worker that dies is started again from the last element it
  delivered when ``restart`` is on (``MAX_RESTARTS`` times in a row at most);
* ``get_state()`` is the state right after the last element delivered;
* ``set_state()`` moves the live worker; a state its pipeline refuses moves it
  back where it was, and the pipeline's error is raised.  A worker that has delivered
  nothing since it started (a restore right after ``iter()``) and is cheap to start
  (``_starts_cheaply``: a forked process) is started again at the state instead: a move
  waits for the elements it is making from its old start, which nobody wants;
* ``ready()``, ``buffer_size`` and ``grant()`` let the pool size its buffer;
  ``begin_stop()`` then ``close()`` stop a pool's workers in parallel.

A kind of worker says only how it starts (``_launch``), how a message travels
(``_receive``, ``_move_to``, ``_delivered``, ``_moved``), how it stops
(``_stop_now``) and how it tells of a death (``_died``, ``_restart_report``).
"""

from __future__ import annotations

import abc
from typing import Any

from chute._core.errors import WorkerDiedError, closed_error
from chute._core.iterator import DatasetIterator
from chute._execution import worker_errors
from chute._execution.worker_loop import END, ERROR

__all__ = ["Worker"]


class Worker(DatasetIterator[Any]):
    """Worker ``index`` of ``count`` of a pool; ``seed`` seeds its global generators."""

    _stats: dict[str, Any] | None = None  # the figures the worker last sent, when it tracks

    def __init__(self, *, index: int, count: int, seed: int, restart: bool) -> None:
        super().__init__()
        self._index, self._count, self._seed = index, count, seed
        self._restart, self._restarts = restart, 0
        self._state_now: dict[str, Any] | None = None  # after the last element delivered
        self._launched_with: dict[str, Any] | None = None  # where the worker last started
        self._fallback: dict[str, Any] | None = None  # where start_anew found it started
        self._fresh = False  # started and delivered nothing since
        self._ended = False

    @property
    def stats(self) -> dict[str, Any] | None:
        """The statistics the worker last sent (None when its pipeline keeps none)."""
        return self._stats

    # -- what a kind of worker provides ----------------------------------------------

    @abc.abstractmethod
    def _launch(self, state: dict[str, Any] | None) -> None:
        """Starts the worker at ``state`` (None: the start of its share)."""

    @abc.abstractmethod
    def _receive(self) -> tuple[str, Any, Any]:
        """The worker's next message ``(kind, value, state)``; ``WorkerDiedError`` if it died."""

    @abc.abstractmethod
    def _first_state(self) -> dict[str, Any]:
        """Waits for the state the worker started at."""

    @abc.abstractmethod
    def _move_to(self, state: Any) -> worker_errors.Report | None:
        """Sends the worker to ``state``, dropping what it made ahead; the worker's error
        where its pipeline refused the state (it then stays where it was)."""

    @abc.abstractmethod
    def _stop_now(self) -> None:
        """Stops the worker at once (no wait for what it is making)."""

    @abc.abstractmethod
    def _died(self, why: str = "") -> WorkerDiedError:
        """The error of a worker that died (``why``, where the kind does not tell itself)."""

    @abc.abstractmethod
    def _restart_report(self, exc: WorkerDiedError) -> tuple[str, str]:
        """Who died and how, for the restart's warning; prepares the worker's restart."""

    def _delivered(self, kind: str) -> None:
        """Called after each message taken by ``next()`` (a kind may ask for the next)."""

    def _moved(self) -> None:
        """Called after ``set_state()`` moved the live worker (a kind may ask for more)."""

    def _alive(self) -> bool:
        """False when the worker is known dead before ``set_state()`` moves it."""
        return True

    def _discard(self) -> None:
        """Stops a worker whose work nobody wants (``start_anew``); a kind may skip the
        graceful part of its stop."""
        self._stop_now()

    def _starts_cheaply(self) -> bool:
        """Whether starting the worker again costs less than the elements it makes ahead
        (a forked process: yes; a Ray actor: no)."""
        return False

    def _where(self) -> str | None:
        """The node the worker runs on, for the notes of its errors (None: this host)."""
        return None

    def _may_restart(self, exc: WorkerDiedError) -> bool:
        """Whether a worker that died is started again from its last element."""
        return self._restart and self._restarts < worker_errors.MAX_RESTARTS

    def _lost_while_moving(self, state: dict[str, Any], exc: Exception) -> None:
        """``set_state()`` found the worker dead (``exc``): raises, or restarts it at ``state``."""
        if isinstance(exc, WorkerDiedError):
            raise exc
        raise self._died() from exc

    @property
    @abc.abstractmethod
    def buffer_size(self) -> int:
        """Elements the worker may have made and waiting, beyond the one it is making."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether the worker's next element has arrived (never waits)."""

    @abc.abstractmethod
    def grant(self, extra: int) -> None:
        """Lets the worker make ``extra`` more elements ahead, from now on (restarts too)."""

    @abc.abstractmethod
    def begin_stop(self) -> None:
        """Tells the worker to stop without waiting for it; ``close()`` then waits.

        Closing many workers, call this on each first: they then stop in parallel.
        """

    # -- the algorithm every kind shares ---------------------------------------------

    def _start(self, state: dict[str, Any] | None) -> None:
        """Starts the worker at ``state``; nothing delivered yet."""
        self._launched_with, self._state_now, self._ended = state, None, False
        self._fresh = True
        self._launch(state)

    def __next__(self) -> Any:
        if self._closed:
            raise closed_error(type(self).__name__)
        if self._ended:
            raise StopIteration
        try:
            kind, value, state = self._receive()
            self._fresh = False
        except WorkerDiedError as exc:
            if not self._may_restart(exc):
                raise
            self._relaunch(exc)
            return next(self)
        self._state_now, self._restarts = state, 0
        self._delivered(kind)
        if kind == END:
            self._ended = True
            raise StopIteration
        if kind == ERROR:
            raise worker_errors.rebuild(value, self._index, self._count, self._where())
        return value

    def _relaunch(self, exc: WorkerDiedError) -> None:
        """Starts the dead worker again from the last element it delivered."""
        self._restarts += 1
        who, how = self._restart_report(exc)
        worker_errors.warn_restart(who, how, self._restarts)
        resume_at = self._state_now if self._state_now is not None else self._launched_with
        self._stop_now()
        self._start(resume_at)

    def get_state(self) -> dict[str, Any]:
        state = self._state_now
        if state is None:
            state = self._state_now = self._first_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the worker to ``state``; a live worker is reused, not restarted, unless it
        has delivered nothing yet and starts cheaply (``may_start_anew``)."""
        if self._closed:
            raise closed_error(type(self).__name__)
        if not self._alive():
            self._stop_now()
            self._start(state)
            return
        if self.may_start_anew():
            self.start_anew(state)
            self.confirm_start()
            return
        try:
            before, ended = self.get_state(), self._ended
            refused = self._move_to(state)
            stuck = refused is not None and self._move_to(before) is not None
            if refused is not None:  # the pipeline refused it: back where it was
                self._ended = ended
            self._moved()
        except (OSError, WorkerDiedError) as exc:  # it died before or while it moved
            self._lost_while_moving(state, exc)
            return
        if stuck:  # cannot happen: the worker made ``before`` itself
            raise self._died("it refused a state it had made itself")
        if refused is not None:
            raise worker_errors.rebuild(refused, self._index, self._count, self._where())

    # -- a restore before the first element: a fresh start ----------------------------

    def may_start_anew(self) -> bool:
        """Whether a restore starts this worker again at the state instead of moving it:
        it has delivered nothing since it started (so what it is making is not wanted) and
        starts cheaply."""
        return not self._closed and self._fresh and self._starts_cheaply() and self._alive()

    def start_anew(self, state: dict[str, Any]) -> None:
        """Stops the worker and starts it at ``state``; ``confirm_start()`` then waits for it.

        A pool restoring several workers calls this on each first, so they start together.
        """
        self._fallback = self._launched_with
        self._discard()
        self._start(state)

    def confirm_start(self) -> None:
        """Waits for the worker ``start_anew`` started; a state its pipeline refused starts
        it back where it was, and the pipeline's error is raised (as a refused move)."""
        try:
            self._state_now = self._first_state()
        except WorkerDiedError as exc:
            refused = getattr(exc, "worker_exception", None)
            if refused is None:  # it died: not the state's fault
                raise
            self._stop_now()
            self._start(self._fallback)
            raise refused from None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._stop_now()
