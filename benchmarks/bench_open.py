"""Opening a huge sharded ArrayRecord set: memory and time to open and to read a first
shuffled batch, chute against Grain, on the same local files.

The data set is 1,000 shards of 20,000 tiny records each (20 million records,
8 bytes each, written with ``group_size:1`` as ``write_array_record`` writes
them); it is generated once into ``.bench-data/`` (about 1.5 GB, 40 s) and
reused.  Each implementation runs in a fresh process, three times, alternating:

* open: build the source over all 1,000 shards and ask its ``len()``;
* chute opens the set twice: from the shards (as Grain does), and from the
  index ``chute index`` writes (``ArrayRecordDataSource("train.chute-index")``);
* first batch: read 256 records at the first 256 positions of a global shuffle
  (``MapDataset.source(src).shuffle(seed=0)``, the same for both libraries).

Memory is the process's peak resident size (VmHWM) minus its resident size
after the imports, so the libraries' own import cost does not count.

Targets (issue 16), for chute from the index: its peak under 100 MB, its first batch within 2 s, and
at least 10 times less memory than Grain.

Environment: ``BENCH_OPEN_SHARDS`` and ``BENCH_OPEN_RECORDS`` shrink the set
for a quick look (the targets are for the full size).

Run through ``bash benchmarks/run open``; see README.md.
"""

# bench-requires: cramjam

from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import common

SHARDS = int(os.environ.get("BENCH_OPEN_SHARDS", "1000"))
RECORDS = int(os.environ.get("BENCH_OPEN_RECORDS", "20000"))
BATCH = 256
TRIALS = 3
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, ".bench-data", f"open-{SHARDS}x{RECORDS}")
TARGETS = {"chute peak MB": 100.0, "chute first batch s": 2.0, "memory grain/chute": 10.0}

# One measurement, in a fresh process: prints a JSON line.
CHILD = r"""
import glob, json, os, sys, time
def rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
lib_name, pattern, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
if lib_name == "chute":
    import chute as lib
    make = lambda files: lib.ArrayRecordDataSource(files)
elif lib_name == "chute index":
    import chute as lib
    index = os.path.join(os.path.dirname(pattern), "train.chute-index")
    make = lambda files: lib.ArrayRecordDataSource(index)
else:
    import grain as lib
    make = lambda files: lib.sources.ArrayRecordDataSource(files)
files = sorted(glob.glob(pattern))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS
base = rss("VmRSS:")
t0 = time.perf_counter()
source = make(files)
n = len(source)
t1 = time.perf_counter()
ds = lib.MapDataset.source(source).shuffle(seed=0)
records = [ds[i] for i in range(batch)] if lib_name == "grain" else ds._getitems(list(range(batch)))
t2 = time.perf_counter()
print(json.dumps({"len": n, "open_s": t1 - t0, "first_s": t2 - t1,
                  "peak_mb": rss("VmHWM:") - base, "base_mb": base,
                  "digest": sum(len(r) for r in records), "first": records[0].hex()}))
"""


def generate() -> None:
    """Writes the shards once (a marker file says they are complete)."""
    marker = os.path.join(DATA, "COMPLETE")
    if os.path.exists(marker):
        return
    from array_record.python.array_record_module import ArrayRecordWriter

    os.makedirs(DATA, exist_ok=True)
    began = time.perf_counter()
    for s in range(SHARDS):
        writer = ArrayRecordWriter(
            os.path.join(DATA, f"train-{s:05d}-of-{SHARDS:05d}.array_record"), "group_size:1"
        )
        for i in range(RECORDS):
            writer.write(b"%08d" % (s * RECORDS + i))
        writer.close()
    with open(marker, "w") as f:
        f.write("ok\n")
    print(f"  wrote {SHARDS:,} shards in {time.perf_counter() - began:.0f} s to {DATA}")


def generate_index() -> None:
    """``chute index`` of the set, once (timed: it reads every shard's footer)."""
    index = os.path.join(DATA, "train.chute-index")
    if os.path.exists(index):
        return
    from chute._sources.array_record.index import write_index

    began = time.perf_counter()
    write_index(sorted(glob.glob(os.path.join(DATA, "train-*.array_record"))), index)
    print(f"  indexed {SHARDS:,} shards in {time.perf_counter() - began:.1f} s: {index}")


def measure(lib: str) -> dict[str, Any]:
    pattern = os.path.join(DATA, "train-*.array_record")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, lib, pattern, str(BATCH)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    env = common.environment()
    print(f"open benchmark: {SHARDS:,} shards x {RECORDS:,} records ({SHARDS * RECORDS:,})")
    generate()
    generate_index()
    runs: dict[str, list[dict[str, Any]]] = {"chute": [], "chute index": [], "grain": []}
    for _ in range(TRIALS):
        for lib in runs:
            runs[lib].append(measure(lib))
    rows, summary = [], {}
    for lib, results in runs.items():
        good = [r for r in results if "error" not in r]
        if not good:
            rows.append([lib, "-", "-", "-", results[0].get("error", "failed")])
            continue
        median = {
            k: statistics.median(r[k] for r in good) for k in ("open_s", "first_s", "peak_mb")
        }
        summary[lib] = {**median, "len": good[0]["len"], "first": good[0]["first"]}
        rows.append([
            lib, f"{median['open_s']:.2f}", f"{median['first_s']:.2f}", f"{median['peak_mb']:.0f}",
            f"{good[0]['len']:,}",
        ])  # fmt: skip
    common.print_table(["library", "open s", "first batch s", "peak MB", "len"], rows, {1, 2, 3})
    checks = []
    if all(lib in summary for lib in runs):
        same = len({summary[lib]["first"] for lib in runs}) == 1
        checks.append(f"first record the same in all: {'ok' if same else 'MISMATCH'}")
        c, g = summary["chute index"], summary["grain"]
        checks += [
            f"chute index peak {c['peak_mb']:.0f} MB (target <= {TARGETS['chute peak MB']:.0f})",
            f"chute index open + first batch {c['open_s'] + c['first_s']:.2f} s "
            f"(target first batch <= {TARGETS['chute first batch s']:.0f} s)",
            f"memory grain/chute index {g['peak_mb'] / max(c['peak_mb'], 0.1):.1f}x "
            f"(target >= {TARGETS['memory grain/chute']:.0f}x)",
        ]
    for line in checks:
        print(f"  {line}")
    common.write_json(args.json, {"environment": env, "runs": runs, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
