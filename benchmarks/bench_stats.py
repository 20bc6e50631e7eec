"""Per-stage statistics: what they cost chute when off, and when on.

Three comparisons, each printed as a ratio of rates (median run times):

1. ``off``: chute with tracking off against the code before statistics were
   added (``base``, commit ``BASE_REF``; ``BENCH_STATS_BASE=<ref>`` picks
   another), on ``bench_core``'s ``mnist`` and ``cheap`` pipelines.  The base
   commit is checked out into a temporary git worktree; every measurement runs
   in a fresh Python process with ``PYTHONPATH=<tree>/src``, which checks the
   file it imported chute from.  Base and head processes alternate.
2. ``on/off``: chute with ``execution_tracking_mode=STAGE_TIMING`` (a
   ``WithOptionsIterDataset`` at the end of the pipeline) against tracking
   off, in this process, alternating; for ``mnist`` and ``cheap`` also with
   ``chute.config.update("py_debug_mode", True)``.  Pipelines: ``mnist``,
   ``cheap`` and ``workers`` (``bench_workers``' ``cpu`` pipeline: about 1 ms
   of pure Python per element, ``.mp_prefetch`` with 2 workers).
3. Grain's own on/off ratio with ``STAGE_TIMING`` on the same pipelines, beside
   chute's (smaller sizes, Grain is slow there); information, no target.

``BENCH_QUICK=1`` runs fewer rounds and smaller sizes, for a smoke run.

Run through ``bash benchmarks/run stats``; see README.md.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import common
from common import Impl, Ratio
from workers import cpu as workers_cpu  # light: numpy, common, absl's flags for Grain

# bench_core imports chute and grain at its top, so it is imported inside the functions
# that need it: a child process must import chute from the tree it was started for, and
# Grain's spawned workers, which re-import this file, need neither.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAD_SRC = os.path.join(ROOT, "src")
BASE_REF = os.environ.get("BENCH_STATS_BASE", "296d9ba")
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")

TARGETS = {
    # Tracking off: head's rate / base's rate, within 2%.
    "off head/base": 0.98,
    # Tracking on: at most 10% (cheap), 3% (mnist, workers) slower: rate on / rate off
    # >= 1 / 1.10 and 1 / 1.03, to the two decimals the table prints.
    "cheap on/off": 0.91,
    "mnist on/off": 0.97,
    "workers on/off": 0.97,
}

ROUNDS = 2 if QUICK else 5  # off: base/head process pairs
CHILD_RUNS = 2 if QUICK else 4  # off: timed runs of each pipeline in one process
MIN_REPEATS = 2 if QUICK else 5  # on/off: timed runs of each chute implementation, at least
GRAIN_REPEATS = 2 if QUICK else 3  # on/off: timed runs of Grain off and on
CHEAP_N = 200_000 if QUICK else 1_000_000  # chute's cheap pipeline, base, head, on and off
GRAIN_CHEAP_N = 10_000  # bench_core's N for Grain
GRAIN_MNIST_N = 10_000 if QUICK else 20_000  # the first elements of the MNIST source
CODES = ("base", "head")
CHILD_FLAG = "--off-child"
CHILD_TAG = "BENCH_STATS_CHILD "
CHILD_TIMEOUT_S = 300
NO_STATS = "statistics not available in this chute"


# -- pipelines and switches -------------------------------------------------------------------


def tracked(lib: Any, ds: Any) -> Any:
    """``ds`` with per-stage statistics on (``STAGE_TIMING``), as a user switches them on."""
    x = lib.experimental
    options = x.DatasetOptions(execution_tracking_mode=x.ExecutionTrackingMode.STAGE_TIMING)
    return x.WithOptionsIterDataset(ds, options)


def maker(lib: Any, build: Callable[[], Any], mode: str) -> Callable[[], Iterator[Any]]:
    """``make_iter`` for mode ``off``, ``on`` (options) or ``debug`` (``py_debug_mode``).

    Every mode sets ``py_debug_mode`` first: it is process-wide, and it stays as set
    while the run reads its iterator.
    """

    def make_iter() -> Iterator[Any]:
        lib.config.update("py_debug_mode", mode == "debug")
        ds = build()
        return iter(tracked(lib, ds) if mode == "on" else ds)

    return make_iter


def has_statistics(chute: Any) -> bool:
    return hasattr(chute.experimental, "execution_summary")


def fingerprint(batch: Any) -> str:
    """A hash of every array in a batch (keys sorted), with dtypes and shapes."""
    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if isinstance(x, dict):
            for key in sorted(x):
                h.update(repr(key).encode())
                feed(x[key])
        elif isinstance(x, (list, tuple)):
            for y in x:
                feed(y)
        else:
            a = np.ascontiguousarray(x)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())

    feed(batch)
    return h.hexdigest()


def summary_check(chute: Any, it: Any) -> str:
    """What ``execution_summary`` says about an iterator that was read to its end."""
    if not has_statistics(chute):
        return "no statistics"
    try:
        summary = chute.experimental.execution_summary(it)
    except Exception as e:
        return f"summary raised {type(e).__name__}: {e}"
    stages = list(getattr(summary, "stages", ()))
    counted = [s for s in stages if getattr(s, "elements", 0)]
    where = sorted({str(getattr(s, "where", "?")) for s in counted})
    if not counted:
        return f"EMPTY: {len(stages)} stages, none counted an element"
    return f"{len(counted)}/{len(stages)} stages counted ({', '.join(where)})"


def collect_checked(impl: Impl, chute: Any | None) -> tuple[list[str] | None, str]:
    """The warm-up run: every batch's fingerprint, and (for chute) the summary check."""
    try:
        common.wait_quiet()
        with common.time_limit(common.RUN_TIMEOUT_S):
            it = impl.make_iter()
            out = [fingerprint(b) for b in it]
            summary = summary_check(chute, it) if chute is not None else ""
            common.close(it)
        return out, summary
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        common.fail(impl, "output check run")
        return None, ""


