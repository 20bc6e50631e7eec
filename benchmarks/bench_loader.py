# bench-requires: torch==2.13.0
"""DataLoader benchmark: chute against Grain and PyTorch.

The MNIST-shaped in-memory source of ``bench_core`` (60,000 dicts with a
random uint8 28x28x1 image and an int label) read through the classic
``DataLoader`` API, in one process, alternating, on the same data:

* ``chute`` and ``grain``: the very same code (a function that takes the
  module), ``DataLoader(data_source=src, sampler=IndexSampler(num_records=60000,
  shuffle=True, seed=42, num_epochs=1), operations=[Normalise(), Batch(128)],
  worker_count=0)``, where ``Normalise`` is a ``transforms.Map`` subclass whose
  ``map`` is ``normalise``;
* ``torch``: ``torch.utils.data.DataLoader(dataset, shuffle=True,
  batch_size=128, num_workers=0)`` over a ``Dataset`` whose ``__getitem__``
  returns the normalised dict; the default collate makes tensors of it.

One run is one epoch: 469 batches, the last one of 96 elements.

Run through ``bash benchmarks/run loader``; see README.md.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio

try:
    import grain
except ImportError:
    sys.exit("bench_loader: the peer library 'grain' is not installed; use bash benchmarks/run")
try:
    import chute
except ImportError:
    sys.exit("bench_loader: chute is not installed; use bash benchmarks/run")
try:
    import torch
    import torch.utils.data
except ImportError:
    sys.exit(
        "bench_loader: the peer library 'torch' is not installed; use bash benchmarks/run loader"
    )

from bench_core import (
    CHECK_FULL_BATCHES,
    MNIST_BATCH,
    MNIST_N,
    mnist_digest,
    mnist_source,
    normalise,
)

TARGETS = {
    "loader chute/grain": 4.0,
    "loader chute/torch": 2.0,
}

LOADER_BATCHES = math.ceil(MNIST_N / MNIST_BATCH)  # 469, the last one partial
LAST_BATCH = MNIST_N - (LOADER_BATCHES - 1) * MNIST_BATCH  # 96
SEED = 42


# -- the pipelines ------------------------------------------------------------------------


# ``normalise`` as a ``lib.transforms.Map`` subclass (Grain's Map takes no callable).
NORMALISE = {lib: runners.map_transform(lib, normalise, "Normalise") for lib in (chute, grain)}


def data_loader(lib: Any, source: list[dict[str, Any]]) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    return runners.data_loader(lib, source, NORMALISE[lib], MNIST_N, MNIST_BATCH, SEED)


class TorchMnist(torch.utils.data.Dataset):
    """The source as a PyTorch map-style dataset; items come out normalised."""

    def __init__(self, source: list[dict[str, Any]]) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return normalise(self.source[index])


def torch_loader(source: list[dict[str, Any]]) -> Any:
    return iter(runners.torch_loader(torch, TorchMnist(source), 0, MNIST_BATCH, SEED))


# -- checking PyTorch's output ------------------------------------------------------------------


def torch_digest(batch: Any) -> Any:
    """Shape, dtype and per-image sums of the images; the labels as numpy, with their dtype."""
    if not (isinstance(batch, dict) and set(batch) == {"image", "label"}):
        return batch
    image, label = batch["image"], batch["label"]
    if not (isinstance(image, torch.Tensor) and isinstance(label, torch.Tensor)):
        return batch
    images = image.numpy()
    return {
        "image_shape": tuple(image.shape),
        "image_dtype": image.dtype,
        "sums": images.reshape(len(images), -1).sum(axis=1, dtype=np.float64),
        "label_shape": tuple(label.shape),
        "label_dtype": label.dtype,
        "labels": label.numpy(),
    }


def hand_digest(batch: Any) -> Any:
    """The hand loop's numpy batches, digested like PyTorch's (zero-copy tensors)."""
    if isinstance(batch, dict) and all(isinstance(v, np.ndarray) for v in batch.values()):
        return torch_digest({k: torch.from_numpy(v) for k, v in batch.items()})
    return batch


def reference_sums_and_labels(grain_out: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per-image sums and labels of Grain's epoch (digested by ``mnist_digest``), in order."""
    sums, labels = [], []
    for batch in grain_out:
        image = batch["image"]
        if isinstance(image, np.ndarray):
            sums.append(image.reshape(len(image), -1).sum(axis=1, dtype=np.float64))
        else:
            sums.append(image["sums"])
        labels.append(np.asarray(batch["label"]))
    return np.concatenate(sums), np.concatenate(labels)


def check_torch(out: list[Any], grain_out: list[Any]) -> str:
    """PyTorch's order differs by design: counts, shapes, dtypes, and the same multisets."""
    if len(out) != LOADER_BATCHES:
        return f"MISMATCH: torch gave {len(out)} batches, expected {LOADER_BATCHES}"
    for i, d in enumerate(out):
        n = MNIST_BATCH if i < LOADER_BATCHES - 1 else LAST_BATCH
        if not (isinstance(d, dict) and "image_shape" in d):
            return f"MISMATCH: batch {i} is not a dict of two tensors 'image', 'label': {d!r:.200}"
        if d["image_shape"] != (n, 28, 28, 1) or d["image_dtype"] != torch.float32:
            return (
                f"MISMATCH: batch {i}: image {d['image_shape']} {d['image_dtype']}, "
                f"expected ({n}, 28, 28, 1) torch.float32"
            )
        if d["label_shape"] != (n,) or d["label_dtype"] != torch.int64:
            return (
                f"MISMATCH: batch {i}: label {d['label_shape']} {d['label_dtype']}, "
                f"expected ({n},) torch.int64"
            )
    ref_sums, ref_labels = reference_sums_and_labels(grain_out)
    labels = np.concatenate([d["labels"] for d in out])
    if not np.array_equal(np.sort(labels), np.sort(ref_labels)):
        return "MISMATCH: the epoch's labels are not the same multiset as Grain's"
    sums = np.concatenate([d["sums"] for d in out])
    if not np.array_equal(np.sort(sums), np.sort(ref_sums)):
        return "MISMATCH: the epoch's per-image sums are not the same multiset as Grain's"
    return "ok"


