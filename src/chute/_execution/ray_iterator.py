"""``RayWorkerIterator``: ``WorkerIterator``'s twin whose worker is a Ray actor.

The same contract as a local worker (see ``worker_process``): the parent's
``get_state()`` is the state right after the last element it delivered, an
exception in the pipeline arrives as its own type with the worker's
traceback and the next call goes on, a restore moves the live worker.  What
differs is the transport: elements come back as the results of the actor's
``take`` calls (``ray_worker``), through Ray's object store, and the calls in
flight are the credits: at most ``buffer_size + 1`` calls, each of a bounded
size, so a slow consumer never fills the store.

An actor that dies (its process killed, its node gone) raises Ray's
``RayActorError``; with ``restart`` the worker starts again, on whichever
node Ray picks, from the last element delivered: the messages received but
not yet delivered are dropped and made again, identically.
"""

from __future__ import annotations

import collections
import logging
import time
import weakref
from typing import Any

from chute._core import metrics
from chute._core.errors import WorkerDiedError, add_note, closed_error
from chute._core.options import RayExecutor
from chute._execution import (
    processes,
    ray_cluster,
    shutdown,
    unpicklable,
    worker_errors,
    worker_seeds,
)
from chute._execution.worker import Worker
from chute._execution.worker_loop import END, FAILED, REFUSED

logger = logging.getLogger("chute")

__all__ = ["RayWorkerIterator"]

_MOST_PER_CALL = 256  # elements one call may carry (its time and bytes bound it first)
_WAIT_SLICE_S = 5.0  # how long one wait for a result lasts before the actor is checked
_GONE_WAIT_S = 10.0  # how long close() waits for its actor to be gone from the cluster

_actor_classes: dict[int, Any] = {}


def _actor_class(ray: Any) -> Any:
    """``RayWorker`` as a Ray actor class (made once per ``ray`` module)."""
    cls = _actor_classes.get(id(ray))
    if cls is None:
        from chute._execution.ray_worker import RayWorker

        cls = _actor_classes[id(ray)] = ray.remote(max_restarts=0, max_task_retries=0)(RayWorker)
    return cls


def _wait_gone(ray: Any, actor: Any) -> None:
    """Waits, ``_GONE_WAIT_S`` at most, until ``actor`` is dead and its process has exited.

    ``ray.kill`` only asks: until the actor's process has exited, its node holds the
    actor's resources, and an iterator made right after this one would wait for them
    (a 2-CPU cluster holds one iterator's two workers).  The process is looked for
    when it ran on this machine; where Ray's actor table cannot be read, nothing is
    waited for.
    """
    deadline = time.monotonic() + _GONE_WAIT_S
    while time.monotonic() < deadline:
        try:  # the actor table in Ray's control store (the state API needs the dashboard)
            if not ray.is_initialized():
                return
            info = ray._private.state.actors(actor._actor_id.hex())
            if info["State"] == "DEAD":
                here = info["Address"]["NodeID"] == ray.get_runtime_context().get_node_id()
                if not (here and _running(int(info.get("Pid") or 0))):
                    return
        except Exception:  # not there in this version of Ray: nothing to wait for
            return
        time.sleep(0.01)