# -- 1. tracking off: head against base, fresh processes ---------------------------------------


def off_child(spec: dict[str, Any]) -> int:
    """In a fresh process: warm-up and timed runs of mnist and cheap; a JSON line out."""
    import chute

    imported = os.path.realpath(chute.__file__)
    wanted = os.path.realpath(spec["src"]) + os.sep
    result: dict[str, Any] = {"chute_file": imported, "statistics": has_statistics(chute)}
    if not imported.startswith(wanted):
        result["error"] = f"chute came from {imported}, not from {wanted}"
        print(CHILD_TAG + json.dumps(result), flush=True)
        return 1
    import bench_core

    source = bench_core.mnist_source()
    n = spec["cheap_n"]
    impls = [
        Impl(
            "mnist",
            lambda: iter(bench_core.mnist_pipeline(chute, source)),
            bench_core.MNIST_BATCHES * bench_core.MNIST_BATCH,
        ),
        Impl("cheap", lambda: iter(bench_core.cheap_pipeline(chute, n)), n),
    ]
    digests = {}
    for impl in impls:
        out, _ = collect_checked(impl, None)
        digests[impl.name] = (
            hashlib.sha256("".join(out).encode()).hexdigest() if out is not None else None
        )
    common.time_runs(impls, spec["runs"])
    for impl in impls:
        result[impl.name] = {"times": impl.times, "digest": digests[impl.name], "error": impl.error}
    print(CHILD_TAG + json.dumps(result), flush=True)
    return 0


def run_off_child(src: str, runs: int, cheap_n: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHUTE_")}
    env["PYTHONPATH"] = src
    spec = json.dumps({"src": src, "runs": runs, "cheap_n": cheap_n})
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), CHILD_FLAG, spec],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(CHILD_TAG):
            result = json.loads(line[len(CHILD_TAG) :])
            if "error" in result:
                raise RuntimeError(result["error"])
            return result
    raise RuntimeError(
        f"the measuring process exited with {proc.returncode} and no result; "
        f"its stderr ends: {proc.stderr[-2000:]}"
    )


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@contextlib.contextmanager
def base_worktree(commit: str) -> Iterator[str]:
    """``commit`` checked out (detached) into a temporary git worktree; its path."""
    parent = tempfile.mkdtemp(prefix="chute-bench-stats-")
    path = os.path.join(parent, "base")
    try:
        git("worktree", "add", "--detach", "--quiet", path, commit)
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", os.path.join(path, "src")],
            capture_output=True,
        )
        yield path
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(
                ["git", "-C", ROOT, "worktree", "remove", "--force", path], capture_output=True
            )
        shutil.rmtree(parent, ignore_errors=True)


