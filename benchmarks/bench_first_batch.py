# bench-requires: torch==2.13.0 torchdata==0.11.0 pillow pyarrow
"""Time to the first batch, each trial in a fresh Python process (issue 39, measurement).

    bash benchmarks/run first_batch          # BENCH_QUICK=1: smaller data, 3 trials

Two pipelines, each as a user writes it for each loader:

* ``tokens``: 4 Parquet files of text documents (words are decimal token ids; lengths
  lognormal, median ~150 words, clipped to 2,048; row groups of 500), tokenised in the
  pipeline, packed into rows of 2,048 and batched 8.  chute (Grain API): the pipeline of
  ``examples/packing.py`` (``ParquetIterDataset`` per file, ``InterleaveIterDataset``
  with ``cycle_length=2``, ``map(tokenise)``, ``FirstFitPackIterDataset`` with 8 bins,
  ``batch(8)``, ``mp_prefetch`` for workers).  PyTorch's loaders and
  ``chute.torch.DataLoader``: an ``IterableDataset`` whose workers share the files out,
  read a row group at a time with pyarrow, tokenise and pack concat-then-split (the way
  such datasets are usually written; less work than first fit); ``batch_size=8``.
  ``pretokenised``: the same documents stored as token lists, read by chute's pipeline
  without tokenising (as the peers' own formats hold them).
* ``images``: bench_images' work (decode a 128x128 JPEG file with Pillow, crop 112,
  flip, normalise to float32, batches of 64, shuffled), on 2,000 JPEG files: chute's
  ``MapDataset.source(files).seed(0).shuffle().random_map(...).batch(64)
  .to_iter_dataset()``; PyTorch's loaders and ``chute.torch.DataLoader`` over a
  map-style ``Dataset`` of the files with ``shuffle=True``.

Modes: ``cold`` (build, ``iter()``, first batch) and ``restore`` (a previous process
read 90% of an epoch and saved the state; the trial builds, restores, takes the first
batch); with 0 (inline) and 2 workers.  Rows: chute (Grain API), ``chute.torch
.DataLoader``, ``torch.utils.data.DataLoader`` (cold only: it cannot restore) and
torchdata's ``StatefulDataLoader``.  LitData and MosaicML Streaming are not included
(bench_images sets them up for throughput only; their writers and restore paths are
not set up here).

Each trial (``first_batch_child.py``) prints ``time.time()`` stamps: the parent's
spawn, the interpreter's start, imports done, pipeline built, ``iter()`` returned,
state restored, first batch in hand; every process (workers too) also writes when it
began its first element's work.  Trials alternate across configurations round by
round; the medians of ``TRIALS`` trials are shown.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import common

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
TRIALS = 3 if QUICK else 5
DOCS_PER_FILE = 500 if QUICK else 2_000
FILES = 4
ROW_GROUP = 500
IMAGES_N = 2_000
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, ".bench-data")
TOKENS_FOLDER = os.path.join(DATA, f"first-batch-{DOCS_PER_FILE}")
IMAGES_FOLDER = os.path.join(DATA, f"images-{IMAGES_N}")
CHILD = os.path.join(HERE, "first_batch_child.py")
LOADERS = ("chute", "chute.torch", "torch", "torchdata")
PIPELINES = ("tokens", "pretokenised", "images")
TIMEOUT_S = 120


def configs() -> list[dict[str, Any]]:
    out = []
    for pipeline in PIPELINES:
        loaders = ("chute",) if pipeline == "pretokenised" else LOADERS
        for loader in loaders:
            for mode in ("cold", "restore"):
                if mode == "restore" and loader == "torch":
                    continue
                for workers in (0, 2):
                    out.append(
                        {"pipeline": pipeline, "loader": loader, "mode": mode, "workers": workers}
                    )
    return out


def key(c: dict[str, Any]) -> str:
    return f"{c['pipeline']} {c['loader']} {c['mode']} {c['workers']}w"


# -- the data -------------------------------------------------------------------------------


def write_tokens(folder: str) -> None:
    """The documents twice: as text (``text/``) and as token lists (``tokens/``)."""
    marker = os.path.join(folder, "COMPLETE")
    if os.path.exists(marker):
        return
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    for sub in ("text", "tokens"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for f in range(FILES):
        lengths = np.clip(np.round(rng.lognormal(5.0, 1.0, DOCS_PER_FILE)), 1, 2048).astype(int)
        docs = [rng.integers(1, 32_000, n, dtype=np.int32) for n in lengths]
        texts = [" ".join(map(str, d.tolist())) for d in docs]
        for sub, table in (
            ("text", pa.table({"text": texts})),
            (
                "tokens",
                pa.table({"tokens": pa.array([d.tolist() for d in docs], pa.list_(pa.int32()))}),
            ),
        ):
            path = os.path.join(folder, sub, f"documents-{f}.parquet")
            pq.write_table(table, path, row_group_size=ROW_GROUP, write_page_checksum=True)
    with open(marker, "w") as fh:
        fh.write("ok\n")


def write_data() -> None:
    began = time.perf_counter()
    write_tokens(TOKENS_FOLDER)
    sys.path.insert(0, HERE)
    from jpegs import data

    data.write_all(IMAGES_FOLDER, IMAGES_N, set())
    print(f"data ready in {time.perf_counter() - began:.1f} s")


# -- running the children ---------------------------------------------------------------------


def run_child(config: dict[str, Any], state_dir: str, mode: str | None = None) -> dict[str, Any]:
    folder = IMAGES_FOLDER if config["pipeline"] == "images" else TOKENS_FOLDER
    fd, marks = tempfile.mkstemp(prefix="marks-", dir=state_dir)
    os.close(fd)
    state = os.path.join(state_dir, key(config).replace(" ", "_") + ".state")
    spec = {**config, "folder": folder, "marks": marks, "state": state}
    if mode:
        spec["mode"] = mode
    spec["spawned"] = time.time()
    proc = subprocess.run(
        [sys.executable, CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=ROOT,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"exit {proc.returncode}; stderr ends: {proc.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    with open(marks) as fh:
        times = [float(line.split()[1]) for line in fh if line.strip()]
    os.unlink(marks)
    result["first_element"] = min(times) if times else None
    return result


def phases(r: dict[str, Any]) -> dict[str, float]:
    """A trial's steps in seconds (see the README's breakdown)."""
    s = r["stamps"]
    out = {
        "startup": s["started"] - s["spawned"],
        "imports": s["imported"] - s["started"],
        "build": s["built"] - s["state_read"],
        "iter": max(0.0, s["iter"] - max(s["built"], s["restored"])),
        "restore": max(0.0, s["restored"] - max(s["built"], s["iter"])),
        "next": s["first_batch"] - max(s["iter"], s["restored"]),
        "in_process": s["first_batch"] - s["state_read"],
        "total": s["first_batch"] - s["spawned"],
    }
    if r.get("first_element"):
        out["to_first_element"] = r["first_element"] - s["built"]
        out["first_element_to_batch"] = s["first_batch"] - r["first_element"]
    return out


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0], repeats=TRIALS)
    trials = args.repeats
    started = time.perf_counter()
    env = common.environment()
    for peer in ("torch", "torchdata", "pyarrow", "pillow"):
        env[peer] = common.version_of(peer)
    print(
        f"first batch: chute {env['chute']}, torch {env['torch']}, torchdata "
        f"{env['torchdata']} | {env['python']}, {env['cpus']} cpus; {trials} trials each, "
        "a fresh process per trial, medians"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    write_data()
    all_configs = configs()
    results: dict[str, list[dict[str, Any]]] = {key(c): [] for c in all_configs}
    errors: dict[str, str] = {}
    saved: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="first-batch-") as state_dir:
        for c in all_configs:
            if c["mode"] == "restore":
                try:
                    saved[key(c)] = run_child(c, state_dir, mode="save")
                except Exception as exc:
                    errors[key(c)] = f"saving the state: {exc}"
        for t in range(trials):
            live = [c for c in all_configs if key(c) not in errors]
            k = t % len(live)
            for c in live[k:] + live[:k]:
                try:
                    results[key(c)].append(run_child(c, state_dir))
                except Exception as exc:
                    errors[key(c)] = f"trial {t + 1}: {exc}"
            print(f"  round {t + 1} done ({time.perf_counter() - started:.0f} s)")
    report(all_configs, results, errors, saved)
    common.write_json(
        args.json,
        {
            "benchmark": "first_batch",
            "environment": env,
            "trials": trials,
            "configs": {
                key(c): {
                    "trials": results[key(c)],
                    "phases": [phases(r) for r in results[key(c)]],
                    "saved": saved.get(key(c)),
                    "error": errors.get(key(c)),
                }
                for c in all_configs
            },
            "total_seconds": time.perf_counter() - started,
        },
    )
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    for name, err in errors.items():
        print(f"PROBLEM: {name}: {err}")
    return 1 if errors else 0


def median_of(rs: list[dict[str, Any]], phase: str) -> float | None:
    values = [phases(r)[phase] for r in rs if phase in phases(r)]
    return statistics.median(values) if values else None


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:,.0f}"


def report(
    all_configs: list[dict[str, Any]],
    results: dict[str, list[dict[str, Any]]],
    errors: dict[str, str],
    saved: dict[str, Any],
) -> None:
    print(
        "\nms to the first batch: from building the pipeline (in the process) / from "
        "spawning the process; medians"
    )
    columns = [(m, w) for m in ("cold", "restore") for w in (0, 2)]
    rows = []
    for pipeline in PIPELINES:
        for loader in LOADERS:
            cells = []
            for mode, w in columns:
                k = key({"pipeline": pipeline, "loader": loader, "mode": mode, "workers": w})
                if k in errors:
                    cells.append("ERROR")
                elif results.get(k):
                    rs = results[k]
                    cells.append(
                        f"{ms(median_of(rs, 'in_process'))} / {ms(median_of(rs, 'total'))}"
                    )
                else:
                    cells.append("")
            if any(cells):
                rows.append([pipeline, loader, *cells])
    common.print_table(
        ["pipeline", "loader", *(f"{m} {w}w" for m, w in columns)], rows, {2, 3, 4, 5}
    )
    print(
        "\nchute's first batch step by step (ms, medians): startup = spawn to the first line "
        "of the script; build = pipeline made (restore: after reading the state file); "
        "to 1st elem = pipeline made to the first element's work beginning in any process"
    )
    names = [
        "startup",
        "imports",
        "build",
        "iter",
        "restore",
        "next",
        "to_first_element",
        "first_element_to_batch",
        "in_process",
        "total",
    ]
    rows = []
    for c in all_configs:
        if c["loader"] not in ("chute", "chute.torch") or key(c) in errors:
            continue
        rs = results[key(c)]
        rows.append([key(c), *(ms(median_of(rs, n)) for n in names)])
    headers = [
        "config",
        "startup",
        "imports",
        "build",
        "iter",
        "restore",
        "next",
        "to 1st elem",
        "1st elem->batch",
        "in process",
        "total",
    ]
    common.print_table(headers, rows, set(range(1, len(headers))))
    for k, s in saved.items():
        print(f"  {k}: state saved at batch {s['saved_at']} of {s['batches']}")


if __name__ == "__main__":
    sys.exit(main())
