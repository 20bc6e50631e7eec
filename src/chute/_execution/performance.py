"""``pick_performance_config``: worker processes and read-ahead that fit a RAM budget.

Grain's helper, with chute's accounting: the budget covers every element a
pipeline holds at once across all its workers, not one worker's buffer.  A
worker holds up to ``ReadOptions.prefetch_buffer_size`` elements read ahead,
plus ``per_worker_buffer_size`` finished elements waiting for the parent and
the one it is making; the element size is measured on the first few elements.

chute also times those elements and starts only as many workers as pay off
(``fewest_workers``); ``MultiprocessingOptions(num_workers="auto")`` uses the
same measurement when its first iterator starts (``auto_worker_count``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from chute._core.options import MultiprocessingOptions, ReadOptions
from chute._core.validate import check_int

_DEFAULT_MAX_BUFFER = 1000  # read-ahead beyond this buys nothing and costs start-up memory
DEFAULT_BUDGET_MB = 1024
# What the parent spends taking one element from a worker: a fixed cost, plus the
# copy of its bytes into shared memory.  An element made faster than that is made
# faster in the parent itself than a worker can hand it over.
HANDOFF_S = 50e-6
HANDOFF_S_PER_BYTE = 0.25e-9  # about 4 GB/s
AUTO_SAMPLES = 5  # elements "auto" measures ...
AUTO_MEASURE_S = 1.0  # ... stopping early once this long has passed


@dataclasses.dataclass(frozen=True)
class PerformanceConfig:
    """Worker and read-ahead options chosen for a pipeline (see ``pick_performance_config``).

    Args:
      multiprocessing_options: for ``mp_prefetch``, or None to leave them as they are.
      read_options: for ``to_iter_dataset``, or None to leave them as they are.
    """

    multiprocessing_options: MultiprocessingOptions | None = None
    read_options: ReadOptions | None = None


def element_bytes(element: Any) -> int:
    """The bytes an element holds: its arrays' buffers, or Python's size for other leaves.

    An array is anything with an int ``nbytes``: NumPy, JAX and torch arrays, and the
    shared-memory slots a worker stacks its batches into (``transport.RingSlot``).
    """
    if isinstance(element, np.ndarray):
        return int(element.nbytes)
    size = getattr(element, "nbytes", None)
    if isinstance(size, int) and not isinstance(element, type):
        return size
    if isinstance(element, dict):
        return sum(element_bytes(v) for v in element.values())
    if isinstance(element, (list, tuple)):
        return sum(element_bytes(v) for v in element)
    if isinstance(element, (bytes, bytearray, str)):
        return len(element)
    return sys.getsizeof(element)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """The largest of the elements measured, and the median time one took to make."""

    element_bytes: int
    seconds: float


def measure(ds: Any, samples: int, max_seconds: float | None = None) -> Measurement | None:
    """Reads up to ``samples`` elements of a fresh iterator of ``ds``; None if there are none.

    The time of an element is that of its ``next()``; the first one, which pays
    for start-up (threads, files, buffers), counts only when it is the only one.
    Reading stops early once ``max_seconds`` have passed since the first element.
    """
    sizes: list[int] = []
    times: list[float] = []
    with contextlib.closing(iter(ds)) as it:
        deadline = math.inf
        for _ in range(samples):
            before = time.perf_counter()
            try:
                element = next(it)
            except StopIteration:
                break
            after = time.perf_counter()
            times.append(after - before)
            sizes.append(element_bytes(element))
            if max_seconds is not None and len(times) == 1:
                deadline = after + max_seconds
            if after > deadline:
                break
    if not sizes:
        return None
    return Measurement(max(1, max(sizes)), statistics.median(times[1:] or times))


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fewest_workers(measured: Measurement, max_workers: int, held_per_worker: int,
                   budget_bytes: int) -> int:  # fmt: skip
    """The fewest workers that keep up with the parent, within ``max_workers`` and the budget.

    A worker hands over an element in about ``HANDOFF_S`` plus
    ``HANDOFF_S_PER_BYTE`` per byte of it; ``ceil(seconds / handoff)`` workers
    then make elements as fast as the parent takes them, and more would wait.
    Elements made in less than a handoff want no workers at all (0).  Each
    worker holds ``held_per_worker`` elements at once, and all of them together
    stay within ``budget_bytes`` (but a pipeline that wants workers gets one).
    """
    handoff = HANDOFF_S + HANDOFF_S_PER_BYTE * measured.element_bytes
    if measured.seconds < handoff:
        return 0
    fitting = budget_bytes // (measured.element_bytes * held_per_worker)
    wanted = math.ceil(measured.seconds / handoff)
    return max(1, min(wanted, max_workers, usable_cores(), fitting))


def auto_worker_count(ds: Any, ram_budget_mb: int | None, buffer_size: int) -> int:
    """The worker count of ``num_workers="auto"``: at least 1 (see ``fewest_workers``).

    Measures ``AUTO_SAMPLES`` elements of a separate iterator of ``ds``, for
    about ``AUTO_MEASURE_S`` at most after the first.  An element that raises
    ends the measuring; the stream raises it again in its place.
    """
    try:
        measured = measure(ds, AUTO_SAMPLES, AUTO_MEASURE_S)
    except Exception:  # the pipeline reports it where the element is read
        measured = None
    if measured is None:
        return 1
    budget = (DEFAULT_BUDGET_MB if ram_budget_mb is None else ram_budget_mb) * 2**20
    return max(1, fewest_workers(measured, usable_cores(), buffer_size + 1, budget))


def pick_performance_config(
    ds: Any,
    *,
    ram_budget_mb: int | None,
    max_workers: int | None,
    max_buffer_size: int | None,
    samples_to_check: int = 5,
) -> PerformanceConfig:
    """Chooses a worker count and a read-ahead size whose elements fit in ``ram_budget_mb``.

    The first ``samples_to_check`` elements are read once, in this process, to
    measure their size (the largest counts) and how long each takes to make
    (the median of those after the first, which pays for start-up).

    * Workers: as few as keep up with the parent (``fewest_workers``): none
      when an element takes less time to make than to hand over from a worker
      (about 50 µs, plus 0.25 ns per byte), else ``ceil(time / handoff)``, at
      most ``max_workers`` and the cores this process may use, and no more than
      the budget holds at three elements each.
    * Read-ahead: what the budget leaves, split over the workers.  Each worker
      holds its read-ahead, one element waiting for the parent and the one it
      is making; without workers, the read-ahead and the element in hand.

    Args:
      ds: the pipeline (an IterDataset, before ``mp_prefetch``); its first
        ``samples_to_check`` elements are read here to measure them.
      ram_budget_mb: MiB the pipeline's elements may hold at once, over all
        workers (None: 1 GiB).
      max_workers: the most worker processes to use (None: one per usable core).
      max_buffer_size: the most elements to read ahead per worker (None: 1,000).
      samples_to_check: how many elements to measure.

    Returns:
      A ``PerformanceConfig`` with both options set.

    Raises:
      ValueError: a bound is not a positive int, or the dataset is empty.

    >>> import time
    >>> import numpy as np
    >>> from chute import MapDataset
    >>> cheap = MapDataset.range(100).to_iter_dataset()
    >>> config = pick_performance_config(cheap, ram_budget_mb=64, max_workers=2,
    ...                                  max_buffer_size=None)
    >>> config.multiprocessing_options.num_workers  # adding 1 is no work for a worker
    0
    >>> def slow(i):
    ...     time.sleep(0.005)
    ...     return np.zeros(1 << 20, np.uint8)
    >>> ds = MapDataset.range(100).map(slow).to_iter_dataset()
    >>> config = pick_performance_config(ds, ram_budget_mb=64, max_workers=2, max_buffer_size=None)
    >>> workers = config.multiprocessing_options.num_workers  # 2 where 2 cores are free
    >>> workers in (1, 2), workers * (config.read_options.prefetch_buffer_size + 2) <= 64
    (True, True)
    """
    what = "pick_performance_config: "
    budget = check_int(DEFAULT_BUDGET_MB if ram_budget_mb is None else ram_budget_mb,
                       what + "ram_budget_mb", minimum=1) * 2**20  # fmt: skip
    most = check_int(usable_cores() if max_workers is None else max_workers,
                     what + "max_workers", minimum=1)  # fmt: skip
    cap = check_int(_DEFAULT_MAX_BUFFER if max_buffer_size is None else max_buffer_size,
                    what + "max_buffer_size", minimum=1)  # fmt: skip
    samples = check_int(samples_to_check, what + "samples_to_check", minimum=1)
    measured = measure(ds, samples)
    if measured is None:
        raise ValueError("pick_performance_config: the dataset has no elements to measure.")
    waiting = 1
    workers = fewest_workers(measured, most, waiting + 2, budget)
    held = budget // measured.element_bytes // max(1, workers)  # elements each may hold
    ahead = max(1, min(cap, held - (waiting + 1 if workers else 1)))
    return PerformanceConfig(
        multiprocessing_options=MultiprocessingOptions(
            num_workers=workers, per_worker_buffer_size=waiting
        ),
        read_options=ReadOptions(num_threads=min(16, ahead), prefetch_buffer_size=ahead),
    )