def off_impls(units: int) -> dict[str, Impl]:
    """Placeholders for base and head: their times come from the measuring processes."""
    return {code: Impl(f"chute {code}", lambda: iter(()), units) for code in CODES}


def bench_off() -> dict[str, Any] | None:
    """Head (this tree's src) against base, tracking off, in alternating fresh processes."""
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{BASE_REF}^{{commit}}")
        head = git("rev-parse", "--short", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", "src"))
        same = not dirty and not git("diff", "--name-only", commit, "HEAD", "--", "src")
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"  off-comparison skipped: git is unavailable or {BASE_REF!r} is not a commit ({e})")
        return None
    import bench_core

    mnist_units = bench_core.MNIST_BATCHES * bench_core.MNIST_BATCH
    description = (
        f"tracking off; base = {BASE_REF} ({commit[:10]}) in a temporary worktree, head = "
        f"{HEAD_SRC} (HEAD {head}{', src modified' if dirty else ''}); {ROUNDS} rounds of one "
        f"fresh process per code, alternating, each 1 warm-up + {CHILD_RUNS} timed runs of "
        f"mnist and of cheap (N={CHEAP_N:,}); the rate is from the median of the processes' "
        "median run times"
    )
    print(f"  {description}")
    if same:
        print("  (head's src is the same as base's: the ratios can only show noise)")
    impls = {"mnist": off_impls(mnist_units), "cheap": off_impls(CHEAP_N)}
    raw: dict[str, list[dict[str, Any]]] = {code: [] for code in CODES}
    digests: dict[str, dict[str, set[str | None]]] = {
        p: {code: set() for code in CODES} for p in impls
    }
    stack = contextlib.ExitStack()
    try:
        base_path = stack.enter_context(base_worktree(commit))
    except (OSError, subprocess.CalledProcessError) as e:
        stderr = getattr(e, "stderr", "") or ""
        print(f"  off-comparison skipped: no worktree of {commit[:10]} ({e} {stderr.strip()})")
        return None
    with stack:
        src = {"base": os.path.join(base_path, "src"), "head": HEAD_SRC}
        for r in range(ROUNDS):
            for code in CODES if r % 2 == 0 else CODES[::-1]:
                common.wait_quiet()
                try:
                    result = run_off_child(src[code], CHILD_RUNS, CHEAP_N)
                except Exception:
                    for pipeline in impls.values():
                        common.fail(pipeline[code], f"process of round {r + 1}")
                    continue
                raw[code].append(result)
                for name, pipeline in impls.items():
                    part, impl = result[name], pipeline[code]
                    digests[name][code].add(part["digest"])
                    if part["error"]:
                        impl.error = part["error"]
                    elif part["times"]:
                        impl.times.append(float(np.median(part["times"])))
    for name, pipeline in impls.items():
        base_d, head_d = digests[name]["base"], digests[name]["head"]
        pipeline["base"].check = "reference"
        if len(base_d | head_d) != 1 or None in base_d | head_d:
            pipeline["head"].check = f"MISMATCH: output digests base {base_d}, head {head_d}"
        else:
            pipeline["head"].check = "ok"
    files = {code: sorted({r["chute_file"] for r in raw[code]}) for code in CODES}
    statistics_in = {code: sorted({r["statistics"] for r in raw[code]}) for code in CODES}
    print(f"  chute imported from: base {files['base']}, head {files['head']}")
    common.report_check(
        [i for p in impls.values() for i in p.values()],
        "base",
        "every process's whole output of both pipelines has the same hash as base's",
    )
    note = "" if statistics_in["head"] == [True] else f" ({NO_STATS})"
    ratios = [
        Ratio(f"{name} off: head/base{note}", p["head"], p["base"], TARGETS["off head/base"])
        for name, p in impls.items()
    ]
    common.mark_invalid(ratios)
    return {
        "name": "off",
        "description": description,
        "unit": "elements/s (mnist), input elements/s (cheap)",
        "impls": [i for p in impls.values() for i in p.values()],
        "ratios": ratios,
        "rows": [(name, impl) for name, p in impls.items() for impl in p.values()],
        "base_commit": commit,
        "head_commit": head,
        "head_src_modified": dirty,
        "chute_files": files,
        "statistics_available": statistics_in,
        "processes": raw,
    }


