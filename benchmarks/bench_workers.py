# bench-requires: torch==2.13.0 pillow jax[cpu]
"""Worker-process benchmarks: chute's ``mp_prefetch`` against Grain's and PyTorch's DataLoader.

Four implementations run in one process, alternating, with 2 worker processes
each:

* ``chute`` and ``grain``: the very same pipeline code (a function that takes
  the module), then ``.mp_prefetch(MultiprocessingOptions(num_workers=2))``;
* ``torch``: ``torch.utils.data.DataLoader(dataset, batch_size=32,
  num_workers=2)`` over a map-style ``Dataset`` whose ``__getitem__(i)`` calls
  the same function on index ``i`` (the default collate);
* ``limit``: two bare processes, forked inside the timed run, each running the
  same function over half the items (``w::2``) and handing back nothing; the
  parent waits for both.

The workloads:

1. ``cpu`` (``workers/cpu.py``): ``MapDataset.range(N).map(work)
   .to_iter_dataset().batch(32)`` where ``work`` is about 1 ms of pure-Python
   arithmetic (its iteration count calibrated once at start); also chute with
   0 workers.
2. ``images`` (``workers/images.py``): the same shape of pipeline whose map
   makes a seeded random 224x224x3 uint8 image and flips it; rates also in MB/s
   of output batches.  Also chute and PyTorch with 4 and 8 workers (more
   workers than cores), and the limit with 4 and 8 bare processes: what the
   machine itself loses with more processes than cores.
3. ``arrayrecord`` (``workers/arrayrecord.py``, the data in
   ``workers/photos.py``): 5,000 JPEG-encoded 256x256 photos in one
   ArrayRecord file, read in a global shuffle, decoded with Pillow and cropped
   at random to 224x224 in the workers.
4. ``first_batch`` (``workers/first_batch.py``): seconds from ``iter()`` to
   the first batch of the ``images`` pipeline, each trial in a fresh Python
   process, for a plain script and for one that has imported JAX and runs a
   background thread.

In ``arrayrecord`` PyTorch's DataLoader and the limit run in a clean parent
process (``workers/clean_parent.py``): a process forked after an array_record
reader was opened cannot read with array_record itself.

Also: peak RSS of the parent and of the workers (``workers/memory.py``), whether
the workers are gone after every ``close()``, and whether /dev/shm is left with
chute segments (``workers/processes.py``).  The limit's bare processes and the
peers' runners are in ``runners.py``, shared with other benchmarks.  This file
composes the workloads, and is what the clean parent and first-batch processes run.

``BENCH_QUICK=1``: a smoke run of every workload, with fewer elements and one timed
run each (its rates and ratios say little).

chute, grain and torch are imported inside ``main()`` (and the first-batch
child), not at the top: Grain's workers are spawned processes that re-import
this file, and they should import what a user's script would, not all three
libraries.

Run through ``bash benchmarks/run workers``; see README.md.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import common
from workers import arrayrecord, cpu, first_batch, images, photos
from workers.clean_parent import serve
from workers.harness import WORKERS, pickle_by_value
from workers.processes import CLEAN_PARENT_FLAG, cleanup_report, shm_names, shutdown_summary
from workers.report import print_results

TARGETS = {
    **cpu.TARGETS,
    **images.TARGETS,
    **arrayrecord.TARGETS,
    **first_batch.TARGETS,
}
"""Every workload's targets, as its module holds them."""

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
# BENCH_QUICK=1: fewer elements (still whole batches for every number of workers) and one
# timed run, first-batch trials and the memory runs included.
CPU_N = 512 if QUICK else cpu.CPU_N
IMAGES_N = 512 if QUICK else images.IMAGES_N
PHOTOS_N = 640 if QUICK else photos.PHOTOS_N
FIRST_BATCH_TRIALS = 1 if QUICK else first_batch.FIRST_BATCH_TRIALS


def import_libraries() -> tuple[Any, Any, Any, dict[str, Any]]:
    """chute, grain, torch, and the versions of everything measured."""
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
    try:
        import PIL
        import torch
        import torch.utils.data
    except ImportError:
        sys.exit(
            "bench_workers: the peers 'torch' and 'pillow' are not installed; "
            "use bash benchmarks/run workers"
        )
    env = common.environment()
    env["torch"] = torch.__version__
    env["pillow"] = PIL.__version__
    env["jax"] = common.version_of("jax")
    env["array_record"] = common.version_of("array_record")
    env["quick"] = QUICK
    return chute, grain, torch, env


def run_workloads(
    chute: Any, grain: Any, torch: Any, repeats: int, directory: str
) -> list[dict[str, Any]]:
    """Each workload in turn, its header first; their results, with the seconds each took."""
    benches: tuple[tuple[str, Callable[[], dict[str, Any]]], ...] = (
        ("cpu", lambda: cpu.bench_cpu(chute, grain, torch, repeats, CPU_N)),
        ("images", lambda: images.bench_images(chute, grain, torch, repeats, IMAGES_N)),
        (
            "arrayrecord",
            lambda: arrayrecord.bench_arrayrecord(chute, grain, repeats, directory, PHOTOS_N),
        ),
        ("first_batch", lambda: first_batch.bench_first_batch(FIRST_BATCH_TRIALS)),
    )
    results = []
    for name, bench in benches:
        print(f"\n[{name}]")
        t0 = time.perf_counter()
        res = bench()
        res["seconds"] = time.perf_counter() - t0
        results.append(res)
    return results


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    if QUICK:
        args.repeats = 1
    chute, grain, torch, env = import_libraries()
    # The workloads' functions travel to the workers by value, as a script's do.
    pickle_by_value(cpu, images, photos)
    # PyTorch warns on every DataLoader with more workers than cores; the 4 and 8 worker
    # runs are meant to be so.
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    shm_start = shm_names()
    print(
        f"worker benchmarks: chute {env['chute']} vs grain {env['grain']} vs torch "
        f"{env['torch']} | {env['python']}, {env['cpus']} cpus, numpy {env['numpy']}, pillow "
        f"{env['pillow']}, jax {env['jax']}; {WORKERS} worker processes each unless named"
        + ("; BENCH_QUICK: fewer elements, one timed run" if QUICK else "")
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
    with tempfile.TemporaryDirectory(prefix="chute-bench-workers-") as directory:
        results = run_workloads(chute, grain, torch, args.repeats, directory)
    print_results(results)
    print()
    cleanup, problems = cleanup_report(shm_start)
    for res in results:
        for name, log in res.get("shutdown", {}).items():
            # Grain's own shutdown is only reported; chute's, PyTorch's (closed by the
            # harness) and the limit's processes must be gone.
            if not name.startswith("grain") and any(e["left_alive"] for e in log):
                problems.append(f"{res['name']} {name}: {shutdown_summary(log)}")
    status = common.finish("workers", args, env, started, results)
    for line in problems:
        print(f"PROBLEM: {line}")
    add_cleanup(args.json, cleanup, problems)
    return 1 if problems else status


def add_cleanup(path: str | None, cleanup: dict[str, Any], problems: list[str]) -> None:
    """Adds what was left at the end, and the problems, to the JSON that ``finish`` wrote."""
    if not (path and os.path.exists(path)):
        return
    with open(path) as f:
        data = json.load(f)
    data["cleanup"] = {**cleanup, "problems": problems}
    with open(path, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == first_batch.CHILD_FLAG:
        sys.exit(first_batch.first_batch_child(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 5 and sys.argv[1] == CLEAN_PARENT_FLAG:
        sys.exit(serve(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(main())
