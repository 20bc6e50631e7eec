"""Execution options: ``ReadOptions`` (threads reading a MapDataset), ``MultiprocessingOptions``
and ``RayExecutor`` (where workers run)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Literal

import numpy as np

from chute._core.validate import check_int

logger = logging.getLogger("chute")


def _check_count(value: object, name: str) -> None:
    """A non-negative int; a negative one raises with Grain's sentence first."""
    count = check_int(value, f"ReadOptions: {name}")
    if count < 0:
        raise ValueError(
            f"{name} must be non-negative, got {count}. chute: ReadOptions: {name} must be "
            f">= 0 (got {count})."
        )


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How ``to_iter_dataset`` reads its MapDataset.

    The output order never depends on these settings, only the speed.

    Args:
        num_threads: At most this many threads read chunks of elements ahead of
            the consumer (0 reads inline, on the calling thread).
        prefetch_buffer_size: How many elements may be read ahead in total
            (0 also reads inline).
        autotune: chute's addition.  When true (the default) chute measures the
            consumer's throughput and uses as many of the ``num_threads`` threads
            as help, possibly none: on a few cores, threads slow down pipelines of
            Python work.  When false, ``num_threads`` chunks are always read ahead.

    Raises:
        TypeError, ValueError: A count is not a non-negative int, or
            ``autotune`` is not a bool.

    As Grain does, a ``prefetch_buffer_size`` above 0 but below ``num_threads``
    logs a warning (on the ``chute`` logger): it leaves threads idle.

    >>> from chute import MapDataset, ReadOptions
    >>> options = ReadOptions(num_threads=4, autotune=False)
    >>> list(MapDataset.range(3).to_iter_dataset(options))
    [0, 1, 2]
    >>> options
    ReadOptions(num_threads=4, prefetch_buffer_size=500, autotune=False)
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500
    autotune: bool = True

    def __post_init__(self) -> None:
        _check_count(self.num_threads, "num_threads")
        _check_count(self.prefetch_buffer_size, "prefetch_buffer_size")
        if not isinstance(self.autotune, bool):
            raise TypeError(f"ReadOptions: autotune must be a bool (got {self.autotune!r}).")
        buffer, threads = int(self.prefetch_buffer_size), int(self.num_threads)
        if 0 < buffer < threads:
            logger.warning(
                "prefetch_buffer_size=%s is smaller than num_threads=%s. This will limit the "
                "number of threads that can actually be used in parallel to %s, potentially "
                "hurting performance. Please set prefetch_buffer_size >= num_threads. This "
                "warning may become an error in the future.",
                buffer,
                threads,
                buffer,
            )


@dataclasses.dataclass(frozen=True)
class MultiprocessingOptions:
    """How ``mp_prefetch`` (and ``DataLoader(worker_count=...)``) use worker processes.

    Args:
        num_workers: Worker processes; 0 runs the pipeline in this process.
            chute's addition: ``"auto"`` measures a few elements in this process
            when the first iterator starts (at most ~1 s past the first element,
            on a separate iterator: nothing is taken from the stream) and starts
            as few workers as keep up, at least 1 and at most the usable cores
            (see ``pick_performance_config``).  The count picked is the length
            of the checkpoint's ``"workers"`` list, and a restore into an
            ``"auto"`` pipeline uses the saved count, so it reads the same order
            on any machine.
        per_worker_buffer_size: Elements each worker may produce ahead of you
            (at least 1).
        enable_profiling: Accepted for compatibility; chute logs nothing extra.
        restart_workers: chute's addition: a worker that dies (killed by the OS, out
            of memory) is started again from the last element it delivered, so the
            epoch goes on with every element once and in order; the chute logger
            says so; at most three times in a row, the fourth death without an
            element in between raises ``WorkerDiedError``. Off by default: a dead
            worker raises ``WorkerDiedError``.
        ram_budget_mb: chute's addition: MiB that the elements waiting in the
            workers' buffers may hold at once, over all workers.  With a budget, or
            with ``num_workers="auto"`` (budget 1 GiB unless given), a worker that
            is often not ready when its turn comes is granted a larger buffer, up
            to 16 elements (never below ``per_worker_buffer_size``) and only while
            the measured element size times all buffers fits the budget.  Buffer
            sizes change when elements are made, never their order.

    Each worker seeds ``random``, NumPy's global generator and torch's (if
    imported) differently, per worker and per epoch, before ``worker_init_fn``
    runs; see ``mp_prefetch``.

    Raises:
        TypeError, ValueError: A count is not an int in range, or ``num_workers``
            is neither an int >= 0 nor ``"auto"``.

    >>> from chute import MapDataset, MultiprocessingOptions
    >>> ds = MapDataset.range(4).to_iter_dataset()
    >>> list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)))
    [0, 1, 2, 3]
    >>> list(ds.mp_prefetch(MultiprocessingOptions(num_workers="auto")))
    [0, 1, 2, 3]
    """

    num_workers: int | Literal["auto"] = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False
    restart_workers: bool = dataclasses.field(default=False, repr=False)  # Grain's repr stays
    ram_budget_mb: int | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_num_workers(self.num_workers)
        if not isinstance(self.restart_workers, bool):
            raise TypeError(
                "MultiprocessingOptions: restart_workers must be a bool (got "
                f"{self.restart_workers!r})."
            )
        check_int(
            self.per_worker_buffer_size, "MultiprocessingOptions: per_worker_buffer_size", minimum=1
        )
        if self.ram_budget_mb is not None:
            check_int(self.ram_budget_mb, "MultiprocessingOptions: ram_budget_mb (MiB, or None)",
                      minimum=1)  # fmt: skip


