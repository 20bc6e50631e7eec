"""Peak memory: one extra untimed run of each implementation with worker processes.

Its loop touches every batch, as a training step would (the timed runs do not), while a
sampler thread reads VmHWM of every process below this one.  The parent's peak is its
own VmHWM, reset before the run; for an implementation that runs in the clean parent
process, that process's.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

import common
from common import Impl, Ratio
from runners import as_numpy
from workers.processes import descendants, kib, ours_or_not_chute, proc_status, shm_names

if TYPE_CHECKING:
    from workers.clean_parent import CleanParent

SAMPLE_EVERY_S = 0.02  # the memory sampler's period


def reset_peak_rss() -> bool:
    """Resets this process's VmHWM to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakSampler:
    """A thread that reads VmHWM of every process below this one, and the new /dev/shm
    entries, every ``SAMPLE_EVERY_S`` until ``stop()``."""

    def __init__(self) -> None:
        self.shm_before = shm_names()
        self.peaks: dict[int, tuple[str, int]] = {}  # pid: (kind, VmHWM in KiB)
        self.shm_seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            for pid, kind in descendants():
                hwm = kib(proc_status(pid), "VmHWM")
                if hwm is not None and hwm > self.peaks.get(pid, (kind, 0))[1]:
                    self.peaks[pid] = (kind, hwm)
            new = shm_names() - self.shm_before
            self.shm_seen.update(n for n in new if ours_or_not_chute(n))
            if self._stop.wait(SAMPLE_EVERY_S):
                return


def measure_memory(impl: Impl, parent: CleanParent | None = None) -> dict[str, Any]:
    """One untimed run of ``impl`` with a sampler thread reading VmHWM of every process below.

    Not part of the timed runs, so the sampler cannot slow them.  The loop touches
    every batch, as a training step would (the timed runs do not).  ``parent``: the
    process that runs ``impl`` when it is not this one (its peak is the parent's).
    """
    common.wait_quiet()
    sampler = PeakSampler()
    if parent is None:
        rss_before = kib(proc_status("self"), "VmRSS")
        reset = reset_peak_rss()
    else:
        rss_before, reset = parent.call("reset_peak")
        parent.mode = "touch"
    sampler.start()
    it = None
    try:
        with common.time_limit(common.RUN_TIMEOUT_S):
            it = impl.make_iter()
            batches = 0
            for batch in it:
                touch(batch)
                batches += 1
        parent_peak = kib(proc_status("self"), "VmHWM") if parent is None else parent.call("peak")
    finally:
        sampler.stop()
        if it is not None:
            common.close(it)
        if parent is not None:
            parent.mode = None
    workers = sorted(v for v in sampler.peaks.values() if v[0] == "worker")
    helpers = sorted(v for v in sampler.peaks.values() if v[0] != "worker")
    return {
        "batches": batches,
        "parent_rss_before_mib": rss_before / 1024 if rss_before else None,
        "parent_peak_mib": parent_peak / 1024 if parent_peak else None,
        "parent_peak_is_for_this_run": reset,
        "parent": "this process" if parent is None else "the clean parent process",
        "worker_peaks_mib": [hwm / 1024 for _, hwm in workers],
        "helper_peaks_mib": {kind: hwm / 1024 for kind, hwm in helpers},
        "new_shm_segments_seen": len(sampler.shm_seen),
        "new_shm_segment_names": sorted(sampler.shm_seen)[:20],
    }


def touch(batch: Any) -> None:
    """Reads one byte of every 4 KiB of a batch's arrays, so that all its pages are resident."""
    array = as_numpy(batch)
    if isinstance(array, np.ndarray) and array.size:
        int(np.ascontiguousarray(array).reshape(-1).view(np.uint8)[::4096].sum())


def measure_all(
    impls: list[Impl], parents: dict[str, CleanParent] | None = None
) -> dict[str, dict[str, Any]]:
    """``measure_memory`` of each implementation that has worker processes."""
    memory = {}
    for impl in impls:
        if impl.error is None and not impl.name.endswith(" 0 workers"):
            try:
                memory[impl.name] = measure_memory(impl, (parents or {}).get(impl.name))
            except Exception:
                common.fail(impl, "memory run")
    return memory


def parent_peak_ratio(
    label: str, memory: dict[str, dict[str, Any]], chute: Impl, torch: Impl, target: float | None
) -> Ratio:
    """A ratio of parent peaks as one of rates: (1 / chute's peak) / (1 / torch's peak)."""

    def peak(impl: Impl) -> Impl:
        mib = memory.get(impl.name, {}).get("parent_peak_mib")
        return Impl(
            f"{impl.name} parent peak",
            lambda: iter(()),
            1,
            times=[mib] if mib else [],
            check=impl.check,
            error=impl.error or (None if mib else "no memory measurement"),
        )

    return Ratio(label, peak(chute), peak(torch), target)
