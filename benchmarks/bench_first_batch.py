# bench-requires: torch==2.13.0 torchdata==0.11.0 pillow pyarrow litdata streaming-community
# bench-requires: ray[data]>=2.40
"""Time to the first batch, each trial in a fresh Python process (issue 39, measurement).

    bash benchmarks/run first_batch   # BENCH_QUICK=1: smaller data, 2 trials, no torch rows

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
  without tokenising (as the peers' own formats hold them).  ``chute arrayrecord``
  (``pretokenised`` only): the same documents in 4 ArrayRecord files (one record per
  document, its int32 tokens as raw bytes, written once with
  ``chute.experimental.write_array_record``), read as a Grain user reads them:
  ``MapDataset.source(chute.ArrayRecordDataSource(paths)).map(decode)
  .to_iter_dataset()``, the files one after another, then the same first-fit packing,
  ``batch(8)`` and ``mp_prefetch``.  It is chute on its own format, as LitData and
  Streaming read theirs: the Parquet rows also pay for importing pyarrow (and
  ``pyarrow.fs``, which ``pyarrow.parquet`` imports) in every fresh process.
  ``bare pyarrow`` (cold, inline): the limit of a token pipeline from Parquet, no loader
  at all: pyarrow and numpy read the files one at a time, tokenise (or not), pack
  concat-then-split and stack 8 rows, in the trial's process.
* ``images``: bench_images' work (decode a 128x128 JPEG file with Pillow, crop 112,
  flip, normalise to float32, batches of 64, shuffled), on 2,000 JPEG files: chute's
  ``MapDataset.source(files).seed(0).shuffle().random_map(...).batch(64)
  .to_iter_dataset()``; PyTorch's loaders and ``chute.torch.DataLoader`` over a
  map-style ``Dataset`` of the files with ``shuffle=True``.

LitData and MosaicML Streaming, each as its users write it, their data converted once
(under ``.bench-data/``, not timed): LitData ``litdata.optimize`` then ``StreamingDataset``
and ``StreamingDataLoader``; Streaming ``MDSWriter`` shards, a ``StreamingDataset``
subclass whose ``__getitem__`` does the work, its ``StreamingDataLoader``; both restore
with the loader's ``state_dict``/``load_state_dict``.  ``images``: bench_images' writers
(``jpegs/data.py``), shuffled.  ``pretokenised`` (compare with chute's row of that
name): LitData reads every document's tokens with ``TokensLoader(block_size=2048)``,
which packs them concat-then-split; Streaming's shards hold rows of 2,048 tokens packed
concat-then-split when written (as llm-foundry's ``--concat_tokens`` writes them), as
int32 arrays.  ``tokens``: the same packed rows stored as text, tokenised by the
dataset (LitData ``transform=``, Streaming ``__getitem__``): neither can pack inside
its dataset and restore exactly (their states count the items the loader handed out and
resume the stored samples at that index, so a dataset that packs several documents
into one row resumes at the wrong document), so the packing is done when the data is
written and their ``tokens`` rows tokenise already-packed rows: the same tokenising per
token as chute's, without packing's work.

chute's token pipeline twice more: ``chute vshards``, the same work in 8
``chute.experimental.virtual_shards`` (shard ``v``: the ``v``-th eighth of the
documents, a row range of a ``chute.sources.ParquetDataSource``, tokenised, packed
first-fit, batched; ``mp_prefetch`` over the shards); ``chute ray``, chute's pipeline
with ``mp_prefetch(..., executor=chute.RayExecutor())`` and 2 workers, in a local Ray
cluster that the trial starts with ``ray.init()`` (timed apart: the table shows the
time from spawning with and without it).

Modes: ``cold`` (build, ``iter()``, first batch) and ``restore`` (a previous process
read 90% of an epoch and saved the state; the trial builds, restores, takes the first
batch); with 0 (inline) and 2 workers.  Rows: chute (Grain API), ``chute.torch
.DataLoader``, ``torch.utils.data.DataLoader`` (cold only: it cannot restore),
torchdata's ``StatefulDataLoader``, LitData, Streaming, and the two above.  A cell
whose trial fails shows the error's last line; the others go on.  Every trial checks
that its first batch holds 8 rows of 2,048 tokens or 64 images of 112x112x3.

Each trial (``first_batch_child.py``) prints ``time.time()`` stamps: the parent's
spawn, the interpreter's start, imports done, Ray started, pipeline built, ``iter()``
returned, state restored, first batch in hand.  chute's pipelines also mark, each
process the first time it gets there, with user-level stages: a ``map`` on every
source's rows (first record read), the first element's work (tokenising, decoding), a
``map`` after packing (first packed row), a ``map`` after ``batch`` (first batch made,
in its process) and ``worker_init_fn`` (a worker began); the same marks in the saving
and the restoring run.  Trials alternate across configurations round by round; the
medians of ``TRIALS`` trials are shown.  ``FIRST_BATCH_ONLY=text`` runs only the
configurations whose name holds ``text`` (e.g. ``"tokens chute "``).
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
TRIALS = 2 if QUICK else 5
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
LOADERS = (
    "chute",
    "chute arrayrecord",
    "chute.torch",
    "torch",
    "torchdata",
    "litdata",
    "streaming",
    "chute vshards",
    "chute ray",
    "bare pyarrow",
)
PIPELINES = ("tokens", "pretokenised", "images")
PEERS = ("litdata", "streaming")
TIMEOUT_S = 120
ONLY = os.environ.get("FIRST_BATCH_ONLY", "")  # a part of the config names to run (development)


def loaders_of(pipeline: str) -> tuple[str, ...]:
    if pipeline == "images":
        return ("chute", "chute.torch", "torch", "torchdata", *PEERS)
    if pipeline == "pretokenised":
        return ("chute", "chute arrayrecord", *PEERS, "chute vshards", "bare pyarrow")
    return tuple(x for x in LOADERS if x != "chute arrayrecord")  # it holds token ids only


def configs() -> list[dict[str, Any]]:
    out = []
    for pipeline in PIPELINES:
        for loader in loaders_of(pipeline):
            for mode in ("cold", "restore"):
                if (mode == "restore" or QUICK) and loader == "torch":
                    continue  # it cannot restore; BENCH_QUICK: torchdata stands for it
                for workers in (0, 2):
                    if loader == "chute ray" and workers == 0:
                        continue  # Ray runs workers; inline is the chute row
                    if loader == "bare pyarrow" and (mode, workers) != ("cold", 0):
                        continue  # the limit: one process, no loader, nothing to restore
                    out.append(
                        {"pipeline": pipeline, "loader": loader, "mode": mode, "workers": workers}
                    )
    return [c for c in out if ONLY in key(c)]


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

    data.write_all(IMAGES_FOLDER, IMAGES_N, {"litdata", "mds"})
    from first_batch_child import write_array_records, write_peer_formats

    write_peer_formats(TOKENS_FOLDER)
    write_array_records(TOKENS_FOLDER)
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
        raise TrialError(proc.returncode, proc.stderr)
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    result["wall"] = time.time() - spec["spawned"]  # the trial's process, start to exit
    first: dict[str, float] = {}  # each mark's earliest time, in any process
    with open(marks) as fh:
        for line in fh:
            kind, _pid, at = line.split()
            first[kind] = min(first.get(kind, float(at)), float(at))
    os.unlink(marks)
    result["marks"] = first
    result["first_element"] = first.get("element")
    return result


class TrialError(RuntimeError):
    """A trial's process failed; ``reason`` is the last line of its error output."""

    def __init__(self, code: int, stderr: str) -> None:
        tail = [x.strip() for x in stderr.strip().splitlines() if x.strip()]
        self.reason = tail[-1] if tail else f"exit {code}"
        super().__init__(f"exit {code}; stderr ends: {stderr[-1500:]}")