def _check_num_workers(value: object) -> None:
    """An int >= 0 or ``"auto"``; the message names both."""
    accepted = "an int >= 0 or 'auto'"
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f"MultiprocessingOptions: num_workers must be {accepted} "
                             f"(got {value!r}).")  # fmt: skip
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"MultiprocessingOptions: num_workers must be {accepted} (got "
                        f"{value!r} that is a {type(value).__name__}).")  # fmt: skip
    if value < 0:
        raise ValueError(f"MultiprocessingOptions: num_workers must be >= 0 or 'auto' "
                         f"(got {value}).")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class RayExecutor:
    """chute's addition: run a pipeline's workers as actors on a Ray cluster.

    Pass it as ``executor=`` to ``mp_prefetch`` or ``DataLoader``; nothing else
    changes.  Worker ``i`` of ``N`` computes the share a local worker ``i``
    computes, with the same seeds, and the consumer reads the workers in the
    same turns, so the elements, their order and the checkpoints are those of
    ``N`` local workers (a checkpoint crosses between the two, and to another
    worker count where a local one would).  Elements travel through Ray's object
    store; NumPy arrays are read without a copy on the consumer's node.

    Args:
        address: The cluster to connect to (``"ray://host:10001"``, ``"auto"``,
            ``"host:6379"``); ``None`` uses the cluster this program already
            connected to with ``ray.init()``, else the one ``RAY_ADDRESS``
            names, else starts a local one (as ``ray.init()`` does), which chute
            shuts down when the program ends.  A cluster chute connected to is
            left running.
        resources_per_worker: What each worker actor reserves: ``"CPU"``,
            ``"GPU"``, ``"memory"`` (bytes) and custom resources, as in Ray's
            actor options.
        restart_workers: An actor that dies (its process killed, its node
            removed) is started again, on any node, from the last element it
            delivered, so the epoch goes on with every element once and in
            order; the chute logger names the worker and its node.  On by
            default: on a cluster, nodes come and go.  A worker is restarted at
            most three times in a row: its fourth death without an element in
            between raises ``WorkerDiedError``.

    Sources must be readable on every node: paths on a shared filesystem, or
    object-store URLs (``s3://``, ``gs://``, ``https://``), the way that works
    anywhere.  Every node needs chute and the pipeline's imports installed.

    Raises:
        TypeError, ValueError: An option has the wrong type or value.
    """

    address: str | None = None
    resources_per_worker: dict[str, float] = dataclasses.field(default_factory=lambda: {"CPU": 1.0})
    restart_workers: bool = True

    def __post_init__(self) -> None:
        if self.address is not None and not isinstance(self.address, str):
            raise TypeError(f"RayExecutor: address must be a str or None (got {self.address!r}).")
        resources = self.resources_per_worker
        if not isinstance(resources, dict) or not all(
            isinstance(k, str)
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and v >= 0
            for k, v in resources.items()
        ):
            raise TypeError(
                "RayExecutor: resources_per_worker must be a dict of resource names to "
                f'amounts >= 0, e.g. {{"CPU": 1}} (got {resources!r}).'
            )
        if not isinstance(self.restart_workers, bool):
            raise TypeError(
                f"RayExecutor: restart_workers must be a bool (got {self.restart_workers!r})."
            )

    def actor_options(self) -> dict[str, object]:
        """The resources as Ray's ``.options()`` takes them."""
        resources = dict(self.resources_per_worker)
        options: dict[str, object] = {"num_cpus": resources.pop("CPU", 1.0)}
        if "GPU" in resources:
            options["num_gpus"] = resources.pop("GPU")
        if "memory" in resources:
            options["memory"] = resources.pop("memory")
        if resources:
            options["resources"] = resources
        return options
