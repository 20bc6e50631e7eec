"""The ``images`` workload: 150 KB elements, and more workers than cores.

``MapDataset.range(N).map(image).to_iter_dataset().batch(32)``, where ``image(i)`` is a
seeded random 224x224x3 uint8 image, flipped; rates also in MB/s of output batches.
chute, Grain, PyTorch and the limit with 2 workers, and, in the same alternating group,
chute and PyTorch with 4 and 8 workers and the limit with 4 and 8 bare processes: what
the machine itself loses with more processes than cores.  ``first_batch`` starts this
pipeline too.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio
from workers.harness import (
    BATCH,
    CHECK_FULL_BATCHES,
    IMAGE_BYTES,
    IMAGE_SHAPE,
    LIMIT,
    WORKERS,
    bench_group,
    check_bare,
    check_images,
    image_digest,
    image_hashes,
    timed_call,
)
from workers.memory import parent_peak_ratio
from workers.processes import checked

TARGETS = {
    "images chute/grain": 3.0,
    "images chute/limit": 0.85,
    "images chute/torch": 1.2,
    "images chute 8 workers/chute 2 workers": 0.9,
    "images parent peak torch/chute": 1.0,
}
MANY_WORKERS = (4, 8)  # more workers than the machine's 2 cores
IMAGES_N = 4096  # 128 batches of 32 x 224x224x3 uint8 (616 MB per epoch)


def image(index: int) -> np.ndarray:
    """A random 224x224x3 uint8 image seeded by ``index``, flipped left to right."""
    rng = np.random.default_rng(index)
    img = rng.integers(0, 256, size=IMAGE_SHAPE, dtype=np.uint8)
    return np.ascontiguousarray(img[:, ::-1])


def images_pipeline(lib: Any, workers: int = WORKERS, n: int = IMAGES_N) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    ds = lib.MapDataset.range(n).map(image).to_iter_dataset().batch(BATCH)
    return runners.with_workers(lib, ds, workers)


def expected_first_image_batch() -> np.ndarray:
    """Worker 0 reads indices 0, 2, 4, ...; its first batch comes first."""
    return np.stack([image(i) for i in range(0, WORKERS * BATCH, WORKERS)])


def worker_order(n: int, workers: int) -> list[int]:
    """The element order of ``mp_prefetch``: worker w batches w, w + W, ...; the parent
    takes one batch from each worker in turn."""
    batches = []
    for w in range(workers):
        mine = list(range(w, n, workers))
        batches.append([mine[s : s + BATCH] for s in range(0, len(mine), BATCH)])
    order: list[int] = []
    for k in range(max(len(b) for b in batches)):
        for own in batches:
            if k < len(own):
                order.extend(own[k])
    return order


def images_impls(
    chute: Any, grain: Any, torch: Any, n: int, logs: dict[str, list[Any]]
) -> list[Impl]:
    """chute, Grain, PyTorch and the limit with 2 workers first; then more workers."""
    dataset = runners.map_dataset(torch, image, n)

    def logged(name: str, make: Any, closer: Any = common.close) -> Impl:
        logs[name] = []
        return Impl(name, checked(make, logs[name], closer), n)

    def chute_impl(workers: int) -> Impl:
        return logged(f"chute {workers} workers", lambda: images_pipeline(chute, workers, n))

    def torch_impl(workers: int) -> Impl:
        def make() -> Any:
            return runners.torch_loader(torch, dataset, workers, BATCH)

        return logged(f"torch {workers} workers", make, runners.shutdown_torch)

    def limit_impl(processes: int, stack: bool = False) -> Impl:
        """The machine's own limit with more processes than cores: bare forks, no transport;
        with ``stack``, each process also stacks its images into batches of 32."""
        if stack:
            job = runners.bare_map_and_stack(image, n, processes, BATCH, IMAGE_SHAPE)
        else:
            job = runners.bare_map(image, n, processes)
        name = f"{LIMIT}{'+stack' if stack else ''} {processes} processes"
        return logged(name, lambda: runners.bare_processes(job, processes))

    impls = [
        chute_impl(WORKERS),
        logged("grain 2 workers", lambda: images_pipeline(grain, WORKERS, n)),
        torch_impl(WORKERS),
        logged(LIMIT, lambda: runners.bare_processes(runners.bare_map(image, n, WORKERS), WORKERS)),
    ]
    for workers in MANY_WORKERS:
        impls += [chute_impl(workers), torch_impl(workers), limit_impl(workers)]
    return [*impls, limit_impl(WORKERS, stack=True), limit_impl(MANY_WORKERS[-1], stack=True)]


def check_images_outputs(impls: list[Impl], n: int) -> None:
    """The output check, which is also every implementation's warm-up run.  The harness
    computes every image's hash itself."""
    chute2, grain2 = impls[:2]
    want = np.concatenate(
        [
            image_hashes(np.stack([image(i) for i in range(s, s + BATCH)]))
            for s in range(0, n, BATCH)
        ]
    )
    grain_out = common.collect(grain2, image_digest())
    common.mark_reference(grain2, grain_out)
    for impl in impls[:1] + impls[2:]:
        if impl.name.startswith(LIMIT):
            check_bare(impl, common.collect(impl))
            continue
        out = common.collect(impl, image_digest())
        if out is None:
            impl.check = common.CHECK_RAISED
        elif impl is chute2:
            common.check_against(chute2, out, "grain", grain_out)
            if chute2.check == "ok":
                diff = common.tree_difference(out[0]["pixels"], expected_first_image_batch())
                if diff:
                    chute2.check = f"MISMATCH: first batch vs image(0, 2, ..., 62): {diff}"
        elif impl.name.startswith("chute"):
            workers = int(impl.name.split()[1])
            impl.check = check_images(out, want[worker_order(n, workers)])
        else:  # torch reads 0, 1, 2, ... whatever its number of workers
            impl.check = check_images(out, want)
        del out
    del grain_out
    common.report_check(
        impls,
        "grain",
        f"chute 2 workers = grain 2 workers, all {n // BATCH} batches in order (first "
        f"{CHECK_FULL_BATCHES} value by value, all by shape, dtype and a hash of every image), "
        "its first batch = image(0, 2, ..., 62); chute 4 and 8 workers: every image's hash "
        "= image(i)'s in mp_prefetch's order (worker w reads w, w + W, ...; one batch of each "
        "worker in turn); torch 2, 4, 8 workers: image(0), image(1), ... in order; limit: both "
        "processes finished",
    )