# -- 2. and 3. tracking on against off, in this process -----------------------------------------


def on_off(
    name: str,
    description: str,
    chute_builds: tuple[Callable[[], Any], int],
    grain_builds: tuple[Callable[[], Any], int],
    repeats: int,
    debug: bool,
) -> dict[str, Any]:
    """chute off / on (/ debug) and Grain off / on, alternating; outputs checked."""
    import bench_core

    chute, grain = bench_core.chute, bench_core.grain
    print(f"  {description}")
    modes = ("off", "on", "debug") if debug else ("off", "on")
    label = {"off": "off", "on": "on (options)", "debug": "on (py_debug_mode)"}
    (c_build, c_units), (g_build, g_units) = chute_builds, grain_builds
    impls = {
        f"chute {m}": Impl(f"chute {label[m]}", maker(chute, c_build, m), c_units) for m in modes
    }
    impls["grain off"] = Impl("grain off", maker(grain, g_build, "off"), g_units)
    impls["grain on"] = Impl("grain on (options)", maker(grain, g_build, "on"), g_units)
    summaries: dict[str, str] = {}
    for lib_name in ("chute", "grain"):
        ref: list[str] | None = None
        for key, impl in impls.items():
            if not key.startswith(lib_name):
                continue
            out, summaries[impl.name] = collect_checked(
                impl, chute if lib_name == "chute" and not key.endswith("off") else None
            )
            if key.endswith("off"):
                common.mark_reference(impl, out)
                ref = out
            else:
                common.check_against(impl, out, f"{lib_name} off", ref)
    chute.config.update("py_debug_mode", False)
    common.report_check(
        list(impls.values()),
        "off",
        "every batch of each library's 'on' runs hashes as its 'off' run's",
    )
    for impl_name, text in summaries.items():
        if text:
            print(f"  {impl_name}: execution_summary: {text}")
    order = [impls[k] for k in impls]
    # Each library's on and off alternate; Grain's runs are information, so fewer of them.
    common.time_runs([i for k, i in impls.items() if k.startswith("chute")], repeats)
    common.time_runs([impls["grain off"], impls["grain on"]], GRAIN_REPEATS)
    chute.config.update("py_debug_mode", False)
    note = "" if has_statistics(chute) else f" ({NO_STATS})"
    ratios = [
        Ratio(
            f"{name} chute {label[m]}/off{note}",
            impls[f"chute {m}"],
            impls["chute off"],
            TARGETS[f"{name} on/off"],
        )
        for m in modes[1:]
    ]
    ratios.append(
        Ratio(f"{name} grain on (options)/off", impls["grain on"], impls["grain off"], None)
    )
    common.mark_invalid(ratios)
    for r in ratios:
        if summaries.get(r.numerator.name, "").startswith(("EMPTY", "summary raised")):
            r.invalid = f"{r.numerator.name}: {summaries[r.numerator.name]}"
    return {
        "name": name,
        "description": description,
        "unit": "elements/s",
        "impls": order,
        "ratios": ratios,
        "rows": [(name, impl) for impl in order],
        "summaries": summaries,
    }


def bench_mnist(repeats: int) -> dict[str, Any]:
    import bench_core

    source = bench_core.mnist_source()
    grain_source = source[:GRAIN_MNIST_N]
    units = bench_core.MNIST_BATCHES * bench_core.MNIST_BATCH
    grain_units = GRAIN_MNIST_N // bench_core.MNIST_BATCH * bench_core.MNIST_BATCH
    description = (
        f"bench_core's mnist pipeline; chute on the {len(source):,} elements, grain on the "
        f"first {GRAIN_MNIST_N:,}; 1 warm-up (the output check) + {repeats} timed runs each "
        f"(grain {GRAIN_REPEATS})"
    )
    return on_off(
        "mnist",
        description,
        (lambda: bench_core.mnist_pipeline(bench_core.chute, source), units),
        (lambda: bench_core.mnist_pipeline(bench_core.grain, grain_source), grain_units),
        repeats,
        debug=True,
    )


