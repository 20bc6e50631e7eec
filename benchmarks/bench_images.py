"""A realistic image pipeline at the two-core limit: JPEGs decoded, augmented, normalised.

    bash benchmarks/run images

20,000 JPEGs of 128x128x3 (quality 90, 10 classes, photo-like: ``jpegs/data.py``) in a
folder, converted with ``chute convert`` into 8 ArrayRecord shards, and written in each
peer's own format too.  Every loader decodes each image with Pillow, crops 112x112 at
random, flips half of them, normalises to float32 and batches 64 (``jpegs/work.py``),
with 2 worker processes:

* ``chute mp_prefetch``: ``MapDataset.source(ArrayRecordDataSource(...)).seed(0)
  .shuffle().map(decode_row).random_map(augment).map(normalise_element).batch(64)
  .to_iter_dataset().mp_prefetch(MultiprocessingOptions(num_workers=2))``;
* ``chute DataLoader``: the same through ``DataLoader(data_source, IndexSampler(shuffle),
  operations=[...], worker_count=2)``;
* ``PyTorch DataLoader, files``: a ``Dataset`` over the JPEG files, ``DataLoader(
  batch_size=64, shuffle=True, num_workers=2)``;
* ``LitData``: ``litdata.optimize`` rows, ``StreamingDataset(local folder, shuffle=True,
  transform=...)``, ``StreamingDataLoader``;
* ``WebDataset``: 8 tar shards, ``WebDataset(shards, shardshuffle).shuffle(1000)
  .to_tuple("jpg", "cls").map(...).batched(64)``, ``WebLoader(batch_size=None)``;
* ``MosaicML Streaming``: ``MDSWriter`` shards, a ``StreamingDataset`` (local) subclass
  whose ``__getitem__`` transforms, in a torch ``DataLoader``;
* ``limit``: two bare forked processes that decode, augment, normalise and stack their
  half of the JPEGs, held in memory, and hand nothing back; they keep freed memory as
  chute's workers do, and ``limit (malloc defaults)`` shows them with glibc's defaults.

Each loader runs in a fresh interpreter of its own (``jpegs/child.py``) that runs an epoch
when told.  A first epoch of each is the warm-up (the page cache) and the output check;
then 5 rounds, one epoch of each loader per round, the order rotated every round.  The
rate is 20,000 / the median epoch.  Every epoch must hold 20,000 images of (112, 112, 3)
float32, labels int64, 2,000 of each class.  chute's first 2 batches through each API
must equal the same batches made without workers (a hash): the two APIs shuffle
differently (``IndexSampler``'s order is Grain's, not ``MapDataset.shuffle``'s), so each
is checked against itself.  ``BENCH_QUICK=1``: 2,000 images, one round.
"""

# bench-requires: torch==2.13.0 pillow array_record litdata webdataset streaming-community

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import common

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
N = 2_000 if QUICK else 20_000
ROUNDS = 5
TARGETS = {"limit": 0.9, "peer": 1.0}
CHUTE = ("chute mp_prefetch", "chute DataLoader")
LIMIT = "limit"
NO_TARGET = ("limit (malloc defaults)",)  # shown beside the limit, for what it explains
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDER = os.path.join(ROOT, ".bench-data", f"images-{N}")
CHILD_FLAG = "--child"


