"""Timing, checking and reporting helpers shared by the ``bench_*.py`` scripts.

The rules every benchmark follows (see README.md):

* every implementation runs in the same process, on the same data, with the
  implementations alternating run by run;
* the outputs are checked against each other before anything is timed, and a
  mismatch is reported loudly (its ratios are marked INVALID);
* a warm-up run (the output check) comes first, then ``repeats`` timed runs;
  rates are computed from the median run time, and the best is kept in the
  JSON too;
* before every timed run the process waits until the previous run's
  background threads have gone quiet, so no implementation pays for another's
  leftovers.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import logging
import os
import platform
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Grain logs a warning at import time when JAX is absent; keep the table clean.
logging.getLogger("absl").setLevel(logging.ERROR)

RUN_TIMEOUT_S = 120
"""A single run (one epoch of one implementation) taking longer is an error."""


# -- arguments and environment ----------------------------------------------------------


def parse_args(description: str, repeats: int = 3) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument(
        "--repeats",
        type=int,
        default=repeats,
        help=f"timed runs per implementation (default {repeats})",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def version_of(module_name: str) -> str:
    try:
        from importlib.metadata import version

        return version(module_name)
    except Exception:
        return "?"


def load_average() -> float | None:
    """The 1-minute load average of the machine (other processes included)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_warning() -> str | None:
    """A warning line when other processes keep the machine busy, else ``None``."""
    load, cpus = load_average(), os.cpu_count() or 1
    if load is not None and load > 0.5 * cpus:
        return (
            f"WARNING: machine load average {load:.1f} on {cpus} cpus before starting: "
            "other processes are busy, expect noisy rates (ratios suffer less)"
        )
    return None