def short_reason(err: str) -> str:
    """A table cell for an error: its exception's name and the start of its message."""
    return err if len(err) <= 48 else err[:45] + "..."


def phases(r: dict[str, Any]) -> dict[str, float]:
    """A trial's steps in seconds (see the README's breakdown).  Marks are each kind's
    earliest time in any of the trial's processes."""
    s = r["stamps"]
    began = max(s["iter"], s["restored"])  # reading starts after iter() and the restore
    out = {
        "startup": s["started"] - s["spawned"],
        "imports": s["imported"] - s["started"],
        "build": s["built"] - s["state_read"],
        "iter": max(0.0, s["iter"] - max(s["built"], s["restored"])),
        "restore": max(0.0, s["restored"] - max(s["built"], s["iter"])),
        "next": s["first_batch"] - began,
        "in_process": s["first_batch"] - s["state_read"],
        "total": s["first_batch"] - s["spawned"],
    }
    if "ray_started" in s:
        out["ray"] = s["ray_started"] - s["imported"]
        out["total_without_ray"] = out["total"] - out["ray"]
    m = r.get("marks", {})
    # when iter() was called: after building (Grain API), after the restore (torch's)
    called = s["built"] if s["iter"] <= s["restored"] else s["restored"]
    if "worker" in m:
        out["workers_up"] = m["worker"] - called
    if "record" in m:
        out["open"] = m["record"] - called
    if "element" in m:
        out["to_first_element"] = m["element"] - s["built"]
        out["first_element_to_batch"] = s["first_batch"] - m["element"]
        if "packed" in m:
            out["pack_fill"] = m["packed"] - m["element"]
    if "batch" in m:
        out["move"] = s["first_batch"] - m["batch"]
    return out


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0], repeats=TRIALS)
    trials = args.repeats
    started = time.perf_counter()
    env = common.environment()
    peers = ("torch", "torchdata", "pyarrow", "pillow", "litdata", "streaming-community", "ray")
    for peer in peers:
        env[peer] = common.version_of(peer)
    print(
        f"first batch: chute {env['chute']}, torch {env['torch']}, torchdata "
        f"{env['torchdata']}, litdata {env['litdata']}, streaming "
        f"{env['streaming-community']}, ray {env['ray']} | {env['python']}, "
        f"{env['cpus']} cpus; {trials} trials each, "
        "a fresh process per trial, medians"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    write_data()
    all_configs = configs()
    results: dict[str, list[dict[str, Any]]] = {key(c): [] for c in all_configs}
    errors: dict[str, str] = {}
    reasons: dict[str, str] = {}  # an error's short reason, for the table's cell
    saved: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="first-batch-") as state_dir:
        for c in all_configs:
            if c["mode"] == "restore":
                try:
                    saved[key(c)] = run_child(c, state_dir, mode="save")
                except Exception as exc:
                    errors[key(c)] = f"saving the state: {exc}"
                    reasons[key(c)] = f"save: {getattr(exc, 'reason', exc)}"
        for t in range(trials):
            live = [c for c in all_configs if key(c) not in errors]
            k = t % len(live)
            for c in live[k:] + live[:k]:
                try:
                    results[key(c)].append(run_child(c, state_dir))
                except Exception as exc:
                    errors[key(c)] = f"trial {t + 1}: {exc}"
                    reasons[key(c)] = str(getattr(exc, "reason", exc))
            print(f"  round {t + 1} done ({time.perf_counter() - started:.0f} s)")
    report(all_configs, results, reasons, saved)
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
    reasons: dict[str, str],
    saved: dict[str, Any],
) -> None:
    print(
        "\nms to the first batch: from building the pipeline (in the process) / from "
        "spawning the process; medians.  chute ray: without / with Ray's own start "
        "(ray.init() of a local cluster) in the second figure"
    )
    columns = [(m, w) for m in ("cold", "restore") for w in (0, 2)]
    rows = []
    for pipeline in PIPELINES:
        for loader in LOADERS:
            cells = []
            for mode, w in columns:
                k = key({"pipeline": pipeline, "loader": loader, "mode": mode, "workers": w})
                if k in reasons:
                    cells.append(short_reason(reasons[k]))
                elif results.get(k):
                    rs = results[k]
                    cell = f"{ms(median_of(rs, 'in_process'))} / "
                    if loader == "chute ray":
                        cell += f"{ms(median_of(rs, 'total_without_ray'))} ("
                        cell += f"{ms(median_of(rs, 'total'))})"
                    else:
                        cell += ms(median_of(rs, "total"))
                    cells.append(cell)
                else:
                    cells.append("")
            if any(cells):
                rows.append([pipeline, loader, *cells])
    common.print_table(
        ["pipeline", "loader", *(f"{m} {w}w" for m, w in columns)], rows, {2, 3, 4, 5}
    )
    print(
        "\nchute's first batch step by step (ms, medians).  startup: spawn to the script's "
        "first line; ray: import ray + ray.init(); build: pipeline made (restore: after "
        "reading the state file); iter, restore: those calls; next: the first next(); "
        "workers up: iter() to a worker's first line (worker_init_fn); open: iter() to the "
        "first record read from a source; 1st elem: pipeline made to the first element's "
        "work; pack fill: first element's work to the first packed row; move: the first "
        "batch made in its process to in the parent's hand; in process, total: as above.  "
        "Marks are each kind's earliest in any process; a restore's marks may come from "
        "reading done before set_state"
    )
    names = [
        ("startup", "startup"),
        ("imports", "imports"),
        ("ray", "ray"),
        ("build", "build"),
        ("iter", "iter"),
        ("restore", "restore"),
        ("next", "next"),
        ("workers_up", "workers up"),
        ("open", "open"),
        ("to_first_element", "1st elem"),
        ("pack_fill", "pack fill"),
        ("move", "move"),
        ("in_process", "in process"),
        ("total", "total"),
    ]
    rows = []
    for c in all_configs:
        if not c["loader"].startswith("chute") or key(c) in reasons:
            continue
        rs = results[key(c)]
        rows.append([key(c), *(ms(median_of(rs, n)) for n, _ in names)])
    headers = ["config", *(h for _, h in names)]
    common.print_table(headers, rows, set(range(1, len(headers))))
    for k, s in saved.items():
        print(f"  {k}: state saved at batch {s['saved_at']} of {s['batches']}")


if __name__ == "__main__":
    sys.exit(main())
