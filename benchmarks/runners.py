"""What the benchmarks set beside chute: the limits of the work itself, and the peers' runners.

Limits, what the work costs with no loader at all:

* ``bare_processes`` with a job from ``bare_map`` or ``bare_map_and_stack``: forked
  processes that run the work over their share of the items and hand nothing back
  (``bench_workers``);
* ``hand_loop``: one thread, a shuffled order, the work per element and ``np.stack`` per
  batch (``bench_core``, ``bench_loader``).

Peers:

* Grain runs the very same code as chute (a function that takes the module):
  ``with_workers`` (``mp_prefetch``), ``map_transform`` and ``data_loader`` (the
  ``DataLoader`` API), and ``mark_grain_flags_parsed`` for Grain's worker processes;
* PyTorch: ``map_dataset``, ``torch_loader``, ``shutdown_torch`` and ``as_numpy``;
* MosaicML Streaming: ``import_streaming`` (beside the CPU build of torch).

Nothing here imports chute, Grain or PyTorch: the caller passes the module in.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

# -- the limits -------------------------------------------------------------------------------


def bare_processes(job: Callable[[int], None], processes: int) -> Iterator[Any]:
    """Forks ``processes`` processes running ``job(w)``, waits for them; an empty iterator.

    A process hands nothing back: its exit status says whether ``job`` finished.
    """
    pending: list[int] = []
    codes: list[int] = []
    try:
        for w in range(processes):
            pid = os.fork()
            if pid == 0:  # the child: the job, then out, skipping the parent's exit handlers
                status = 1
                try:
                    job(w)
                    status = 0
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(status)
            pending.append(pid)
        while pending:
            _, status = os.waitpid(pending[0], 0)
            pending.pop(0)
            codes.append(os.waitstatus_to_exitcode(status))
    finally:
        for pid in pending:  # interrupted (a timeout): no process outlives the run
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    if any(codes):
        raise RuntimeError(f"the bare processes exited with {codes}")
    return iter(())


def bare_map(fn: Callable[[int], Any], n: int, count: int) -> Callable[[int], None]:
    """The job of bare process w of ``count``: ``fn(i)`` for i in w, w + count, ..., dropped."""

    def job(w: int) -> None:
        for i in range(w, n, count):
            fn(i)

    return job


def bare_map_and_stack(
    fn: Callable[[int], Any], n: int, count: int, batch_size: int, shape: Sequence[int]
) -> Callable[[int], None]:
    """``bare_map``, plus stacking each ``batch_size`` uint8 results of ``shape`` into one
    reused batch array, as a pipeline that ends with ``batch()`` must; nothing is handed back.
    """

    def job(w: int) -> None:
        mine = range(w, n, count)
        out = np.empty((batch_size, *shape), np.uint8)
        for start in range(0, len(mine), batch_size):
            np.stack([fn(i) for i in mine[start : start + batch_size]], out=out)

    return job


def hand_loop(
    source: Sequence[Any],
    permutation: np.ndarray,
    fn: Callable[[Any], dict[str, Any]],
    batch_size: int,
    drop_remainder: bool,
) -> Iterator[dict[str, np.ndarray]]:
    """What a user writes with no loader at all: the limit of one thread.

    ``fn(source[i])`` for every ``i`` of ``permutation``, and each key of its dicts
    stacked per batch of ``batch_size`` (the last one partial unless ``drop_remainder``).
    """
    order = permutation.tolist()
    stop = len(order) - batch_size + 1 if drop_remainder else len(order)
    for start in range(0, stop, batch_size):
        rows = [fn(source[i]) for i in order[start : start + batch_size]]
        yield {key: np.stack([r[key] for r in rows]) for key in rows[0]}


# -- Grain, running chute's code --------------------------------------------------------------


def mark_grain_flags_parsed() -> None:
    """Marks absl's flags as parsed, with their defaults.

    Grain reads absl flags in its worker processes; with JAX installed next to it an
    unparsed flag crashes them.  Call it where a worker's imports run it too: at the
    import of a module that Grain's spawned workers re-import.
    """
    try:
        from absl import flags
    except ImportError:  # pragma: no cover - absl comes with grain
        return
    flags.FLAGS.mark_as_parsed()


def with_workers(lib: Any, ds: Any, workers: int) -> Any:
    """``ds.mp_prefetch`` with ``workers`` processes (0: chute returns ``ds`` itself)."""
    return ds.mp_prefetch(lib.multiprocessing.MultiprocessingOptions(num_workers=workers))


def map_transform(lib: Any, fn: Callable[[Any], Any], name: str) -> type:
    """``fn`` as a ``lib.transforms.Map`` subclass called ``name`` (Grain's Map takes no
    callable)."""

    class FnMap(lib.transforms.Map):
        def map(self, element: Any) -> Any:
            return fn(element)

    FnMap.__name__ = FnMap.__qualname__ = name
    return FnMap


def data_loader(
    lib: Any, source: Any, transform: type, num_records: int, batch_size: int, seed: int
) -> Any:
    """The same code for both libraries: ``lib.DataLoader`` over ``source``, one shuffled
    epoch, ``transform`` (a ``map_transform``) then a batch, no worker processes."""
    return lib.DataLoader(
        data_source=source,
        sampler=lib.samplers.IndexSampler(
            num_records=num_records, shuffle=True, seed=seed, num_epochs=1
        ),
        operations=[transform(), lib.transforms.Batch(batch_size)],
        worker_count=0,
    )


# -- MosaicML Streaming -------------------------------------------------------------------


def import_streaming() -> Any:
    """Streaming, imported beside the CPU build of torch.

    ``import streaming`` imports its vision datasets, which import torchvision, whose
    compiled ops need the CUDA build of torch (no CPU build of torchvision 0.28 is
    published for this machine).  The benchmarks read MDS shards of bytes and use none
    of them, so where torchvision cannot load, a stand-in with the two names those
    modules import takes its place.  Nothing of Streaming's reading or caching changes.
    """
    try:
        import torchvision  # noqa: F401
    except Exception:
        import importlib.machinery
        import types

        stand_in = {
            name: types.ModuleType(name)
            for name in (
                "torchvision",
                "torchvision.datasets",
                "torchvision.transforms",
                "torchvision.transforms.functional",
            )
        }
        stand_in["torchvision.datasets"].VisionDataset = object  # type: ignore[attr-defined]
        stand_in["torchvision.datasets"].CIFAR10 = object  # type: ignore[attr-defined]
        stand_in["torchvision.transforms.functional"].to_tensor = None  # type: ignore[attr-defined]
        for name, module in stand_in.items():
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules.update(stand_in)
    import streaming

    return streaming


# -- PyTorch's DataLoader ---------------------------------------------------------------------


def map_dataset(torch: Any, fn: Callable[[int], Any], n: int) -> Any:
    """A map-style ``torch.utils.data.Dataset`` of ``n`` items whose ``__getitem__(i)`` is
    ``fn(i)``; made here, from the ``torch`` module, for the callers that import it late."""

    class MapStyle(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return n

        def __getitem__(self, index: int) -> Any:
            return fn(index)

    return MapStyle()


def torch_loader(
    torch: Any, dataset: Any, workers: int, batch_size: int, seed: int | None = None
) -> Any:
    """What a PyTorch user writes: ``DataLoader(dataset, batch_size, num_workers=workers)``,
    the default collate; with a ``seed``, ``shuffle=True`` after ``torch.manual_seed(seed)``."""
    if seed is not None:
        torch.manual_seed(seed)
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=seed is not None, num_workers=workers
    )


def shutdown_torch(it: Any) -> None:
    """What the DataLoader iterator's ``__del__`` does, done now: stop and join its workers."""
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def as_numpy(batch: Any) -> Any:
    """PyTorch's tensors as numpy arrays (no copy); anything else as it is."""
    return batch.numpy() if hasattr(batch, "numpy") else batch