def images_ratios(impls: list[Impl], memory: dict[str, dict[str, Any]]) -> list[Ratio]:
    by_name = {impl.name: impl for impl in impls}
    chute2, grain2, torch2, limit = impls[:4]
    ratios = [
        Ratio("images chute/grain", chute2, grain2, TARGETS["images chute/grain"]),
        Ratio("images chute/limit", chute2, limit, TARGETS["images chute/limit"]),
        Ratio("images chute/torch", chute2, torch2, TARGETS["images chute/torch"]),
        Ratio("images torch/limit", torch2, limit, None),
    ]
    for lib in ("chute", "torch"):
        for workers in MANY_WORKERS:
            label = f"images {lib} {workers} workers/{lib} 2 workers"
            many, two = by_name[f"{lib} {workers} workers"], by_name[f"{lib} 2 workers"]
            ratios.append(Ratio(label, many, two, TARGETS.get(label)))
    for workers in MANY_WORKERS:  # what the machine itself loses with more processes than cores
        bare = by_name[f"{LIMIT} {workers} processes"]
        ratios += [
            Ratio(f"images limit {workers} processes/limit 2 processes", bare, limit, None),
            Ratio(
                f"images chute {workers} workers/limit {workers} processes",
                by_name[f"chute {workers} workers"],
                bare,
                None,
            ),
        ]
    most = MANY_WORKERS[-1]
    ratios.append(
        Ratio(
            f"images limit+stack {most} processes/limit+stack 2 processes",
            by_name[f"{LIMIT}+stack {most} processes"],
            by_name[f"{LIMIT}+stack {WORKERS} processes"],
            None,
        )
    )
    label = "images parent peak torch/chute"
    ratios.append(parent_peak_ratio(label, memory, chute2, torch2, TARGETS[label]))
    common.mark_invalid(ratios)
    return ratios


def images_diagnosis(impls: list[Impl], per_image: float) -> str | None:
    """The ceiling 2 workers could reach with ``image`` alone, and each one's share of it."""
    chute2, grain2, torch2, limit = impls[:4]
    if not chute2.rate():
        return None
    ceiling = WORKERS / per_image
    diagnosis = (
        f"the map alone costs {per_image * 1e3:.2f} ms an image here, so 2 workers could give "
        f"at most {ceiling:,.0f} images/s ({ceiling * IMAGE_BYTES / 1e6:,.0f} MB/s); "
        + ", ".join(
            f"{i.name} reached {i.rate() / ceiling:.0%} of that"
            for i in (chute2, grain2, torch2, limit)
            if i.rate()
        )
    )
    print(f"  {diagnosis}")
    return diagnosis


def bench_images(
    chute: Any, grain: Any, torch: Any, repeats: int, n: int = IMAGES_N
) -> dict[str, Any]:
    per_image = statistics.median(
        timed_call(lambda: [image(i) for i in range(20)]) / 20 for _ in range(5)
    )
    description = (
        f"range({n}).map(image).to_iter_dataset().batch({BATCH}).mp_prefetch(W workers); "
        f"torch: DataLoader(dataset, batch_size={BATCH}, num_workers=W), __getitem__(i) = "
        f"image(i); limit: 2 forked processes, image over w::2; image(i) = a 224x224x3 uint8 "
        f"image from default_rng(i), flipped (img[:, ::-1] made contiguous), "
        f"{per_image * 1e3:.2f} ms here; one run = one epoch = {n // BATCH} batches, "
        f"{n * IMAGE_BYTES / 1e6:.0f} MB"
    )
    print(f"  {description}")
    logs: dict[str, list[dict[str, Any]]] = {}
    impls = images_impls(chute, grain, torch, n, logs)
    check_images_outputs(impls, n)
    memory = bench_group(impls, repeats)
    return {
        "name": "images",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": images_ratios(impls, memory),
        "image_seconds_in_parent": per_image,
        "bytes_per_element": IMAGE_BYTES,
        "n": n,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": images_diagnosis(impls, per_image),
    }
