"""The ``cpu`` workload: a map of about 1 ms of pure Python per element, which holds the GIL.

``MapDataset.range(N).map(work).to_iter_dataset().batch(32)``, ``work``'s iteration count
calibrated once at start; chute with 0 and 2 workers, Grain and PyTorch with 2, and the
limit (2 bare processes).  ``bench_stats`` times this pipeline too.
"""

from __future__ import annotations

import functools
import statistics
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio
from workers.harness import BATCH, LIMIT, WORKERS, bench_group, check_bare, timed_call
from workers.processes import checked

TARGETS = {
    "cpu chute 2 workers/chute 0 workers": 1.6,
    "cpu chute 2 workers/grain 2 workers": 3.0,
    "cpu chute 2 workers/limit": 0.92,
    "cpu chute 2 workers/torch 2 workers": 1.05,
}
CPU_N = 4096  # 128 batches; about 4 s for chute with 0 workers, 2 s with 2
CPU_WORK_S = 1e-3  # the calibrated cost of one call of ``work``


def work(x: int, iterations: int) -> int:
    """About 1 ms of pure-Python arithmetic (``iterations`` is calibrated); holds the GIL."""
    acc = x
    for i in range(iterations):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def cpu_pipeline(lib: Any, iterations: int, workers: int, n: int = CPU_N) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    ds = (
        lib.MapDataset.range(n)
        .map(functools.partial(work, iterations=iterations))
        .to_iter_dataset()
        .batch(BATCH)
    )
    return runners.with_workers(lib, ds, workers)


def calibrate() -> tuple[int, float]:
    """(iterations of ``work`` that take CPU_WORK_S, the measured seconds per call).

    The count comes from the fastest of 5 long calls (the least disturbed by
    other load); the cost per call is then the median of 5 chunks of 50 calls.
    """
    n = 2_000
    while timed_call(work, 0, n) < 0.02:
        n *= 2
    per_iteration = min(timed_call(work, 0, n) for _ in range(5)) / n
    iterations = max(1, round(CPU_WORK_S / per_iteration))
    chunks = [timed_call(lambda: [work(i, iterations) for i in range(50)]) / 50 for _ in range(5)]
    return iterations, statistics.median(chunks)


def same_elements(out: list[Any], ref: list[Any]) -> str:
    """``out`` (chute, 0 workers) holds the elements of ``ref`` (2 workers), in full batches."""
    try:
        sizes = sorted({len(b) for b in out})
        got = np.sort(np.concatenate([np.asarray(b) for b in out]))
        want = np.sort(np.concatenate([np.asarray(b) for b in ref]))
    except Exception as e:
        return f"MISMATCH: batches are not 1-d arrays ({type(e).__name__}: {e})"
    if sizes != [BATCH]:
        return f"MISMATCH: batch sizes {sizes}, expected all {BATCH}"
    if got.shape != want.shape or not np.array_equal(got, want):
        return "MISMATCH: 0 workers and 2 workers give different elements"
    return "ok"


def cpu_impls(
    chute: Any, grain: Any, torch: Any, iterations: int, n: int, logs: dict[str, list[Any]]
) -> list[Impl]:
    """chute 0 workers, chute, Grain and PyTorch with 2 workers, and the limit."""
    bound_work = functools.partial(work, iterations=iterations)
    dataset = runners.map_dataset(torch, bound_work, n)

    def logged(name: str, make: Any, closer: Any = common.close) -> Impl:
        logs[name] = []
        return Impl(name, checked(make, logs[name], closer), n)

    return [
        Impl("chute 0 workers", lambda: iter(cpu_pipeline(chute, iterations, 0, n)), n),
        logged("chute 2 workers", lambda: cpu_pipeline(chute, iterations, WORKERS, n)),
        logged("grain 2 workers", lambda: cpu_pipeline(grain, iterations, WORKERS, n)),
        logged(
            "torch 2 workers",
            lambda: runners.torch_loader(torch, dataset, WORKERS, BATCH),
            runners.shutdown_torch,
        ),
        logged(
            LIMIT,
            lambda: runners.bare_processes(runners.bare_map(bound_work, n, WORKERS), WORKERS),
        ),
    ]