# -- the benchmark ------------------------------------------------------------------------------

DESCRIPTION = (
    f"{MNIST_N:,} dicts (uint8 28x28x1 image, int label); DataLoader(IndexSampler("
    f"shuffle=True, seed={SEED}, num_epochs=1), [Map subclass normalise, Batch({MNIST_BATCH})], "
    f"worker_count=0) vs torch DataLoader(shuffle=True, batch_size={MNIST_BATCH}, "
    f"num_workers=0); one run = one epoch = {LOADER_BATCHES} batches"
)


def hand_loop(source: list[dict[str, Any]], permutation: Any) -> Any:
    """The ceiling for one thread: the same work written by hand, no loader at all.

    A shuffled order, the per-element normalise and a stack per batch of 128
    (the last one partial, as the loaders give it).
    """
    return runners.hand_loop(source, permutation, normalise, MNIST_BATCH, drop_remainder=False)


def bench_loader(repeats: int) -> dict[str, Any]:
    print(f"  {DESCRIPTION}")
    source = mnist_source()
    impls = [
        Impl("chute", lambda: iter(data_loader(chute, source)), MNIST_N),
        Impl("grain", lambda: iter(data_loader(grain, source)), MNIST_N),
        Impl("torch", lambda: torch_loader(source), MNIST_N),
        Impl(
            "hand loop",
            lambda: hand_loop(source, np.random.default_rng(42).permutation(MNIST_N)),
            MNIST_N,
        ),
    ]
    chute_impl, grain_impl, torch_impl, hand_impl = impls

    # Output check, which is also every implementation's warm-up run.
    grain_out = common.collect(grain_impl, mnist_digest())
    chute_out = common.collect(chute_impl, mnist_digest())
    torch_out = common.collect(torch_impl, torch_digest)
    common.mark_reference(grain_impl, grain_out)
    common.check_against(chute_impl, chute_out, "grain", grain_out)
    common.check_against(torch_impl, torch_out, "grain", grain_out, check_torch)
    hand_out = common.collect(hand_impl, hand_digest)
    common.check_against(hand_impl, hand_out, "grain", grain_out, check_torch)
    del grain_out, chute_out, torch_out, hand_out
    common.report_check(
        impls,
        "grain",
        f"chute: all {LOADER_BATCHES} batches in order (first {CHECK_FULL_BATCHES} value by "
        "value, the rest by shape, dtype, per-image sums and labels); torch (its own order): "
        f"{LOADER_BATCHES} batches, shapes, float32 images, int64 labels, and the same "
        "multisets of labels and of per-image sums",
    )

    common.time_runs(impls, repeats)
    common.time_first_batch(impls)
    ratios = [
        Ratio("loader chute/grain", chute_impl, grain_impl, TARGETS["loader chute/grain"]),
        Ratio("loader chute/torch", chute_impl, torch_impl, TARGETS["loader chute/torch"]),
        # The limit of any single-threaded loader here: the user's own work.
        Ratio("loader hand loop/torch (ceiling)", hand_impl, torch_impl, None),
        Ratio("loader chute/hand loop", chute_impl, hand_impl, None),
    ]
    common.mark_invalid(ratios)
    return {
        "name": "loader",
        "description": DESCRIPTION,
        "unit": "elements/s",
        "impls": impls,
        "ratios": ratios,
        "batch_size": MNIST_BATCH,
        "batches_per_run": LOADER_BATCHES,
    }


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    env = common.environment()
    env["torch"] = torch.__version__
    env["torch_threads"] = torch.get_num_threads()
    print(
        f"loader benchmark: chute {env['chute']} vs grain {env['grain']} vs torch {env['torch']} "
        f"| {env['python']}, {env['cpus']} cpus, numpy {env['numpy']}"
    )
    print(
        f"timing: 1 warm-up run per implementation (the output check), then the median of "
        f"{args.repeats} timed runs; implementations alternate in one process; "
        "first batch = median of 3 builds of a fresh loader to its first batch"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    print("\n[loader]")
    res = bench_loader(args.repeats)
    res["seconds"] = time.perf_counter() - started

    print()
    rows = []
    for impl in res["impls"]:
        rate, median, fb = impl.rate(), impl.median, impl.first_batch
        rows.append(
            [
                res["name"],
                impl.name,
                "ERROR" if impl.error else common.fmt_num(rate),
                common.fmt_num(res["batches_per_run"] / median if median else None, 1),
                common.fmt_num(median, 3),
                f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
                common.fmt_num(statistics.median(fb) * 1e3 if fb else None, 1),
                impl.check.split(":")[0],
            ]
        )
    common.print_table(
        ["bench", "impl", "elements/s", "batches/s", "run s", "spread", "1st batch ms", "output"],
        rows,
        right={2, 3, 4, 5, 6},
    )
    return common.finish("loader", args, env, started, [res])


if __name__ == "__main__":
    sys.exit(main())
