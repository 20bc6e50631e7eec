"""The verdict: an ``ExecutionSummary``'s figures in plain language, with what to change.

Three questions, in order: did the user's loop wait for data at all (if
hardly, the pipeline is not the bottleneck); which stage does most of the
work; and where it runs: in this process (worker processes would share it
out), or in workers that are busy (they are the limit: more of them, if
there are idle cores, or a cheaper stage) or idle (the cost is in handing
elements over, or in stages after the pool).

Workers are never advised for a run shorter than ``SHORT_RUN_S``: starting
them (a pool of 2 forked workers gave its first element 20-50 ms after
``iter()`` on a 2-core machine; spawn, or a large pipeline to pickle, takes a
second or more) would take a large part of the run, so the verdict says to
profile a longer read instead.  Smaller dtypes are
suggested only when floating-point arrays make up most of the bytes handed
over (``FLOAT_HEAVY``): a batch of JPEG bytes or uint8 images has none to shrink.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["BUSY", "FLOAT_HEAVY", "HANDOFF_S", "SHORT_RUN_S", "WAITED_LITTLE", "verdict"]

WAITED_LITTLE = 0.1  # below this share of the time waiting, the loop is the bottleneck
BUSY = 0.7  # workers working at least this share of the time are the limit
HANDOFF_S = 50e-6  # about what a worker process spends handing one element over
SHORT_RUN_S = 0.5  # a whole read shorter than this is too short for (more) workers to pay off
FLOAT_HEAVY = 0.5  # float32/float64 arrays hold at least this share of the bytes handed over


def verdict(summary: Any) -> str:
    """What the summary's figures say, and what to change."""
    said = _where_the_time_goes(summary)
    retried = sum(s.retries or 0 for s in summary.stages)
    if retried:
        said += (
            f" The object store failed {retried:,} request(s) for a while (HTTP 429/5xx, "
            "timeouts, resets); each was retried after a backoff and nothing was lost, but "
            "many retries mean a throttled or flaky store."
        )
    return said


def _where_the_time_goes(summary: Any) -> str:
    if summary.elements == 0 or summary.wall_seconds <= 0:
        return "No elements read yet: read some, then ask again."
    waited = summary.wait_ratio
    head = f"Your loop waited for data {waited:.0%} of the time"
    if waited < WAITED_LITTLE:
        return (
            f"{head}: the pipeline is faster than your loop and is not the bottleneck; "
            "there is nothing to gain here."
        )
    work = [s for s in summary.stages if s.buffer is None and s.self_seconds > 0]
    if not work:
        return f"{head}; no stage did measurable work."
    hot = max(work, key=lambda s: s.self_seconds)
    what = f"{head}; {hot.share:.0%} of the work is `{hot.name}`"
    cores = summary.cpu_count
    if hot.where == "main":
        each = sum(s.self_seconds for s in work if s.where == "main") / summary.elements
        if each < HANDOFF_S and not summary.workers:
            return (
                f"{what}, but all the work for an element takes only {each * 1e6:.0f} µs: "
                "handing elements over from worker processes would cost more than it saves. "
                "The time goes into Python's per-element overhead; batch earlier, or do "
                "more per call."
            )
        if summary.workers:
            return (
                f"{what}, in this process after the worker pool: move it before "
                "mp_prefetch so the workers share it out."
            )
        if summary.wall_seconds < SHORT_RUN_S:
            return f"{what}, in this process. {_short(summary)}"
        how = (
            "DataLoader(worker_count=...)"
            if summary.stages[-1].kind == "DataLoader"
            else ".mp_prefetch(MultiprocessingOptions(num_workers=...))"
        )
        return (
            f"{what}, in this process: run it in worker processes ({how}; this machine "
            f"has {cores} usable core(s))."
        )
    busy = _worker_busy(summary)
    workers = summary.workers or 1
    if busy >= BUSY:
        idle = _idle_cores(cores)
        advice = (
            f"more workers would help (this machine has {idle} idle core(s))"
            if idle > 0
            else f"this machine has no idle cores, so make `{hot.name}` cheaper or use more cores"
        )
        if summary.wall_seconds < SHORT_RUN_S:
            advice = f"make `{hot.name}` cheaper. {_short(summary)}"
        return (
            f"{what}, in the {workers} worker(s), which are busy {busy:.0%} of the time: "
            f"the workers are the limit; {advice}."
        )
    smaller = "send smaller elements"
    handed = [s for s in summary.stages if s.where == "workers" and s.float_share is not None]
    share = handed[-1].float_share if handed else None  # of the elements the workers send
    if share is not None and share >= FLOAT_HEAVY:
        smaller += " (e.g. uint8 rather than float32 arrays)"
    return (
        f"{what}, in the {workers} worker(s), but they are busy only {busy:.0%} of the time: "
        "the time goes into handing elements to this process or into the stages after "
        f"the pool; {smaller} or raise per_worker_buffer_size."
    )


def _short(summary: Any) -> str:
    """Why a run of ``summary.wall_seconds`` gets no advice about workers."""
    return (
        f"The whole read took only {summary.wall_seconds * 1e3:.0f} ms: starting worker "
        "processes would take a large part of that, so they would not pay off. If your "
        "real run is longer, profile it for longer (chute profile --seconds N) to see where "
        "its time goes."
    )


def _worker_busy(summary: Any) -> float:
    own = sum(s.self_seconds for s in summary.stages if s.where == "workers" and s.buffer is None)
    capacity = summary.wall_seconds * max(1, summary.workers)
    return min(1.0, own / capacity) if capacity > 0 else 0.0


def _idle_cores(cores: int) -> int:
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on this system
        return 0
    return max(0, int(cores - load))
