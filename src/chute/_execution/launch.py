"""One worker of a pool, where the executor says: a local process, or a Ray actor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chute._core.options import RayExecutor
from chute._execution.worker import Worker

__all__ = ["worker"]


def worker(
    executor: RayExecutor | None,
    dataset: Any,
    *,
    index: int,
    count: int,
    buffer_size: int,
    seed: int,
    state: dict[str, Any] | None = None,
    worker_init_fn: Callable[[int, int], None] | None = None,
    restart: bool = False,
    stack_batches: Callable[[Any, Callable[[list[Any]], Any]], Any] | None = None,
) -> Worker:
    """Worker ``index`` of ``count`` iterating ``dataset`` from ``state``.

    Both kinds keep the ``Worker`` contract and the same states, so a pool
    mixes neither but a checkpoint crosses between them.  ``stack_batches``
    is the local workers' shared-memory batching (Ray's object store carries
    a batch without it); a Ray executor's ``restart_workers`` adds to ``restart``.
    """
    shared: dict[str, Any] = {
        "index": index,
        "count": count,
        "seed": seed,
        "buffer_size": buffer_size,
        "worker_init_fn": worker_init_fn,
        "state": state,
    }
    if executor is None:
        from chute._execution.worker_process import WorkerIterator

        return WorkerIterator(dataset, restart=restart, stack_batches=stack_batches, **shared)
    from chute._execution.ray_iterator import RayWorkerIterator

    restart = restart or executor.restart_workers
    return RayWorkerIterator(dataset, executor=executor, restart=restart, **shared)


def check_executor(executor: object, where: str) -> RayExecutor | None:
    """``executor`` if it is None or a ``RayExecutor``, else a TypeError naming ``where``."""
    if executor is None or isinstance(executor, RayExecutor):
        return executor
    raise TypeError(
        f"{where}: executor must be None (local worker processes) or a chute.RayExecutor "
        f"(got {executor!r} that is a {type(executor).__name__})."
    )
