"""What every workload of ``bench_workers`` shares: sizes, output checks, the measurements.

Images are checked by hashes: ``image_digest`` keeps shape, dtype and a hash of every
image of a batch (the first batches whole too), ``check_images`` compares them with the
hashes the harness computed itself.
"""

from __future__ import annotations

import hashlib
import os
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

import common
from common import Impl
from runners import as_numpy
from workers import memory

WORKERS = 2
BATCH = 32
IMAGE_SHAPE = (224, 224, 3)
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))
CHECK_FULL_BATCHES = 3  # image batches compared value by value; the others by hashes
LIMIT = "limit"
ENTRY = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench_workers.py"
)
"""The benchmark's script: the clean parent and the first-batch processes run it again."""


def timed_call(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def bench_group(
    impls: list[Impl], repeats: int, parents: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """The timed runs, the warm first batches (not of the limit) and the memory runs.

    ``parents``: the ``CleanParent`` that runs an implementation, by its name.
    """
    common.time_runs(impls, repeats)
    common.time_first_batch([i for i in impls if not i.name.startswith(LIMIT)])
    return memory.measure_all(impls, parents)


# -- output checks -------------------------------------------------------------------------------


def image_hashes(batch: np.ndarray) -> np.ndarray:
    """A 16-byte BLAKE2 hash of every image of a batch, as an (n, 16) uint8 array."""
    batch = np.ascontiguousarray(batch)
    joined = b"".join(hashlib.blake2b(img.data, digest_size=16).digest() for img in batch)
    return np.frombuffer(joined, dtype=np.uint8).reshape(len(batch), 16)


def image_digest() -> Callable[[Any], Any]:
    """Every batch of images as shape, dtype and per-image hashes; the first ones whole too."""
    seen = [0]

    def digest(batch: Any) -> Any:
        batch = as_numpy(batch)
        if not isinstance(batch, np.ndarray) or batch.ndim != 4:
            return batch
        seen[0] += 1
        out = {"shape": batch.shape, "dtype": batch.dtype.str, "hashes": image_hashes(batch)}
        if seen[0] <= CHECK_FULL_BATCHES:
            out["pixels"] = np.array(batch)
        return out

    return digest


def check_images(
    out: list[Any], want: np.ndarray, sizes: list[int] | None = None, any_order: bool = False
) -> str:
    """``out`` (digests) holds the images whose hashes are the rows of ``want``, in this order.

    ``sizes``: the batch sizes expected, by default all ``BATCH``; ``any_order``: the
    same multiset of images is enough.
    """
    if sizes is None:
        sizes = [BATCH] * (len(want) // BATCH)
    if len(out) != len(sizes):
        return f"MISMATCH: {len(out)} batches, expected {len(sizes)}"
    for i, (d, n) in enumerate(zip(out, sizes)):
        if not (isinstance(d, dict) and "hashes" in d):
            return f"MISMATCH: batch {i} is not an array of images: {d!r:.200}"
        if tuple(d["shape"]) != (n, *IMAGE_SHAPE) or d["dtype"] != "|u1":
            shape = (n, *IMAGE_SHAPE)
            return f"MISMATCH: batch {i}: {d['shape']} {d['dtype']}, expected {shape} uint8"
    got = np.concatenate([d["hashes"] for d in out])
    if any_order:
        if not np.array_equal(sorted_rows(got), sorted_rows(want)):
            return "MISMATCH: the epoch's images are not the expected ones (as a multiset)"
        return "ok"
    if not np.array_equal(got, want):
        first = int(np.argwhere((got != want).any(axis=1))[0][0])
        return (
            f"MISMATCH: image {first} of the epoch (batch {first // BATCH}) is not the expected one"
        )
    return "ok"


def sorted_rows(hashes: np.ndarray) -> np.ndarray:
    """The rows of an (n, 16) hash array in sorted order (a multiset, comparable)."""
    return hashes[np.lexsort(hashes.T[::-1])]


def check_bare(impl: Impl, out: list[Any] | None) -> None:
    """The limit hands back nothing: its check is that both processes finished their items."""
    impl.check = "ok" if out == [] else common.CHECK_RAISED


def pickle_by_value(*modules: types.ModuleType) -> None:
    """Has cloudpickle send the functions of ``modules`` by value, as those of a script.

    chute and Grain send a pipeline to their workers with cloudpickle, which sends what
    the script (``__main__``) defines by value and what a module defines by reference:
    each worker would import the module, and with it the harness.  A user's map
    functions are usually in the script, and so were the workloads' before they had
    modules of their own; with this, the workers import none of the harness.
    """
    import cloudpickle

    for module in modules:
        cloudpickle.register_pickle_by_value(module)