def environment() -> dict[str, Any]:
    return {
        "load_average_at_start": load_average(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "chute": version_of("chute"),
        "grain": version_of("grain"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# -- keeping runs apart ---------------------------------------------------------------------


def wait_quiet(max_wait_s: float = 10.0, window_s: float = 0.05, busy: float = 0.05) -> float:
    """Waits until this process uses (almost) no CPU; returns the seconds waited.

    Background threads of an iterator that was just closed (prefetching that
    was still in flight) would otherwise be charged to the next run.
    """
    gc.collect()
    start = time.perf_counter()
    while time.perf_counter() - start < max_wait_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if (time.process_time() - cpu) / window_s < busy:
            break
    return time.perf_counter() - start


def close(iterator: Any) -> None:
    closer = getattr(iterator, "close", None)
    if closer is not None:
        closer()


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raises ``TimeoutError`` in the main thread after ``seconds``."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"run took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- measuring ------------------------------------------------------------------------------


@dataclass
class Impl:
    """One implementation of a benchmark.

    ``make_iter()`` builds the pipeline and returns a fresh iterator over one
    run (one epoch); ``units`` is how many elements one timed run processes.
    """

    name: str
    make_iter: Callable[[], Iterator[Any]]
    units: int
    note: str = ""
    times: list[float] = field(default_factory=list)
    first_batch: list[float] = field(default_factory=list)
    check: str = "not checked"
    error: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def best(self) -> float | None:
        return min(self.times) if self.times else None

    def spread(self) -> float | None:
        """(slowest - fastest) / median of the timed runs."""
        m = self.median
        return (max(self.times) - min(self.times)) / m if m and len(self.times) > 1 else None

    def rate(self) -> float | None:
        m = self.median
        return self.units / m if m else None

    def to_json(self) -> dict[str, Any]:
        return {
            "units_per_run": self.units,
            "note": self.note,
            "run_times_s": self.times,
            "median_run_s": self.median,
            "best_run_s": self.best,
            "spread": self.spread(),
            "rate_median": self.rate(),
            "rate_best": self.units / self.best if self.best else None,
            "first_batch_s": self.first_batch,
            "first_batch_median_s": statistics.median(self.first_batch)
            if self.first_batch
            else None,
            "check": self.check,
            "error": self.error,
        }


def fail(impl: Impl, what: str) -> None:
    """Records the exception being handled as ``impl``'s error and prints it."""
    impl.error = f"{what}: {type(sys.exc_info()[1]).__name__}: {sys.exc_info()[1]}"
    print(f"  ERROR in {impl.name} ({what}):", file=sys.stderr)
    traceback.print_exc(limit=6, file=sys.stderr)


def one_run(impl: Impl) -> float:
    """Times one full run of ``impl``: build, iterate to the end. Returns seconds."""
    wait_quiet()
    with time_limit(RUN_TIMEOUT_S):
        start = time.perf_counter()
        it = impl.make_iter()
        for _ in it:
            pass
        elapsed = time.perf_counter() - start
        close(it)
    return elapsed


def time_runs(impls: Sequence[Impl], repeats: int) -> None:
    """``repeats`` timed runs of each implementation, alternating, rotating the order."""
    live = [i for i in impls if i.error is None]
    for r in range(repeats):
        k = r % len(live) if live else 0
        for impl in live[k:] + live[:k]:
            if impl.error is not None:
                continue
            try:
                impl.times.append(one_run(impl))
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                fail(impl, f"timed run {r + 1}")


def time_first_batch(impls: Sequence[Impl], trials: int = 3) -> None:
    """Seconds from building the pipeline to holding its first batch, ``trials`` times."""
    live = [i for i in impls if i.error is None]
    for _ in range(trials):
        for impl in live:
            if impl.error is not None:
                continue
            try:
                wait_quiet()
                with time_limit(RUN_TIMEOUT_S):
                    start = time.perf_counter()
                    it = impl.make_iter()
                    next(it)
                    impl.first_batch.append(time.perf_counter() - start)
                    close(it)
                del it
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                fail(impl, "time to first batch")


# -- checking outputs -------------------------------------------------------------------------


def tree_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two nested dict/list/array structures differ, or ``None`` if equal.

    Arrays must agree in shape, dtype and every value.
    """
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return f"{path or 'element'}: {type(a).__name__} vs {type(b).__name__}"
        if set(a) != set(b):
            return f"{path or 'element'}: keys {sorted(a)} vs {sorted(b)}"
        for key in a:
            diff = tree_difference(a[key], b[key], f"{path}[{key!r}]")
            if diff:
                return diff
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{path or 'element'}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            diff = tree_difference(x, y, f"{path}[{i}]")
            if diff:
                return diff
        return None
    x, y = np.asarray(a), np.asarray(b)
    where = path or "element"
    if x.shape != y.shape:
        return f"{where}: shape {x.shape} vs {y.shape}"
    if x.dtype != y.dtype:
        return f"{where}: dtype {x.dtype} vs {y.dtype}"
    if not np.array_equal(x, y):
        bad = np.argwhere(x != y)
        first = tuple(int(v) for v in bad[0]) if bad.size else ()
        return (
            f"{where}: {int((x != y).sum())} values differ, first at {first}: "
            f"{x[first].item()!r} vs {y[first].item()!r}"
        )
    return None


def compare_outputs(name: str, outputs: Sequence[Any], ref_name: str, ref: Sequence[Any]) -> str:
    """Compares two lists of batches; returns ``"ok"`` or a ``"MISMATCH: ..."`` line."""
    if len(outputs) != len(ref):
        return f"MISMATCH: {name} gave {len(outputs)} batches, {ref_name} {len(ref)}"
    for i, (x, y) in enumerate(zip(outputs, ref)):
        diff = tree_difference(x, y)
        if diff:
            return f"MISMATCH: batch {i}: {diff} ({name} vs {ref_name})"
    return "ok"


def collect(impl: Impl, digest: Callable[[Any], Any] = lambda b: b) -> list[Any] | None:
    """One full (warm-up) run of ``impl``, keeping ``digest(batch)`` of every batch."""
    try:
        wait_quiet()
        with time_limit(RUN_TIMEOUT_S):
            it = impl.make_iter()
            out = [digest(b) for b in it]
            close(it)
        return out
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        fail(impl, "output check run")
        return None


# -- reporting ----------------------------------------------------------------------------------


@dataclass
class Ratio:
    label: str
    numerator: Impl
    denominator: Impl
    target: float | None
    invalid: str | None = None

    def value(self) -> float | None:
        a, b = self.numerator.rate(), self.denominator.rate()
        return a / b if a and b else None

    def result(self) -> str:
        if self.numerator.error or self.denominator.error:
            return "ERROR"
        if self.invalid:
            return "INVALID"
        v = self.value()
        if v is None:
            return "n/a"
        if self.target is None:
            return ""
        return "PASS" if v >= self.target else "SHORT"

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "value": self.value(),
            "target": self.target,
            "result": self.result(),
            "invalid_because": self.invalid,
        }


def fmt_num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(parts).rstrip()

    print(line(headers))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))


def write_json(path: str | None, data: dict[str, Any]) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    print(f"results written to {os.path.relpath(path)}")


def finish(
    benchmark: str,
    args: argparse.Namespace,
    env: dict[str, Any],
    started: float,
    results: list[dict[str, Any]],
) -> int:
    """Prints the ratio table, totals and problems, writes the JSON; the exit status.

    Each result holds ``name``, ``description``, ``unit``, ``seconds``, ``impls``
    and ``ratios``; any other keys go into the JSON as they are.
    """
    print()
    ratio_rows = [
        [
            r.label,
            f"{r.value():.2f}x" if r.value() else "-",
            f">= {r.target:g}x" if r.target is not None else "",
            r.result(),
        ]
        for res in results
        for r in res["ratios"]
    ]
    print_table(["ratio (median rates)", "value", "target", "result"], ratio_rows, {1, 2})
    total = time.perf_counter() - started
    load = load_average()
    print(f"\ntotal {total:.1f} s" + (f"; load average at the end {load:.1f}" if load else ""))
    impls = [(res["name"], i) for res in results for i in res["impls"]]
    failed = [
        f"{name} {i.name}: {i.error or i.check}"
        for name, i in impls
        if i.error or i.check not in ("ok", "reference")
    ]
    for line in failed:
        print(f"PROBLEM: {line}")
    standard = {"name", "description", "unit", "seconds", "impls", "ratios"}
    write_json(
        args.json,
        {
            "benchmark": benchmark,
            "environment": env,
            "method": {
                "warmup_runs": 1,
                "timed_runs": args.repeats,
                "statistic": "median run time (best kept as rate_best)",
                "alternating": True,
                "first_batch_trials": 3,
            },
            "total_seconds": total,
            "results": [
                {
                    **{k: res[k] for k in ("name", "description", "unit", "seconds")},
                    **{k: v for k, v in res.items() if k not in standard},
                    "impls": {i.name: i.to_json() for i in res["impls"]},
                    "ratios": [r.to_json() for r in res["ratios"]],
                }
                for res in results
            ],
        },
    )
    sys.stdout.flush()
    if any(i.error and "TimeoutError" in i.error for _, i in impls):
        os._exit(1)  # a hung run may leave threads that would block interpreter exit
    return 1 if failed else 0


def report_check(impls: list[Impl], ref: str, what: str) -> None:
    """Prints whether every implementation's output matched the reference."""
    bad = [i for i in impls if i.check not in ("ok", "reference")]
    if not bad:
        print(f"  output check ok: {what}")
        return
    for impl in bad:
        print(f"  OUTPUT CHECK FAILED for {impl.name} vs {ref}: {impl.check}")
    print("  (timed anyway; ratios involving a failed check are marked INVALID)")


def mark_invalid(ratios: list[Ratio]) -> None:
    """Marks ratios that involve an implementation whose output check failed."""
    for r in ratios:
        for impl in (r.numerator, r.denominator):
            if impl.check not in ("ok", "reference"):
                r.invalid = f"{impl.name}: {impl.check}"


CHECK_RAISED = "error: the check run raised"


def mark_reference(impl: Impl, out: list[Any] | None) -> None:
    """The reference implementation's check: fine unless its check run raised."""
    impl.check = "reference" if out is not None else CHECK_RAISED


def check_against(
    impl: Impl,
    out: list[Any] | None,
    ref_name: str,
    ref: list[Any] | None,
    compare: Callable[[list[Any], list[Any]], str] | None = None,
) -> None:
    """Sets ``impl.check``: ``compare(out, ref)`` (by default value by value) if both ran."""
    if out is None or ref is None:
        impl.check = CHECK_RAISED
    elif compare is not None:
        impl.check = compare(out, ref)
    else:
        impl.check = compare_outputs(impl.name, out, ref_name, ref)