def _running(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (not exited, not a zombie)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _kill(ray: Any, actor: Any, source: object) -> None:
    """Stops ``actor`` now; nothing if Ray is already shut down (its actors went with it).
    ``source``: the name its metrics came under (its gauges go with it)."""
    metrics.forget(source)
    try:
        if ray.is_initialized():
            ray.kill(actor, no_restart=True)
    except Exception:  # gone already, or the cluster is: nothing left to stop
        pass


class RayWorkerIterator(Worker):
    """Iterates ``dataset`` in a Ray actor (worker ``index`` of ``count``; see the module)."""

    _stage = "ray"

    def __init__(
        self,
        dataset: Any,
        *,
        executor: RayExecutor,
        index: int,
        count: int,
        seed: int,
        buffer_size: int = 1,
        worker_init_fn: Any = None,
        state: dict[str, Any] | None = None,
        restart: bool = True,
    ) -> None:
        super().__init__(index=index, count=count, seed=seed, restart=restart)
        self._ray = ray_cluster.connect(executor.address)
        self._executor = executor
        # Elements to take one per call, after a death: a call that dies loses all it made,
        # and a pipeline that dies at element k must still deliver those before it.
        self._careful = 0
        self._calls = max(1, buffer_size) + 1  # like a local worker's credits
        self._job = self._pickled(dataset, worker_init_fn)
        self._dataset = dataset
        self.node = "?"  # where the actor runs, once it said so
        self.moving_s = 0.0  # time spent waiting for and reading results (the statistics)
        self._warned_unplaced = False
        self._stopping = False  # begin_stop() or close(): nothing is restarted any more
        self._start(state)

    def _pickled(self, dataset: Any, init_fn: Any) -> bytes:
        try:
            return processes.dumps((dataset, init_fn))
        except Exception as exc:
            what = unpicklable.culprit(dataset, init_fn)
            add_note(
                exc,
                f"chute: Ray worker {self._index}'s pipeline must be pickled to reach its "
                "actor; "
                + (f"{what}, which cannot be pickled. " if what else "")
                + "Create such objects (locks, open files, connections) inside the function "
                "that uses them, e.g. lazily on first call, or in worker_init_fn.",
            )
            raise

    def _launch(self, state: dict[str, Any] | None) -> None:
        ray = self._ray
        seed = worker_seeds.resumed_seed(self._seed, state)
        options = self._executor.actor_options()
        self._actor = (
            _actor_class(ray).options(**options).remote(self._job, self._index, self._count, seed)
        )
        self._metrics_source = object()  # this actor's, for its gauges (metrics.merge)
        self._finalizer = weakref.finalize(self, _kill, ray, self._actor, self._metrics_source)
        shutdown.on_terminate(self._finalizer)
        shutdown.install()
        self._started = self._actor.start.remote(state)
        self._received: collections.deque[tuple[str, Any, Any]] = collections.deque()
        self._in_flight: collections.deque[Any] = collections.deque(
            self._take(first=k == 0) for k in range(self._calls)
        )

    def _take(self, first: bool = False) -> Any:
        """One more ``take`` call: one element each while the worker is ``_careful``, and in
        the first call of a worker (the first batch comes as soon as it is made)."""
        if self._cluster_gone():  # a call now would start a new local cluster
            raise self._cluster_closed()
        most = 1 if first or self._careful > 0 else _MOST_PER_CALL
        return self._actor.take.remote(most)

    # -- receiving ------------------------------------------------------------------

    def _get(self, ref: Any) -> Any:
        """The result of ``ref``; ``WorkerDiedError`` if the actor died."""
        ray = self._ray
        start = time.perf_counter()
        try:
            while True:
                if self._cluster_gone():  # ray.get would start a new local cluster
                    raise self._cluster_closed()
                try:
                    return ray.get(ref, timeout=_WAIT_SLICE_S)
                except ray.exceptions.GetTimeoutError:
                    self._warn_if_unplaced()
        except ray.exceptions.RayActorError as exc:
            raise self._died(f"{type(exc).__name__}: {_first_line(exc)}") from None
        except ray.exceptions.ActorUnavailableError as exc:
            raise self._died(f"unreachable: {_first_line(exc)}") from None
        except ray.exceptions.ObjectLostError as exc:  # its node left with what it made
            raise self._died(f"its results were lost: {_first_line(exc)}") from None
        except Exception:
            if self._cluster_gone():  # ray.shutdown() in this program, or the cluster left
                raise self._cluster_closed() from None
            raise
        finally:
            self.moving_s += time.perf_counter() - start

    def _warn_if_unplaced(self) -> None:
        """Says once, in the log, that this worker waits for resources no node has free."""
        if self._warned_unplaced or self._started is None:
            return
        try:  # the actor table in Ray's control store (the state API needs the dashboard)
            info = self._ray._private.state.actors(self._actor._actor_id.hex())
            state, placed = info["State"], bool(info.get("Pid"))
        except Exception:  # not there in this version of Ray: nothing to say
            return
        if state in ("PENDING_CREATION", "DEPENDENCIES_UNREADY") and not placed:  # not starting
            self._warned_unplaced = True
            logger.warning(
                "chute: Ray worker %d of %d has waited %.0f s for a node with %s free; it "
                "starts when one has them (the cluster's free resources now: %s). Ask for "
                "fewer workers or smaller resources_per_worker, or add nodes.",
                self._index,
                self._count,
                _WAIT_SLICE_S,
                self._executor.resources_per_worker,
                self._ray.available_resources(),
            )

    def _cluster_gone(self) -> bool:
        """Whether this program is no longer connected to Ray (a new call would start a
        new local cluster, so nothing is restarted)."""
        return not self._ray.is_initialized()

    def _wait_started(self) -> None:
        """The actor's first message: where it runs and the state it starts at."""
        if self._started is None:
            return
        kind, report, state, node = self._get(self._started)
        self._started, self.node = None, node
        if kind == FAILED:
            raise self._failed(report)
        self._state_now = state

    def _failed(self, report: worker_errors.Report) -> BaseException:
        who = f"chute Ray worker {self._index} of {self._count} on {self.node}"
        needs = "picklable, importable and readable on every node of the cluster"
        return worker_errors.could_not_start(
            report, self._index, self._count, who, needs, self.node
        )

    def _died(self, why: str = "") -> WorkerDiedError:
        error = WorkerDiedError(
            f"chute Ray worker {self._index} of {self._count} on {self.node} died ({why}). "
            "Restore the last state to go on."
        )
        error.why = why
        return error

    def _cluster_closed(self) -> WorkerDiedError:
        return self._died("the connection to the Ray cluster was closed")

    def _next_message(self) -> tuple[str, Any, Any]:
        if not self._received:
            messages, stats, changed = self._get(self._in_flight.popleft())
            if stats is not None:
                self._stats = stats
            if changed is not None:
                metrics.merge(changed, source=self._metrics_source)
            if messages[-1][0] != END:  # an ended worker gets no more calls
                self._in_flight.append(self._take())
            self._received.extend(messages)
        return self._received.popleft()

    # -- the contract's parts that Ray does its own way ------------------------------

    def _receive(self) -> tuple[str, Any, Any]:
        self._wait_started()
        return self._next_message()

    def _delivered(self, kind: str) -> None:
        self._careful -= 1

    def _where(self) -> str | None:
        return self.node

    def _may_restart(self, exc: WorkerDiedError) -> bool:
        if self._closed or self._stopping:  # closed by another thread while this waited
            raise closed_error("RayWorkerIterator") from None
        could_not_start = exc.worker_exception is not None  # it would fail again
        return not could_not_start and super()._may_restart(exc) and not self._cluster_gone()

    def _restart_report(self, exc: WorkerDiedError) -> tuple[str, str]:
        self._careful = self._calls * _MOST_PER_CALL  # what the dead calls may have held
        if self.node == "?":
            self.node = _node_of_actor(self._ray, self._actor)
        who = f"Ray worker {self._index} of {self._count} on {self.node}"
        return who, exc.why or str(exc)

    def _first_state(self) -> dict[str, Any]:
        try:
            self._wait_started()
        except WorkerDiedError as exc:
            # Ray may drop the replies of an actor that died, its first one too: nothing came
            # since the launch, so the worker still stands where it was launched.
            return self._launched_with if self._launched_with is not None else self._start_of(exc)
        assert self._state_now is not None  # _wait_started() set it, or raised
        return self._state_now

    def _start_of(self, died: WorkerDiedError) -> dict[str, Any]:
        """The state at the start of the worker's share, made here: its actor is gone."""
        try:
            it = iter(self._dataset)
        except Exception as exc:
            raise died from exc
        try:
            state: dict[str, Any] = it.get_state()
            return state
        finally:
            getattr(it, "close", lambda: None)()

    def _lost_while_moving(self, state: dict[str, Any], exc: Exception) -> None:
        if not isinstance(exc, WorkerDiedError) or self._cluster_gone():
            raise exc
        self._stop_now()  # restarted where it was asked to go
        self._start(state)

    def _stop_now(self) -> None:
        self._finalizer()

    def _move_to(self, state: Any) -> worker_errors.Report | None:
        """Sends the worker to ``state``, dropping what it made ahead; its error if refused."""
        # The calls in flight run first (an actor runs its calls in order) and their elements
        # are dropped; they are not cancelled, since Ray interrupts a running call, which
        # would leave the pipeline half way through an element.
        self._received.clear()
        kind, report, now = self._get(self._actor.move_to.remote(state))
        self._state_now, self._ended = now, False
        self._in_flight = collections.deque(self._take() for _ in range(self._calls))
        return report if kind == REFUSED else None

    @property
    def buffer_size(self) -> int:
        """Calls that may wait with their elements made, beyond the one in the making."""
        return self._calls - 1

    def ready(self) -> bool:
        """Whether an element has arrived (never waits)."""
        if self._closed or self._ended or self._received or self._cluster_gone():
            return True  # (gone: the next read says so)
        if self._started is not None or not self._in_flight:
            return False
        done, _ = self._ray.wait([self._in_flight[0]], timeout=0, fetch_local=False)
        return bool(done)

    def grant(self, extra: int) -> None:
        """Lets the worker make ``extra`` more calls' worth ahead, from now on."""
        self._calls += extra
        if not self._ended:
            for _ in range(extra):
                self._in_flight.append(self._take())

    def begin_stop(self) -> None:
        """Stops the actor now (``close`` does too); it makes nothing more."""
        if not self._closed:
            self._stopping = True
            self._finalizer()

    def close(self) -> None:
        """Stops the actor and returns once it is gone, its resources free for the next one."""
        if not self._closed:
            self._stopping = True
            super().close()
            self._received.clear()
            self._in_flight.clear()
            _wait_gone(self._ray, self._actor)

    def __repr__(self) -> str:
        return (
            f"RayWorkerIterator(worker {self._index} of {self._count}, node={self.node}, "
            f"dataset={self._dataset!r})"
        )


def _node_of_actor(ray: Any, actor: Any) -> str:
    """The node an actor ran on, from Ray's state API (for an actor that died before it said)."""
    try:  # the actor table in Ray's control store (the state API needs the dashboard)
        info = ray._private.state.actors(actor._actor_id.hex())
        return f"node {info['Address']['NodeID'][:8]}"
    except Exception:  # not there in this version of Ray: the node stays unnamed
        return "?"


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
