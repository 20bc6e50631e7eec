"""Worker-process benchmarks: chute's ``mp_prefetch`` against Grain's.

Both libraries run the very same pipeline code (a function that takes the
module, ``chute`` or ``grain``) in one process, alternating, with 2 worker
processes each (``mp_prefetch(MultiprocessingOptions(num_workers=2))``):

1. ``cpu``: ``MapDataset.range(N).map(work).to_iter_dataset().batch(32)``
   where ``work`` is about 1 ms of pure-Python arithmetic (its iteration count
   calibrated once at start); chute with 0 and with 2 workers, Grain with 2.
2. ``images``: the same shape of pipeline whose map makes a seeded random
   224x224x3 uint8 image and flips it; rates also in MB/s of output batches.
3. ``first_batch``: seconds from ``iter()`` to the first batch of the
   ``images`` pipeline, each trial in a fresh Python process (so starting the
   workers, and chute's fork server, is included).

Also: peak RSS of the parent and of the workers, whether the workers are gone
after every ``close()``, and whether /dev/shm is left with chute segments.

chute and grain are imported inside ``main()`` (and the first-batch child),
not at the top: Grain's workers are spawned processes that re-import this
file, and they should import what a user's script would, not both libraries.

Run through ``bash benchmarks/run workers``; see README.md.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

import common
from common import Impl, Ratio

# Grain reads absl flags in its worker processes; with JAX installed next to it (the
# `device` benchmark installs it) an unparsed flag crashes them.  Mark the flags as
# parsed, with their defaults, here at import time, which Grain's spawned workers
# repeat when they re-import this script.
try:
    from absl import flags as _absl_flags

    _absl_flags.FLAGS.mark_as_parsed()
except ImportError:  # pragma: no cover - absl comes with grain
    pass

TARGETS = {
    "cpu chute 2 workers/chute 0 workers": 1.6,
    "cpu chute 2 workers/grain 2 workers": 3.0,
    "images chute/grain": 3.0,
    "first_batch chute": 0.5,  # seconds, at most
}

WORKERS = 2
BATCH = 32
CPU_N = 4096  # 128 batches; about 4 s for chute with 0 workers, 2 s with 2
CPU_WORK_S = 1e-3  # the calibrated cost of one call of ``work``
IMAGES_N = 4096  # 128 batches of 32 x 224x224x3 uint8 (616 MB per epoch)
IMAGE_SHAPE = (224, 224, 3)
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE))
FIRST_BATCH_TRIALS = 3
CHECK_FULL_BATCHES = 3  # images: compared value by value; the others by hash
SHUTDOWN_WAIT_S = 10.0  # how long workers may take to exit after close()
SAMPLE_EVERY_S = 0.02  # the memory sampler's period
CHILD_FLAG = "--first-batch-child"
CHILD_TAG = "FIRST_BATCH_RESULT "
MIB = 1 << 20

# -- the pipelines ------------------------------------------------------------------------------


def work(x: int, iterations: int) -> int:
    """About 1 ms of pure-Python arithmetic (``iterations`` is calibrated); holds the GIL."""
    acc = x
    for i in range(iterations):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def image(index: int) -> np.ndarray:
    """A random 224x224x3 uint8 image seeded by ``index``, flipped left to right."""
    rng = np.random.default_rng(index)
    img = rng.integers(0, 256, size=IMAGE_SHAPE, dtype=np.uint8)
    return np.ascontiguousarray(img[:, ::-1])


def with_workers(lib: Any, ds: Any, workers: int) -> Any:
    """``ds.mp_prefetch`` with ``workers`` processes (0: chute returns ``ds`` itself)."""
    return ds.mp_prefetch(lib.multiprocessing.MultiprocessingOptions(num_workers=workers))


def cpu_pipeline(lib: Any, iterations: int, workers: int) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    ds = (
        lib.MapDataset.range(CPU_N)
        .map(functools.partial(work, iterations=iterations))
        .to_iter_dataset()
        .batch(BATCH)
    )
    return with_workers(lib, ds, workers)


def images_pipeline(lib: Any, workers: int = WORKERS) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    ds = lib.MapDataset.range(IMAGES_N).map(image).to_iter_dataset().batch(BATCH)
    return with_workers(lib, ds, workers)


def expected_first_image_batch() -> np.ndarray:
    """Worker 0 reads indices 0, 2, 4, ...; its first batch comes first."""
    return np.stack([image(i) for i in range(0, WORKERS * BATCH, WORKERS)])


# -- processes under this one (/proc) -----------------------------------------------------------


def proc_status(pid: int | str) -> dict[str, str]:
    """The fields of /proc/<pid>/status ({} if the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def kib(status: dict[str, str], key: str) -> int | None:
    value = status.get(key, "").split()
    return int(value[0]) if value else None


def children(pid: int) -> list[int]:
    """The children of ``pid``, started by any of its threads."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


_kinds: dict[int, str] = {}
seen_pids: set[int] = {os.getpid()}


def kind_of(pid: int, parent: int) -> str:
    """``worker``, or a helper: ``forkserver`` (chute's) or ``resource tracker``."""
    if pid not in _kinds:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = ""
        if "resource_tracker" in cmd:
            _kinds[pid] = "resource tracker"
        elif parent == os.getpid() and "forkserver" in cmd:
            _kinds[pid] = "forkserver"  # chute's workers are its children (same cmdline)
        else:
            _kinds[pid] = "worker"
    return _kinds[pid]


def descendants() -> list[tuple[int, str]]:
    """(pid, kind) of every live (not zombie) process below this one."""
    out, todo = [], [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid in children(parent):
            todo.append(pid)
            if proc_status(pid).get("State", "Z").startswith("Z"):
                continue
            seen_pids.add(pid)
            out.append((pid, kind_of(pid, parent)))
    return out


def live_workers() -> list[int]:
    return [pid for pid, kind in descendants() if kind == "worker"]


def shm_names() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


# -- worker shutdown after every close() --------------------------------------------------------


class ShutdownChecked:
    """An iterator whose ``close()`` also waits for the worker processes to exit.

    ``iter()`` of it is the library's own iterator, so a ``for`` loop over it
    costs nothing extra; ``close()`` (never timed) closes that iterator and
    records how long the workers took to go, or which of them did not.
    """

    def __init__(self, it: Any, log: list[dict[str, Any]]) -> None:
        self._it, self._log = it, log

    def __iter__(self) -> Any:
        return self._it

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        common.close(self._it)
        start = time.perf_counter()
        while (alive := live_workers()) and time.perf_counter() - start < SHUTDOWN_WAIT_S:
            time.sleep(0.01)
        self._log.append({"exit_s": time.perf_counter() - start, "left_alive": alive})


def checked(make: Any, log: list[dict[str, Any]]) -> Any:
    return lambda: ShutdownChecked(iter(make()), log)


def shutdown_summary(log: list[dict[str, Any]]) -> str:
    if not log:
        return "never closed"
    bad = [e for e in log if e["left_alive"]]
    worst = max(e["exit_s"] for e in log)
    text = f"{len(log)} closes, workers gone within {worst:.2f} s"
    if bad:
        text += f"; {len(bad)} closes left workers alive after {SHUTDOWN_WAIT_S:g} s"
    return text


# -- peak memory ----------------------------------------------------------------------------------


def reset_peak_rss() -> bool:
    """Resets this process's VmHWM to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure_memory(impl: Impl) -> dict[str, Any]:
    """One untimed run of ``impl`` with a sampler thread reading VmHWM of every process below.

    Not part of the timed runs, so the sampler cannot slow them.
    """
    common.wait_quiet()
    shm_before = shm_names()
    peaks: dict[int, tuple[str, int]] = {}
    shm_seen: set[str] = set()
    stop = threading.Event()

    def sample() -> None:
        while True:
            for pid, kind in descendants():
                hwm = kib(proc_status(pid), "VmHWM")
                if hwm is not None and hwm > peaks.get(pid, (kind, 0))[1]:
                    peaks[pid] = (kind, hwm)
            shm_seen.update(n for n in shm_names() - shm_before if ours_or_not_chute(n))
            if stop.wait(SAMPLE_EVERY_S):
                return

    rss_before = kib(proc_status("self"), "VmRSS")
    reset = reset_peak_rss()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    it = None
    try:
        with common.time_limit(common.RUN_TIMEOUT_S):
            it = impl.make_iter()
            batches = sum(1 for _ in it)
        parent_peak = kib(proc_status("self"), "VmHWM")
    finally:
        stop.set()
        sampler.join()
        if it is not None:
            common.close(it)
    workers = sorted(v for v in peaks.values() if v[0] == "worker")
    helpers = sorted(v for v in peaks.values() if v[0] != "worker")
    return {
        "batches": batches,
        "parent_rss_before_mib": rss_before / 1024 if rss_before else None,
        "parent_peak_mib": parent_peak / 1024 if parent_peak else None,
        "parent_peak_is_for_this_run": reset,
        "worker_peaks_mib": [hwm / 1024 for _, hwm in workers],
        "helper_peaks_mib": {kind: hwm / 1024 for kind, hwm in helpers},
        "new_shm_segments_seen": len(shm_seen),
        "new_shm_segment_names": sorted(shm_seen)[:20],
    }


# -- output checks -------------------------------------------------------------------------------


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


def image_digest() -> Any:
    """Keeps the first batches whole; for the rest, shape, dtype and a hash of the bytes."""
    seen = [0]

    def digest(batch: Any) -> Any:
        seen[0] += 1
        if seen[0] <= CHECK_FULL_BATCHES or not isinstance(batch, np.ndarray):
            return batch
        h = hashlib.blake2b(np.ascontiguousarray(batch).data, digest_size=16).digest()
        return {"shape": list(batch.shape), "dtype": batch.dtype.str, "hash": list(h)}

    return digest


# -- 1. cpu ---------------------------------------------------------------------------------------


def timed_call(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


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


def bench_cpu(chute: Any, grain: Any, repeats: int) -> dict[str, Any]:
    iterations, per_call = calibrate()
    description = (
        f"range({CPU_N}).map(work).to_iter_dataset().batch({BATCH}) [.mp_prefetch(2 workers)]; "
        f"work = {iterations:,} iterations of pure-Python arithmetic, {per_call * 1e3:.2f} ms "
        f"per call here; one run = one epoch = {CPU_N // BATCH} batches"
    )
    print(f"  {description}")
    logs: dict[str, list[dict[str, Any]]] = {"chute 2 workers": [], "grain 2 workers": []}
    impls = [
        Impl("chute 0 workers", lambda: iter(cpu_pipeline(chute, iterations, 0)), CPU_N),
        Impl(
            "chute 2 workers",
            checked(lambda: cpu_pipeline(chute, iterations, WORKERS), logs["chute 2 workers"]),
            CPU_N,
        ),
        Impl(
            "grain 2 workers",
            checked(lambda: cpu_pipeline(grain, iterations, WORKERS), logs["grain 2 workers"]),
            CPU_N,
        ),
    ]
    chute0, chute2, grain2 = impls

    # Output check, which is also every implementation's warm-up run.
    grain_out = common.collect(grain2)
    chute2_out = common.collect(chute2)
    chute0_out = common.collect(chute0)
    common.mark_reference(grain2, grain_out)
    common.check_against(chute2, chute2_out, "grain", grain_out)
    common.check_against(chute0, chute0_out, "chute 2 workers", chute2_out, same_elements)
    if chute0.check == "ok":
        want = np.array([work(i, iterations) for i in range(BATCH)])
        if not np.array_equal(np.asarray(chute0_out[0]), want):
            chute0.check = "MISMATCH: the first batch is not work(0..31)"
    del grain_out, chute2_out, chute0_out
    common.report_check(
        impls,
        "grain",
        f"chute 2 workers = grain 2 workers, all {CPU_N // BATCH} batches in order; "
        "chute 0 workers: the same elements in full batches, the first batch = work(0..31)",
    )

    common.time_runs(impls, repeats)
    common.time_first_batch(impls)
    memory = {i.name: measure_memory(i) for i in (chute2, grain2) if i.error is None}
    ratios = [
        Ratio(
            "cpu chute 2 workers/chute 0 workers",
            chute2,
            chute0,
            TARGETS["cpu chute 2 workers/chute 0 workers"],
        ),
        Ratio(
            "cpu chute 2 workers/grain 2 workers",
            chute2,
            grain2,
            TARGETS["cpu chute 2 workers/grain 2 workers"],
        ),
    ]
    common.mark_invalid(ratios)
    diagnosis = None
    if chute0.median and chute2.median:
        batches = CPU_N // BATCH
        ideal = chute0.median / WORKERS
        extra = chute2.median - ideal
        diagnosis = (
            f"chute 2 workers: {chute2.median:.2f} s a run against {ideal:.2f} s for half the "
            f"0-worker run; the difference, {extra:.2f} s, is {extra / batches * 1e3:.1f} ms a "
            f"batch ({extra / CPU_N * 1e6:.0f} us an element) of start-up, transfer and "
            "overlap loss"
        )
        if grain2.rate():
            ceiling = WORKERS * (chute0.rate() or 0) / grain2.rate()
            diagnosis += (
                f"; {WORKERS} workers can at most double the 0-worker rate on {WORKERS} cores, "
                f"so chute/grain can reach at most {ceiling:.2f}x here"
            )
        print(f"  {diagnosis}")
    return {
        "name": "cpu",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": ratios,
        "work_iterations": iterations,
        "work_seconds_per_call": per_call,
        "n": CPU_N,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": diagnosis,
    }


# -- 2. images ------------------------------------------------------------------------------------


def bench_images(chute: Any, grain: Any, repeats: int) -> dict[str, Any]:
    per_image = statistics.median(
        timed_call(lambda: [image(i) for i in range(20)]) / 20 for _ in range(5)
    )
    description = (
        f"range({IMAGES_N}).map(image).to_iter_dataset().batch({BATCH}).mp_prefetch(2 workers); "
        f"image(i) = a 224x224x3 uint8 image from default_rng(i), flipped (img[:, ::-1] made "
        f"contiguous), {per_image * 1e3:.2f} ms here; one run = one epoch = "
        f"{IMAGES_N // BATCH} batches, {IMAGES_N * IMAGE_BYTES / 1e6:.0f} MB"
    )
    print(f"  {description}")
    logs: dict[str, list[dict[str, Any]]] = {"chute 2 workers": [], "grain 2 workers": []}
    impls = [
        Impl(
            "chute 2 workers",
            checked(lambda: images_pipeline(chute), logs["chute 2 workers"]),
            IMAGES_N,
        ),
        Impl(
            "grain 2 workers",
            checked(lambda: images_pipeline(grain), logs["grain 2 workers"]),
            IMAGES_N,
        ),
    ]
    chute2, grain2 = impls

    grain_out = common.collect(grain2, image_digest())
    chute_out = common.collect(chute2, image_digest())
    common.mark_reference(grain2, grain_out)
    common.check_against(chute2, chute_out, "grain", grain_out)
    if chute2.check == "ok":
        diff = common.tree_difference(chute_out[0], expected_first_image_batch())
        if diff:
            chute2.check = f"MISMATCH: first batch vs image(0, 2, ..., 62): {diff}"
    del grain_out, chute_out
    common.report_check(
        impls,
        "grain",
        f"all {IMAGES_N // BATCH} batches in order (first {CHECK_FULL_BATCHES} value by value, "
        "the rest by shape, dtype and a hash of the bytes); first batch = image(0, 2, ..., 62)",
    )

    common.time_runs(impls, repeats)
    common.time_first_batch(impls)
    memory = {i.name: measure_memory(i) for i in impls if i.error is None}
    ratios = [Ratio("images chute/grain", chute2, grain2, TARGETS["images chute/grain"])]
    common.mark_invalid(ratios)
    diagnosis = None
    if chute2.rate() and grain2.rate():
        ceiling = WORKERS / per_image
        diagnosis = (
            f"the map alone costs {per_image * 1e3:.2f} ms an image here, so 2 workers could give "
            f"at most {ceiling:,.0f} images/s ({ceiling * IMAGE_BYTES / 1e6:,.0f} MB/s); chute "
            f"reached {chute2.rate() / ceiling:.0%} of that, grain {grain2.rate() / ceiling:.0%}"
        )
        print(f"  {diagnosis}")
    return {
        "name": "images",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": ratios,
        "image_seconds_in_parent": per_image,
        "bytes_per_element": IMAGE_BYTES,
        "n": IMAGES_N,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": diagnosis,
    }


# -- 3. first batch, in a fresh process per trial -------------------------------------------------


def first_batch_child(lib_name: str) -> int:
    """Child mode: import ``lib_name``, time iter() to the first images batch, print JSON."""
    t0 = time.perf_counter()
    lib = __import__(lib_name)
    imported = time.perf_counter() - t0
    ds = images_pipeline(lib)
    start = time.perf_counter()
    it = iter(ds)
    made = time.perf_counter()
    batch = next(it)
    done = time.perf_counter()
    diff = common.tree_difference(batch, expected_first_image_batch())
    common.close(it)
    result = {
        "seconds": done - start,
        "iter_s": made - start,
        "next_s": done - made,
        "import_s": imported,
        "pid": os.getpid(),
        "check": f"MISMATCH: {diff}" if diff else "ok",
    }
    print(CHILD_TAG + json.dumps(result), flush=True)
    return 0


def run_child(lib_name: str) -> dict[str, Any]:
    script = os.path.abspath(__file__)
    proc = subprocess.Popen(
        [sys.executable, script, CHILD_FLAG, lib_name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen_pids.add(proc.pid)
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
            return result
    raise RuntimeError(
        f"the first-batch process exited with {proc.returncode} and no result; "
        f"its stderr ends: {err[-2000:]}"
    )


def bench_first_batch() -> dict[str, Any]:
    description = (
        "seconds from iter() to the first batch of the images pipeline with 2 workers; "
        f"each of {FIRST_BATCH_TRIALS} trials in a fresh Python process (worker start, and "
        "chute's fork server, included; the import of the library is not)"
    )
    print(f"  {description}")
    impls = [
        Impl("chute 2 workers", lambda: iter(()), 1),
        Impl("grain 2 workers", lambda: iter(()), 1),
    ]
    trials: dict[str, list[dict[str, Any]]] = {i.name: [] for i in impls}
    for t in range(FIRST_BATCH_TRIALS):
        for impl in impls[t % 2 :] + impls[: t % 2]:
            if impl.error is not None:
                continue
            try:
                common.wait_quiet()
                result = run_child(impl.name.split()[0])
            except Exception:
                common.fail(impl, f"first-batch trial {t + 1}")
                continue
            trials[impl.name].append(result)
            impl.times.append(result["seconds"])
            impl.first_batch.append(result["seconds"])
    for impl in impls:
        checks = {r["check"] for r in trials[impl.name]}
        impl.check = next((c for c in checks if c != "ok"), "ok" if checks else "not checked")
    common.report_check(impls, "image(0, 2, ..., 62)", "the first batch = image(0, 2, ..., 62)")
    for impl in impls:
        parts = ", ".join(
            f"{r['seconds'] * 1e3:.0f} (iter {r['iter_s'] * 1e3:.0f} + "
            f"next {r['next_s'] * 1e3:.0f})"
            for r in trials[impl.name]
        )
        print(f"  {impl.name}: {parts} ms")
    # The target as a ratio of rates: (1 / chute's median) / (1 / 0.5 s) = 0.5 s / chute's median.
    limit = TARGETS["first_batch chute"]
    budget = Impl(f"{limit:g} s", lambda: iter(()), 1, times=[limit], check="reference")
    ratios = [
        Ratio(f"first_batch {limit:g} s/chute (chute <= {limit:g} s)", impls[0], budget, 1.0),
        Ratio("first_batch grain time/chute time", impls[0], impls[1], None),
    ]
    common.mark_invalid(ratios)
    return {
        "name": "first_batch",
        "description": description,
        "unit": "seconds to the first batch (run_time_s holds the trials; rate = 1/seconds)",
        "impls": impls,
        "ratios": ratios,
        "trials": trials,
        "target_seconds": limit,
    }


# -- reporting ------------------------------------------------------------------------------------


def mib(x: float | None) -> str:
    return common.fmt_num(x, 0)


def cleanup_report(shm_start: set[str]) -> tuple[dict[str, Any], list[str]]:
    """New /dev/shm entries since the start, and workers still alive; (JSON, problems)."""
    gc.collect()
    deadline = time.perf_counter() + 3.0
    while True:
        new = sorted(shm_names() - shm_start)
        ours = [n for n in new if n.startswith("chute") and owner(n) in seen_pids]
        if not ours or time.perf_counter() > deadline:
            break
        time.sleep(0.05)
    chute_other = [n for n in new if n.startswith("chute") and n not in ours]
    other = [n for n in new if not n.startswith("chute")]
    workers = live_workers()
    print(
        f"/dev/shm after the benchmark: {len(ours)} new chute segments of this benchmark's "
        f"processes left, {len(other)} other new entries (not chute's: Python's psm_* from Grain, "
        "or other programs')"
        + (f", {len(chute_other)} chute segments of other processes" if chute_other else "")
    )
    print(f"worker processes still alive at the end: {len(workers)}")
    problems = []
    if ours:
        problems.append(f"chute left {len(ours)} /dev/shm segments: {', '.join(ours[:10])}")
    if workers:
        problems.append(f"{len(workers)} worker processes still alive at the end: {workers}")
    return {
        "new_chute_segments_ours": ours,
        "new_chute_segments_other_processes": chute_other,
        "new_other_entries": other,
        "workers_alive_at_end": workers,
    }, problems


def ours_or_not_chute(name: str) -> bool:
    """False for chute segments of other programs on this machine (their pid is not ours)."""
    return not name.startswith("chute") or owner(name) in seen_pids


def owner(segment: str) -> int | None:
    """The pid in a ``chute-<pid>-...`` segment name."""
    parts = segment.split("-")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


def print_results(results: list[dict[str, Any]]) -> None:
    rows, notes = [], []
    for res in results:
        if res["name"] == "first_batch":
            continue
        memory, logs = res.get("memory", {}), res.get("shutdown", {})
        for impl in res["impls"]:
            rate, fb, mem = impl.rate(), impl.first_batch, memory.get(impl.name, {})
            mb = rate * IMAGE_BYTES / 1e6 if rate and res["name"] == "images" else None
            rows.append(
                [
                    res["name"],
                    impl.name,
                    "ERROR" if impl.error else common.fmt_num(rate),
                    common.fmt_num(rate / BATCH if rate else None, 1),
                    common.fmt_num(mb),
                    common.fmt_num(impl.median, 3),
                    f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
                    common.fmt_num(statistics.median(fb) * 1e3 if fb else None, 1),
                    mib(mem.get("parent_peak_mib")),
                    ", ".join(mib(x) for x in mem.get("worker_peaks_mib", [])) or "-",
                    impl.check.split(":")[0],
                ]
            )
            if impl.name in logs:
                shm = mem.get("new_shm_segments_seen")
                notes.append(
                    f"{res['name']} {impl.name}: {shutdown_summary(logs[impl.name])}"
                    + (f"; {shm} new /dev/shm entries during the memory run" if mem else "")
                )
    print()
    common.print_table(
        [
            "bench",
            "impl",
            "elements/s",
            "batches/s",
            "MB/s",
            "run s",
            "spread",
            "1st batch ms (warm)",
            "parent peak MiB",
            "worker peaks MiB",
            "output",
        ],
        rows,
        right={2, 3, 4, 5, 6, 7, 8, 9},
    )
    for res in results:
        if res["name"] != "first_batch":
            continue
        print()
        rows = [
            [
                "first_batch",
                impl.name,
                common.fmt_num(impl.median * 1e3 if impl.median else None, 0),
                ", ".join(f"{t * 1e3:.0f}" for t in impl.times) or "-",
                "ERROR" if impl.error else impl.check.split(":")[0],
            ]
            for impl in res["impls"]
        ]
        common.print_table(
            ["bench", "impl", "1st batch ms (fresh process)", "trials ms", "output"],
            rows,
            right={2, 3},
        )
    print("\nworker shutdown after close() (all runs) and shared memory:")
    for line in notes:
        print(f"  {line}")
    print(
        "\nparent peak: VmHWM of this process during one extra untimed run (reset before it); "
        "worker peaks: VmHWM of each worker (forked workers count pages shared with chute's "
        "fork server)"
    )


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    try:
        import grain
    except ImportError:
        sys.exit(
            "bench_workers: the peer library 'grain' is not installed; use bash benchmarks/run"
        )
    try:
        import chute
    except ImportError:
        sys.exit("bench_workers: chute is not installed; use bash benchmarks/run")
    shm_start = shm_names()
    env = common.environment()
    print(
        f"worker benchmarks: chute {env['chute']} vs grain {env['grain']} | {env['python']}, "
        f"{env['cpus']} cpus, numpy {env['numpy']}; {WORKERS} worker processes each"
    )
    print(
        f"timing: 1 warm-up run per implementation (the output check), then the median of "
        f"{args.repeats} timed runs; implementations alternate in one process; workers are "
        "closed after every run and must be gone before the next"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    results = []
    benches = (
        ("cpu", lambda: bench_cpu(chute, grain, args.repeats)),
        ("images", lambda: bench_images(chute, grain, args.repeats)),
        ("first_batch", bench_first_batch),
    )
    for name, bench in benches:
        print(f"\n[{name}]")
        t0 = time.perf_counter()
        res = bench()
        res["seconds"] = time.perf_counter() - t0
        results.append(res)

    print_results(results)
    print()
    cleanup, problems = cleanup_report(shm_start)
    for res in results:
        for name, log in res.get("shutdown", {}).items():
            if name.startswith("chute") and any(e["left_alive"] for e in log):
                problems.append(f"{res['name']} {name}: {shutdown_summary(log)}")
    status = common.finish("workers", args, env, started, results)
    for line in problems:
        print(f"PROBLEM: {line}")
    if args.json and os.path.exists(args.json):
        with open(args.json) as f:
            data = json.load(f)
        data["cleanup"] = {**cleanup, "problems": problems}
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
    return 1 if problems else status


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == CHILD_FLAG:
        sys.exit(first_batch_child(sys.argv[2]))
    sys.exit(main())
