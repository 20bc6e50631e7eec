"""The processes below the benchmark's, and whether the worker processes go.

* a walk of /proc finds every live process below this one and tells workers (chute's,
  Grain's, PyTorch's, the limit's) from helpers (chute's fork server, Python's resource
  tracker, the clean parent process);
* ``checked`` wraps an implementation so that every ``close()`` (never timed) also waits
  for its workers to exit, and logs how long they took;
* ``cleanup_report``, at the end: new /dev/shm entries and workers still alive.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from typing import Any

import common

SHUTDOWN_WAIT_S = 10.0  # how long workers may take to exit after close()
CLEAN_PARENT_FLAG = "--clean-parent"

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


def start_time(pid: int) -> str:
    """When ``pid`` started (field 22 of /proc/<pid>/stat), so a reused pid is a new process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


_kinds: dict[tuple[int, str], str] = {}
seen_pids: set[int] = {os.getpid()}


def kind_of(pid: int, parent: int) -> str:
    """``worker``, or a helper: ``forkserver`` (chute's) or ``resource tracker``.

    Workers are chute's (children of its fork server), Grain's (spawned), PyTorch's
    (forked from this process, like the limit's bare processes).
    """
    key = (pid, start_time(pid))
    if key not in _kinds:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = ""
        if "resource_tracker" in cmd:
            _kinds[key] = "resource tracker"
        elif parent == os.getpid() and "forkserver" in cmd:
            _kinds[key] = "forkserver"  # chute's workers are its children (same cmdline)
        elif parent == os.getpid() and CLEAN_PARENT_FLAG in cmd:
            _kinds[key] = "clean parent"  # its DataLoader's workers are its children
        else:
            _kinds[key] = "worker"
    return _kinds[key]


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
    costs nothing extra; ``close()`` (never timed) closes that iterator with
    ``closer`` and records how long the workers took to go, or which of them
    did not.
    """

    def __init__(
        self, it: Any, log: list[dict[str, Any]], closer: Callable[[Any], None] = common.close
    ) -> None:
        self._it, self._log, self._closer = it, log, closer

    def __iter__(self) -> Any:
        return self._it

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        self._closer(self._it)
        start = time.perf_counter()
        while (alive := live_workers()) and time.perf_counter() - start < SHUTDOWN_WAIT_S:
            time.sleep(0.01)
        self._log.append({"exit_s": time.perf_counter() - start, "left_alive": alive})


def checked(
    make: Any, log: list[dict[str, Any]], closer: Callable[[Any], None] = common.close
) -> Any:
    return lambda: ShutdownChecked(iter(make()), log, closer)


def shutdown_summary(log: list[dict[str, Any]]) -> str:
    if not log:
        return "never closed"
    bad = [e for e in log if e["left_alive"]]
    worst = max(e["exit_s"] for e in log)
    text = f"{len(log)} closes, workers gone within {worst:.2f} s"
    if bad:
        text += f"; {len(bad)} closes left workers alive after {SHUTDOWN_WAIT_S:g} s"
    return text


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
        "PyTorch's, or other programs')"
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