class Child:
    """One loader's interpreter (``jpegs/child.py``): epochs on command."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), CHILD_FLAG, name, FOLDER, str(N)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.times: list[float] = []
        self.problems: list[str] = []
        self.check: dict[str, Any] = {}
        self.error: str | None = None
        self._reply("ready")

    def _reply(self, prefix: str) -> str:
        """The child's next line starting with ``prefix``; its other lines are shown."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line[len(prefix) :]
            print(f"    [{self.name}] {line.rstrip()}")
        raise RuntimeError(f"{self.name}: its process ended (exit {self.proc.wait()})")

    def epoch(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        result = json.loads(self._reply("RESULT "))
        if result["problem"]:
            self.problems.append(result["problem"])
        return result

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()

    def rate(self) -> float | None:
        return N / statistics.median(self.times) if self.times and not self.error else None


def step_costs() -> dict[str, float]:
    from jpegs import data, work

    return work.step_costs(data.read_jpegs(FOLDER, 500))


def selected() -> list[str]:
    """The loaders to run: all, or those ``BENCH_IMAGES_ONLY`` names (comma-separated)."""
    from jpegs.loaders import LOADERS

    only = os.environ.get("BENCH_IMAGES_ONLY")
    if not only:
        return list(LOADERS)
    names = [name.strip() for name in only.split(",")]
    unknown = [name for name in names if name not in LOADERS]
    if unknown:
        sys.exit(f"bench_images: no loader named {unknown}; the loaders: {list(LOADERS)}")
    return names


def run_all(names: list[str], rounds: int) -> list[Child]:
    children = []
    for name in names:
        try:
            children.append(Child(name))
        except Exception as exc:
            print(f"  {name}: cannot start: {exc}")
    try:
        for child in children:  # the warm-up: the page cache, and the output check
            try:
                child.check = child.epoch("check")
            except Exception as exc:
                child.error = f"check run: {exc}"
            show_check(child)
        live = [c for c in children if c.error is None]
        for r in range(rounds):
            k = r % len(live)
            for child in live[k:] + live[:k]:
                time.sleep(0.5)  # the last epoch's worker processes are gone
                try:
                    child.times.append(child.epoch("run")["seconds"])
                except Exception as exc:
                    child.error = f"round {r + 1}: {exc}"
            done = [c for c in live if c.error is None]
            print(f"  round {r + 1}: " + ", ".join(f"{c.name} {c.times[-1]:.2f} s" for c in done))
        for child in live:
            compare_first_batches(child)
    finally:
        for child in children:
            child.close()
    return children


def show_check(child: Child) -> None:
    check = child.check
    if child.error:
        print(f"  {child.name:26} ERROR {child.error}")
        return
    line = f"  {child.name:26} check epoch {check['seconds']:.2f} s, {check['images']:,} images"
    print(line + (f"; PROBLEM: {check['problem']}" if check["problem"] else ""))


def compare_first_batches(child: Child) -> None:
    """chute's first batches against the same made without workers (after the timed runs)."""
    reference = child.epoch("reference")["reference"]
    if reference is None:
        return
    same = reference == child.check["digest"]
    print(
        f"  {child.name}: first batches "
        + ("equal those made without workers" if same else "DIFFER from those made without workers")
    )
    if not same:
        child.problems.append("its first batches differ from those made without workers")


def ratio_rows(children: list[Child]) -> list[tuple[str, float | None, float | None]]:
    """chute (each API) / every other loader, with its target (``None``: none)."""
    rates = {c.name: c.rate() for c in children}
    rows = []
    for mine in CHUTE:
        for other in rates:
            if other in CHUTE:
                continue
            a, b = rates.get(mine), rates.get(other)
            target = TARGETS["limit"] if other == LIMIT else TARGETS["peer"]
            if other in NO_TARGET:
                target = None
            rows.append((f"{mine} / {other}", a / b if a and b else None, target))
    return rows


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0], repeats=ROUNDS)
    rounds = 1 if QUICK else args.repeats
    started = time.perf_counter()
    env = common.environment()
    for peer in ("torch", "pillow", "litdata", "webdataset", "streaming-community"):
        env[peer] = common.version_of(peer)
    from jpegs import data
    from jpegs.loaders import FORMATS

    names = selected()
    data.write_all(FOLDER, N, {FORMATS[name] for name in names if name in FORMATS})
    costs = step_costs()
    print(
        f"images: {N:,} JPEGs of 128x128x3 (quality 90, {data.jpeg_bytes_example(FOLDER):,} "
        f"bytes on average), 10 classes; crop 112, flip, float32, batches of 64; 2 workers each"
    )
    print(
        "one thread, per image: "
        + ", ".join(f"{k} {v:.0f} us" for k, v in costs.items())
        + f"; two cores' limit {2e6 / sum(v for k, v in costs.items() if k != 'unpickle row'):,.0f}"
        " images/s"
    )
    print(f"timing: a check epoch, then {rounds} round(s) of one epoch each, alternating; medians")
    warning = common.load_warning()
    if warning:
        print(warning)
    children = run_all(names, rounds)
    limit_rate = next((c.rate() for c in children if c.name == LIMIT), None)
    mp_rate = next((c.rate() for c in children if c.name == CHUTE[0]), None)
    dl_rate = next((c.rate() for c in children if c.name == CHUTE[1]), None)
    print()
    rows = []
    for c in children:
        rate = c.rate()
        vs = [
            f"{mine / rate:.2f}x" if mine and rate and c.name not in CHUTE else ""
            for mine in (mp_rate, dl_rate)
        ]
        rows.append([c.name, common.fmt_num(rate), *vs, c.error or "; ".join(c.problems)])
    common.print_table(
        ["loader", "images/s", "mp_prefetch / it", "DataLoader / it", "problems"],
        rows,
        {1, 2, 3},
    )
    print()
    ratios = ratio_rows(children)
    common.print_table(
        ["ratio (median rates)", "value", "target", "result"],
        [
            [
                label,
                f"{v:.2f}x" if v else "-",
                f">= {t:g}x" if t else "",
                ("PASS" if v >= t else "SHORT") if v and t else "",
            ]
            for label, v, t in ratios
        ],
        {1, 2},
    )
    problems = [f"{c.name}: {c.error or '; '.join(c.problems)}" for c in children]
    problems = [p for p, c in zip(problems, children) if c.error or c.problems]
    for line in problems:
        print(f"PROBLEM: {line}")
    common.write_json(
        args.json,
        {
            "benchmark": "images",
            "environment": env,
            "images": N,
            "rounds": rounds,
            "step_costs_us": costs,
            "loaders": {
                c.name: {
                    "rate_median": c.rate(),
                    "run_times_s": c.times,
                    "check": c.check,
                    "problems": c.problems,
                    "error": c.error,
                }
                for c in children
            },
            "limit_rate": limit_rate,
            "ratios": [{"label": a, "value": v, "target": t} for a, v, t in ratios],
            "total_seconds": time.perf_counter() - started,
        },
    )
    load = common.load_average()
    print(f"\ntotal {time.perf_counter() - started:.1f} s; load average at the end {load:.1f}")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == CHILD_FLAG:
        from jpegs.child import serve

        sys.exit(serve(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(main())
