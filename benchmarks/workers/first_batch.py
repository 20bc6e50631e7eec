"""The ``first_batch`` workload: starting the workers, as a first epoch sees it.

Seconds from ``iter()`` to the first batch of the ``images`` pipeline with 2 workers,
each trial in a fresh Python process (``bench_workers.py --first-batch-child LIB
PARENT``, ``first_batch_child``), so that everything a user's first epoch pays is
included, for a plain script and for one that has imported JAX and runs a background
thread.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio
from workers import images, processes
from workers.harness import BATCH, ENTRY, WORKERS, pickle_by_value
from workers.images import IMAGES_N, expected_first_image_batch, image, images_pipeline

TARGETS = {
    "first_batch torch time/chute time (plain)": 1.0,
    # PyTorch forks even this parent (JAX warns that this can deadlock); chute does not, and
    # its target for this parent is the 0.35 s below, so this ratio is shown without one.
    "first_batch torch time/chute time (jax-thread)": None,
    "first_batch chute plain": 0.5,  # seconds, at most
    "first_batch chute jax-thread": 0.35,  # seconds, at most
}
FIRST_BATCH_TRIALS = 3
FIRST_BATCH_LIBS = ("chute", "torch", "grain")
FIRST_BATCH_PARENTS = ("plain", "jax-thread")
CHILD_FLAG = "--first-batch-child"
CHILD_TAG = "FIRST_BATCH_RESULT "


def keep_busy() -> None:
    """The background thread of a ``jax-thread`` parent: wakes every 10 ms until the end."""
    while True:
        time.sleep(0.01)


def jax_thread_parent() -> float:
    """Makes this process a ``jax-thread`` parent: JAX imported, ``jax.devices()`` called and
    a background thread running; the seconds that took."""
    t = time.perf_counter()
    import jax

    jax.devices()
    threading.Thread(target=keep_busy, daemon=True).start()
    return time.perf_counter() - t


def child_pipeline(lib_name: str, lib: Any) -> tuple[Any, Callable[[Any], None]]:
    """The images pipeline with 2 workers in ``lib`` (PyTorch: its DataLoader); its closer."""
    if lib_name == "torch":
        dataset = runners.map_dataset(lib, image, IMAGES_N)
        return runners.torch_loader(lib, dataset, WORKERS, BATCH), runners.shutdown_torch
    pickle_by_value(images)
    return images_pipeline(lib), common.close


def first_batch_child(lib_name: str, parent: str) -> int:
    """Child mode: time iter() to the first images batch of ``lib_name``; print JSON.

    ``parent``: ``plain``, or ``jax-thread`` (JAX imported, ``jax.devices()`` called and a
    background thread running before anything else).
    """
    setup_s = jax_thread_parent() if parent == "jax-thread" else None
    t0 = time.perf_counter()
    lib = importlib.import_module(lib_name)
    if lib_name == "torch":
        importlib.import_module("torch.utils.data")
    imported = time.perf_counter() - t0
    pipeline, closer = child_pipeline(lib_name, lib)
    start = time.perf_counter()
    it = iter(pipeline)
    made = time.perf_counter()
    batch = next(it)
    done = time.perf_counter()
    if lib_name == "torch":  # PyTorch reads 0, 1, 2, ...
        want = np.stack([image(i) for i in range(BATCH)])
    else:
        want = expected_first_image_batch()
    diff = common.tree_difference(np.asarray(runners.as_numpy(batch)), want)
    closer(it)
    result = {
        "seconds": done - start,
        "iter_s": made - start,
        "next_s": done - made,
        "import_s": imported,
        "jax_setup_s": setup_s,
        "pid": os.getpid(),
        "check": f"MISMATCH: {diff}" if diff else "ok",
    }
    print(CHILD_TAG + json.dumps(result), flush=True)
    return 0


def run_child(lib_name: str, parent: str) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, ENTRY, CHILD_FLAG, lib_name, parent],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.seen_pids.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=common.RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise TimeoutError(f"the first-batch process took over {common.RUN_TIMEOUT_S} s") from None
    for line in out.splitlines():
        if line.startswith(CHILD_TAG):
            result = json.loads(line[len(CHILD_TAG) :])
            result["returncode"] = proc.returncode
            result["stderr_tail"] = err.strip()[-500:]
            return result
    raise RuntimeError(
        f"the first-batch process exited with {proc.returncode} and no result; "
        f"its stderr ends: {err[-2000:]}"
    )


def run_trials(impls: list[Impl], trials: int) -> dict[str, list[dict[str, Any]]]:
    """``trials`` rounds of one trial of each (library, parent), the order rotated."""
    results: dict[str, list[dict[str, Any]]] = {i.name: [] for i in impls}
    for t in range(trials):
        k = t % len(impls)
        for impl in impls[k:] + impls[:k]:
            if impl.error is not None:
                continue
            try:
                common.wait_quiet()
                result = run_child(*impl.name.split())
            except Exception:
                common.fail(impl, f"first-batch trial {t + 1}")
                continue
            results[impl.name].append(result)
            impl.times.append(result["seconds"])
            impl.first_batch.append(result["seconds"])
    return results


def report_trials(impls: list[Impl], trials: dict[str, list[dict[str, Any]]]) -> None:
    """Each trial's batch check, and its time split into ``iter`` and ``next``."""
    for impl in impls:
        checks = {r["check"] for r in trials[impl.name]}
        impl.check = next((c for c in checks if c != "ok"), "ok" if checks else "not checked")
    common.report_check(
        impls,
        "the expected images",
        "the first batch = image(0, 2, ..., 62) (chute, grain), image(0, ..., 31) (torch)",
    )
    for impl in impls:
        parts = ", ".join(
            f"{r['seconds'] * 1e3:.0f} (iter {r['iter_s'] * 1e3:.0f} + "
            f"next {r['next_s'] * 1e3:.0f})"
            for r in trials[impl.name]
        )
        print(f"  {impl.name}: {parts} ms")
        warned = sum("os.fork() was called" in r["stderr_tail"] for r in trials[impl.name])
        if warned:
            print(f"    ({warned} of its trials printed JAX's warning that os.fork() was called)")