def bench_cheap(repeats: int) -> dict[str, Any]:
    import bench_core

    description = (
        f"bench_core's cheap pipeline; chute N={CHEAP_N:,}, grain N={GRAIN_CHEAP_N:,}; "
        f"rates in input elements/s; 1 warm-up (the output check) + {repeats} timed runs each "
        f"(grain {GRAIN_REPEATS})"
    )
    return on_off(
        "cheap",
        description,
        (lambda: bench_core.cheap_pipeline(bench_core.chute, CHEAP_N), CHEAP_N),
        (lambda: bench_core.cheap_pipeline(bench_core.grain, GRAIN_CHEAP_N), GRAIN_CHEAP_N),
        repeats,
        debug=True,
    )


def bench_workers_on_off(repeats: int) -> dict[str, Any]:
    import bench_core

    iterations, per_call = workers_cpu.calibrate()
    n, workers = workers_cpu.CPU_N, workers_cpu.WORKERS
    description = (
        f"bench_workers' cpu pipeline: range({n}).map(work).to_iter_dataset().batch("
        f"{workers_cpu.BATCH}).mp_prefetch({workers} workers); work = {iterations:,} "
        f"iterations of pure Python, {per_call * 1e3:.2f} ms per call here; the options wrap "
        f"the whole pipeline; 1 warm-up (the output check) + {repeats} timed runs each "
        f"(grain {GRAIN_REPEATS})"
    )
    build = functools.partial(workers_cpu.cpu_pipeline, iterations=iterations, workers=workers)
    return on_off(
        "workers",
        description,
        (lambda: build(bench_core.chute), n),
        (lambda: build(bench_core.grain), n),
        repeats,
        debug=False,
    )


# -- reporting -----------------------------------------------------------------------------------


def print_results(results: list[dict[str, Any]]) -> None:
    rows = []
    for res in results:
        summaries = res.get("summaries", {})
        for bench, impl in res["rows"]:
            rows.append(
                [
                    res["name"] if res["name"] == "off" else "on/off",
                    bench,
                    impl.name,
                    f"N={impl.units:,}",
                    "ERROR" if impl.error else common.fmt_num(impl.rate()),
                    common.fmt_num(impl.median, 3),
                    f"{impl.spread() * 100:.1f}%" if impl.spread() is not None else "-",
                    str(len(impl.times)),
                    impl.check.split(":")[0],
                    summaries.get(impl.name, "") or "-",
                ]
            )
    print()
    common.print_table(
        [
            "compare",
            "pipeline",
            "impl",
            "size",
            "elements/s",
            "run s",
            "spread",
            "runs",
            "output",
            "execution_summary",
        ],
        rows,
        right={4, 5, 6, 7},
    )
    print(
        "(off: 'run s' is the median over processes of each process's median run; 'runs' "
        "counts processes)"
    )


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    repeats = args.repeats = max(args.repeats, MIN_REPEATS)  # the JSON records it
    import bench_core

    chute = bench_core.chute
    env = common.environment()
    env["chute_file"] = chute.__file__
    env["quick"] = QUICK
    print(
        f"statistics benchmarks: chute {env['chute']} ({os.path.dirname(chute.__file__)}) vs "
        f"grain {env['grain']} | {env['python']}, {env['cpus']} cpus, numpy {env['numpy']}"
        + ("; BENCH_QUICK: fewer runs, smaller sizes" if QUICK else "")
    )
    if not has_statistics(chute):
        print(
            f"NOTE: {NO_STATS} (no chute.experimental.execution_summary): tracking on behaves "
            "like off, and head is the code before statistics; every ratio below is noise"
        )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    results = []
    benches: list[tuple[str, Callable[[], dict[str, Any] | None]]] = [
        ("off", bench_off),
        ("mnist on/off", lambda: bench_mnist(repeats)),
        ("cheap on/off", lambda: bench_cheap(repeats)),
        ("workers on/off", lambda: bench_workers_on_off(repeats)),
    ]
    for name, bench in benches:
        print(f"\n[{name}]")
        t0 = time.perf_counter()
        res = bench()
        if res is None:
            continue
        res["seconds"] = time.perf_counter() - t0
        results.append(res)
    print_results(results)
    for res in results:
        res.pop("rows")
    status = common.finish("stats", args, env, started, results)
    invalid = [r for res in results for r in res["ratios"] if r.invalid and "EMPTY" in r.invalid]
    for r in invalid:
        print(f"PROBLEM: {r.label}: tracking on collected no statistics ({r.invalid})")
    return 1 if invalid else status


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == CHILD_FLAG:
        sys.exit(off_child(json.loads(sys.argv[2])))
    sys.exit(main())