def check_cpu(impls: list[Impl], iterations: int, n: int) -> None:
    """The output check, which is also every implementation's warm-up run."""
    chute0, chute2, grain2, torch2, limit = impls
    grain_out = common.collect(grain2)
    chute2_out = common.collect(chute2)
    chute0_out = common.collect(chute0)
    torch_out = common.collect(torch2, runners.as_numpy)
    common.mark_reference(grain2, grain_out)
    common.check_against(chute2, chute2_out, "grain", grain_out)
    common.check_against(chute0, chute0_out, "chute 2 workers", chute2_out, same_elements)
    if chute0.check == "ok":
        want = np.array([work(i, iterations) for i in range(BATCH)])
        if not np.array_equal(np.asarray(chute0_out[0]), want):
            chute0.check = "MISMATCH: the first batch is not work(0..31)"
    common.check_against(torch2, torch_out, "chute 0 workers", chute0_out)
    check_bare(limit, common.collect(limit))
    del grain_out, chute2_out, chute0_out, torch_out
    common.report_check(
        impls,
        "grain",
        f"chute 2 workers = grain 2 workers, all {n // BATCH} batches in order; "
        "chute 0 workers: the same elements in full batches, the first batch = work(0..31); "
        "torch 2 workers = chute 0 workers, all batches in order (both read 0, 1, 2, ...); "
        "limit: both processes finished",
    )


def cpu_ratios(impls: list[Impl]) -> list[Ratio]:
    chute0, chute2, grain2, torch2, limit = impls
    ratios = [
        Ratio(label, chute2, other, TARGETS[label])
        for label, other in (
            ("cpu chute 2 workers/chute 0 workers", chute0),
            ("cpu chute 2 workers/grain 2 workers", grain2),
            ("cpu chute 2 workers/limit", limit),
            ("cpu chute 2 workers/torch 2 workers", torch2),
        )
    ]
    ratios += [
        Ratio("cpu torch 2 workers/limit", torch2, limit, None),
        # The most any 2-process loader can be ahead of Grain here: the 3x above is beyond it.
        Ratio("cpu limit/grain 2 workers", limit, grain2, None),
    ]
    common.mark_invalid(ratios)
    return ratios


def cpu_diagnosis(impls: list[Impl], n: int) -> str | None:
    """How far chute's 2-worker run is from half its 0-worker run; the limit's run time."""
    chute0, chute2, _, _, limit = impls
    if not (chute0.median and chute2.median):
        return None
    batches = n // BATCH
    ideal = chute0.median / WORKERS
    extra = chute2.median - ideal
    diagnosis = (
        f"chute 2 workers: {chute2.median:.2f} s a run against {ideal:.2f} s for half the "
        f"0-worker run; the difference, {extra:.2f} s, is {extra / batches * 1e3:.1f} ms a "
        f"batch ({extra / n * 1e6:.0f} us an element) of start-up, transfer and "
        "overlap loss"
    )
    if limit.median:
        diagnosis += (
            f"; the limit (2 bare processes, no batches handed back) took {limit.median:.2f} s"
        )
    print(f"  {diagnosis}")
    return diagnosis


def bench_cpu(chute: Any, grain: Any, torch: Any, repeats: int, n: int = CPU_N) -> dict[str, Any]:
    iterations, per_call = calibrate()
    description = (
        f"range({n}).map(work).to_iter_dataset().batch({BATCH}) [.mp_prefetch(2 workers)]; "
        f"torch: DataLoader(dataset, batch_size={BATCH}, num_workers=2), __getitem__(i) = "
        f"work(i); limit: 2 forked processes, work over w::2; work = {iterations:,} iterations "
        f"of pure-Python arithmetic, {per_call * 1e3:.2f} ms per call here; one run = one "
        f"epoch = {n // BATCH} batches"
    )
    print(f"  {description}")
    logs: dict[str, list[dict[str, Any]]] = {}
    impls = cpu_impls(chute, grain, torch, iterations, n, logs)
    check_cpu(impls, iterations, n)
    memory = bench_group(impls, repeats)
    return {
        "name": "cpu",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": cpu_ratios(impls),
        "work_iterations": iterations,
        "work_seconds_per_call": per_call,
        "n": n,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": cpu_diagnosis(impls, n),
    }