def budget(seconds: float) -> Impl:
    """A target in seconds as an implementation: (1 / chute's median) / (1 / budget)."""
    return Impl(f"{seconds:g} s", lambda: iter(()), 1, times=[seconds], check="reference")


def first_batch_ratios(impls: list[Impl]) -> list[Ratio]:
    by_name = {impl.name: impl for impl in impls}
    ratios = []
    for parent in FIRST_BATCH_PARENTS:
        chute_impl = by_name[f"chute {parent}"]
        limit = TARGETS[f"first_batch chute {parent}"]
        label = f"first_batch torch time/chute time ({parent})"
        ratios += [
            Ratio(label, chute_impl, by_name[f"torch {parent}"], TARGETS[label]),
            Ratio(
                f"first_batch {limit:g} s/chute {parent} (chute <= {limit:g} s)",
                chute_impl,
                budget(limit),
                1.0,
            ),
            Ratio(
                f"first_batch grain time/chute time ({parent})",
                chute_impl,
                by_name[f"grain {parent}"],
                None,
            ),
        ]
    common.mark_invalid(ratios)
    return ratios


def bench_first_batch(trials: int = FIRST_BATCH_TRIALS) -> dict[str, Any]:
    description = (
        "seconds from iter() to the first batch of the images pipeline with 2 workers (torch: "
        f"iter(DataLoader) then next); each of {trials} trials in a fresh Python "
        "process (worker start, and chute's fork server, included; the import of the library "
        "is not); parents: plain, and jax-thread (JAX imported, jax.devices() called, a "
        "background thread waking every 10 ms, all before the library's import)"
    )
    print(f"  {description}")
    impls = [
        Impl(f"{lib} {parent}", lambda: iter(()), 1)
        for parent in FIRST_BATCH_PARENTS
        for lib in FIRST_BATCH_LIBS
    ]
    results = run_trials(impls, trials)
    report_trials(impls, results)
    return {
        "name": "first_batch",
        "description": description,
        "unit": "seconds to the first batch (run_time_s holds the trials; rate = 1/seconds)",
        "impls": impls,
        "ratios": first_batch_ratios(impls),
        "trials": results,
        "target_seconds": {p: TARGETS[f"first_batch chute {p}"] for p in FIRST_BATCH_PARENTS},
    }
