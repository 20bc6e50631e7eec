"""The actor's side of ``RayWorkerIterator``: one worker's pipeline, served in calls.

The parent keeps a few ``take`` calls in flight; Ray runs an actor's calls
one at a time in the order they were made, so they form the same credit
stream a local worker's pipe does.  One call makes elements until it has
worked ``CALL_SECONDS``, holds ``CALL_BYTES`` of arrays or made ``most``
elements: a call costs the consumer some hundred microseconds, so cheap
elements travel many to a call and a large batch travels alone.  Every
element comes with the iterator's state right after it (the same messages
as ``worker_loop``'s: ``ITEM``, ``ERROR``, ``END``), so the parent's
checkpoint is exactly the element it delivered last.
"""

from __future__ import annotations

import time
from typing import Any

import cloudpickle
import numpy as np

from chute._core import metrics, nesting
from chute._execution import processes, tuning, worker_errors, worker_seeds
from chute._execution.worker_loop import END, ERROR, FAILED, ITEM, READY, REFUSED

__all__ = ["CALL_BYTES", "CALL_SECONDS", "RayWorker"]

CALL_SECONDS = 0.02  # a call returns once it has worked this long...
CALL_BYTES = 16 << 20  # ...or its elements' arrays hold this much


def _array_bytes(x: Any) -> int:
    """The bytes of the arrays in ``x`` (a batch: its leaves), cheaply; 0 for other values."""
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, (bytes, bytearray)):
        return len(x)
    if isinstance(x, dict):
        return sum(_array_bytes(v) for v in x.values())
    if isinstance(x, (tuple, list)) and len(x) <= 64:
        return sum(_array_bytes(v) for v in x)
    return 0


class RayWorker:
    """Worker ``index`` of ``count``: ``job`` is ``(dataset, worker_init_fn)``, pickled.

    The constructor never raises: a pipeline that cannot load is reported by
    ``start`` as ``FAILED``, with its error, as a local worker reports it.
    """

    def __init__(self, job: bytes, index: int, count: int, seed: int) -> None:
        metrics.changes()  # from here on: what this process did before is not this worker's
        tuning.in_worker_process()
        processes.keep_freed_memory()
        self._it: Any = None
        self._failure: worker_errors.Report | None = None
        self._stats: Any = None
        try:
            dataset, init_fn = cloudpickle.loads(job)
            worker_seeds.seed_globals(seed)
            if init_fn is not None:
                init_fn(index, count)
            nesting.forget_nesting()
            self._it = iter(dataset)
            self._stats = getattr(self._it, "_chute_stats", None)
        except Exception as exc:
            worker_errors.explain_import(exc)
            self._failure = worker_errors.report(exc)

    def start(self, state: dict[str, Any] | None) -> tuple[str, Any, Any, str]:
        """``(READY, None, state, node)`` once at ``state`` (None: the start);
        ``(FAILED, error, None, node)`` when the pipeline cannot load or take ``state``."""
        from chute._execution.ray_cluster import node_of_this_process

        node = node_of_this_process()
        if self._failure is not None:
            return FAILED, self._failure, None, node
        if state is not None:
            try:
                self._it.set_state(state)
            except Exception as exc:
                return FAILED, worker_errors.report(exc), None, node
        return READY, None, self._it.get_state(), node

    def move_to(self, state: dict[str, Any]) -> tuple[str, Any, Any]:
        """A restore of the live pipeline: ``READY`` and the state now, or ``REFUSED``, its
        error and the state it stayed at (the parent moves it back where it was)."""
        try:
            self._it.set_state(state)
        except Exception as exc:
            return REFUSED, worker_errors.report(exc), self._it.get_state()
        return READY, None, self._it.get_state()

    def take(self, most: int) -> tuple[list[tuple[str, Any, Any]], Any, Any]:
        """Up to ``most`` messages (see the module docstring), the statistics and the
        changes of the metrics (``chute._core.metrics``), each when due (else ``None``)."""
        it, out = self._it, list[tuple[str, Any, Any]]()
        if it is None:  # the pipeline could not load: start() said why, the parent raised
            return out, None, None
        clock = time.perf_counter
        deadline, held = clock() + CALL_SECONDS, 0
        while len(out) < most:
            try:
                x = next(it)
            except StopIteration:
                out.append((END, None, it.get_state()))
                break
            except Exception as exc:
                out.append((ERROR, worker_errors.report(exc), it.get_state()))
            else:
                out.append((ITEM, x, it.get_state()))
                held += _array_bytes(x)
            if held >= CALL_BYTES or clock() >= deadline:
                break
        stats, end = self._stats, out[-1][0] == END
        report = stats.report() if stats is not None and (stats.due or end) else None
        return out, report, metrics.changes() if end or metrics.due() else None
