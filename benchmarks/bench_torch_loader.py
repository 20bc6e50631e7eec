# bench-requires: torch==2.13.0 torchdata==0.11.0 pillow
"""``chute.torch.DataLoader`` against PyTorch's ``DataLoader`` and torchdata's
``StatefulDataLoader``, 2 workers each, in one run (issue 38).

    bash benchmarks/run torch_loader

Three parts, each loader built the way a PyTorch user builds it, with
``num_workers=2`` and nothing else set unless said:

1. **Throughput and first batch.** A map-style ``Dataset`` of 4,096 JPEG photos of
   256x256x3 (``workers.photos``, quality 90) held as bytes in a list; ``__getitem__``
   decodes with Pillow, crops 224x224 at offsets from NumPy's global RNG, flips
   left-right when torch's global RNG says so, and returns ``(uint8 CHW tensor, index)``.
   ``batch_size=32, shuffle=True``.  Rows: ``torch`` (``torch.utils.data.DataLoader``),
   ``torchdata`` (``StatefulDataLoader``, its defaults: ``snapshot_every_n_steps=1``),
   ``chute`` (``chute.torch.DataLoader``) and ``limit``: 2 bare forked processes, each
   running ``__getitem__`` over half the images and collating them 32 at a time, with no
   loader around them and nothing handed back; glibc keeps freed memory in them, as in
   chute's workers, and ``limit (malloc defaults)`` shows them with glibc's defaults, as
   in PyTorch's workers.  A run builds the loader, calls
   ``iter()`` and reads one epoch (workers start in every run: no
   ``persistent_workers``).  Each loader's first (warm-up) epoch is checked: 128
   batches of (32, 3, 224, 224) uint8 and every index exactly once.  Then ``repeats``
   (5) runs each, alternating; the rate is images / the median epoch.  First batch:
   from building the loader to holding its first batch, 5 trials each, the median.
2. **Workers' memory over an epoch.** A ``Dataset`` holding a Python list of 1,000,000
   tuples ``(i, "obj0000000", i % 10)``; ``__getitem__`` returns ``(t[0], t[2])``;
   ``batch_size=256, shuffle=True``, one epoch each.  The workers' USS and PSS (sum over
   the worker processes, from ``/proc/<pid>/smaps_rollup``) after each worker delivered
   its first batch, at 10 points of the epoch and at its last batch.  The growth is end
   less start.  By default both libraries fork their workers from this process, whose
   pages (the list's included) they share until written; the rows ``forkserver`` pass
   ``multiprocessing_context="forkserver"``, through which the dataset travels pickled
   and each worker holds its own copy.  chute packs the list by default
   (``pack_lists=True``: its elements as pickles in one NumPy buffer, made in this
   process at ``iter()``, which the workers read without writing to shared pages);
   ``chute, pack_lists=False`` hands the list over as it is, as PyTorch does.
3. **state_dict() every step.** The JPEG loader's epoch, its loop calling
   ``loader.state_dict()`` after every batch or not: chute, and ``StatefulDataLoader``
   with ``snapshot_every_n_steps=1`` (and, as its baseline, with snapshots every 10**9
   steps, i.e. none).  Reported: the step time (epoch / 128), the time inside the
   ``state_dict()`` calls per step, and the epoch against its baseline (chute without
   the calls; torchdata without snapshots): the median over rounds of the ratio of the
   two epochs of one round (each round runs every loop once, the order rotated), at
   least 7 rounds.

Run through ``bash benchmarks/run torch_loader``; see README.md.
"""

from __future__ import annotations

import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio
from jpegs.work import keep_freed_memory
from workers import processes

try:
    import chute
    import chute.torch
except ImportError:
    sys.exit("bench_torch_loader: chute is not installed; use bash benchmarks/run torch_loader")
try:
    import torch
    import torch.utils.data
    from PIL import Image
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError as e:
    sys.exit(f"bench_torch_loader: {e}; use bash benchmarks/run torch_loader")

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
WORKERS = 2
N_IMAGES = 1024 if QUICK else 4096
SIDE, CROP, BATCH = 256, 224, 32
N_OBJECTS = 100_000 if QUICK else 1_000_000
OBJ_BATCH = 256
MEMORY_POINTS = 10  # samples of the workers' memory over an epoch
NO_SNAPSHOTS = 10**9  # StatefulDataLoader's snapshot_every_n_steps that never snapshots
FIRST_BATCH_TRIALS = 5
STATE_REPEATS = 7  # part 3's rounds (at least): its differences are small
TARGETS = {"throughput chute/torch": 1.2, "first batch chute/torch": 1.0, "state cost": 0.01}


# -- the data -----------------------------------------------------------------------------------


def make_jpegs(n: int) -> list[bytes]:
    """``n`` photo-like 256x256 JPEGs (windows of generated scenes), deterministic."""
    from workers.photos import CANVASES, canvas, jpeg, photo

    canvases = [canvas(k) for k in range(CANVASES)]
    return [jpeg(photo(canvases, i)) for i in range(n)]


class JpegDataset(torch.utils.data.Dataset):
    """JPEG bytes in a list; an item is decoded, cropped and flipped at random."""

    def __init__(self, jpegs: list[bytes]) -> None:
        self.jpegs = jpegs

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        with Image.open(io.BytesIO(self.jpegs[index])) as img:
            pixels = np.asarray(img)
        top, left = np.random.randint(0, SIDE - CROP + 1, size=2)
        window = pixels[top : top + CROP, left : left + CROP]
        if bool(torch.rand(()) < 0.5):
            window = window[:, ::-1]
        return torch.from_numpy(np.ascontiguousarray(window.transpose(2, 0, 1))), index


class ObjectsDataset(torch.utils.data.Dataset):
    """A Python list of small tuples; an item is two ints of one tuple."""

    def __init__(self, items: list[tuple[int, str, int]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[int, int]:
        item = self.items[index]
        return item[0], item[2]


def make_objects(n: int) -> list[tuple[int, str, int]]:
    return [(i, f"obj{i:07d}", i % 10) for i in range(n)]


# -- the loaders ----------------------------------------------------------------------------------


def torch_loader(dataset: Any, batch_size: int, context: str | None = None) -> Any:
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=WORKERS,
        multiprocessing_context=context,
    )


def torchdata_loader(dataset: Any, batch_size: int, snapshot_every_n_steps: int = 1) -> Any:
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=WORKERS,
        snapshot_every_n_steps=snapshot_every_n_steps,
    )


def chute_loader(
    dataset: Any, batch_size: int, context: str | None = None, pack_lists: bool = True
) -> Any:
    return chute.torch.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=WORKERS,
        multiprocessing_context=context,
        pack_lists=pack_lists,
    )


def close_any(it: Any) -> None:
    """Closes a chute iterator or a generator; stops a PyTorch iterator's workers."""
    if hasattr(it, "close"):
        it.close()
    else:
        runners.shutdown_torch(it)


def epochs(make_loader: Callable[[], Any], log: list[dict[str, Any]]) -> Callable[[], Any]:
    """A run: build the loader, ``iter()`` it; ``close()`` (not timed) waits for its workers."""
    return lambda: processes.ShutdownChecked(iter(make_loader()), log, close_any)


def limit_job(dataset: JpegDataset, order: np.ndarray, keep_memory: bool) -> Callable[[int], None]:
    """Bare process ``w``: ``__getitem__`` over ``order[w::WORKERS]``, collated 32 at a time,
    seeded and single-threaded as a PyTorch worker is; nothing handed back.  With
    ``keep_memory``, glibc keeps freed memory, as in chute's workers."""
    collate = torch.utils.data.default_collate

    def job(w: int) -> None:
        if keep_memory:
            keep_freed_memory()
        torch.set_num_threads(1)
        np.random.seed(w)
        torch.manual_seed(w)
        mine = order[w::WORKERS].tolist()
        for start in range(0, len(mine), BATCH):
            collate([dataset[i] for i in mine[start : start + BATCH]])

    return job


# -- part 1: throughput and first batch ------------------------------------------------------------


def digest(batch: Any) -> tuple[tuple[int, ...], str, list[int]]:
    images, indices = batch
    return tuple(images.shape), str(images.dtype), indices.tolist()


def check_epoch(out: list[Any], ref: list[Any]) -> str:
    """An epoch of (images, indices) batches: the shapes, dtypes and batch count of the
    reference, and every index exactly once (the orders differ: each loader shuffles its
    own way)."""
    if len(out) != len(ref):
        return f"MISMATCH: {len(out)} batches, the reference {len(ref)}"
    for k, (a, b) in enumerate(zip(out, ref)):
        if a[:2] != b[:2]:
            return f"MISMATCH: batch {k}: {a[:2]} vs {b[:2]}"
    seen = sorted(i for _, _, indices in out for i in indices)
    if seen != list(range(N_IMAGES)):
        return f"MISMATCH: the epoch's indices are not each of range({N_IMAGES}) once"
    return "ok"


def throughput(dataset: JpegDataset, repeats: int, log: list[dict[str, Any]]) -> dict[str, Any]:
    began = time.perf_counter()
    order = np.random.default_rng(0).permutation(N_IMAGES)
    impls = [
        Impl("torch", epochs(lambda: torch_loader(dataset, BATCH), log), N_IMAGES),
        Impl("torchdata", epochs(lambda: torchdata_loader(dataset, BATCH), log), N_IMAGES),
        Impl("chute", epochs(lambda: chute_loader(dataset, BATCH), log), N_IMAGES),
        Impl(
            "limit",
            lambda: runners.bare_processes(limit_job(dataset, order, True), WORKERS),
            N_IMAGES,
            note="2 bare forked processes: __getitem__ and collate, nothing handed back; "
            "glibc keeps freed memory, as in chute's workers",
        ),
        Impl(
            "limit (malloc defaults)",
            lambda: runners.bare_processes(limit_job(dataset, order, False), WORKERS),
            N_IMAGES,
            note="the limit with glibc's defaults, as in PyTorch's workers",
        ),
    ]
    torch_impl, torchdata_impl, chute_impl, limit, limit_defaults = impls
    ref = common.collect(torch_impl, digest)
    common.mark_reference(torch_impl, ref)
    for impl in (torchdata_impl, chute_impl):
        common.check_against(impl, common.collect(impl, digest), "torch", ref, check_epoch)
    for impl in (limit, limit_defaults):
        common.collect(impl)
        impl.check = "ok" if impl.error is None else common.CHECK_RAISED
    common.report_check(impls, "torch", "every epoch holds each index once, shapes and dtypes")
    common.time_runs(impls, repeats)
    common.time_first_batch(impls[:3], trials=FIRST_BATCH_TRIALS)
    ratios = [
        Ratio("throughput chute/torch", chute_impl, torch_impl, TARGETS["throughput chute/torch"]),
        Ratio("throughput chute/torchdata", chute_impl, torchdata_impl, None),
        Ratio("throughput chute/limit", chute_impl, limit, None),
        Ratio("throughput chute/limit (malloc defaults)", chute_impl, limit_defaults, None),
        Ratio("throughput torch/limit (malloc defaults)", torch_impl, limit_defaults, None),
    ]
    common.mark_invalid(ratios)
    first = {i.name: statistics.median(i.first_batch) for i in impls[:3] if i.first_batch}
    rows = []
    for impl in impls:
        rate = impl.rate()
        fb = first.get(impl.name)
        rows.append(
            [
                impl.name,
                common.fmt_num(rate),
                f"{rate / chute_impl.rate():.2f}" if rate and chute_impl.rate() else "-",
                f"{impl.spread():.0%}" if impl.spread() is not None else "-",
                f"{fb * 1000:.0f}" if fb is not None else "-",
                f"{first['chute'] / fb:.2f}" if fb and "chute" in first else "-",
            ]
        )
    print()
    print(f"part 1: {N_IMAGES} JPEGs of {SIDE}x{SIDE}, batch {BATCH}, {WORKERS} workers")
    common.print_table(
        ["loader", "images/s", "/ chute", "spread", "first batch ms", "chute / it"],
        rows,
        {1, 2, 3, 4, 5},
    )
    fb_ratio = first["chute"] / first["torch"] if "chute" in first and "torch" in first else None
    verdicts = [
        [r.label, f"{r.value():.2f}x" if r.value() else "-", r.result()] for r in ratios
    ] + [
        [
            "first batch chute/torch (lower is sooner)",
            f"{fb_ratio:.2f}x" if fb_ratio else "-",
            ("PASS" if fb_ratio <= TARGETS["first batch chute/torch"] else "SHORT")
            if fb_ratio
            else "n/a",
        ],
        [
            "first batch chute/torchdata",
            f"{first['chute'] / first['torchdata']:.2f}x"
            if "chute" in first and "torchdata" in first
            else "-",
            "",
        ],
    ]
    common.print_table(["ratio", "value", "result"], verdicts, {1})
    return {
        "name": "throughput",
        "description": part_description(1),
        "unit": "images/s",
        "seconds": time.perf_counter() - began,
        "impls": impls,
        "ratios": ratios,
        "first_batch_median_s": first,
        "first_batch_chute_over_torch": fb_ratio,
    }


def part_description(k: int) -> str:
    doc = __doc__ or ""
    start = doc.index(f"{k}. **")
    end = doc.find(f"{k + 1}. **", start)
    return " ".join(doc[start : end if end > 0 else doc.index("Run through")].split())


# -- part 2: the workers' memory -------------------------------------------------------------------


def smaps_rollup(pid: int) -> dict[str, int]:
    """The kB fields of /proc/<pid>/smaps_rollup ({} if the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        return {}
    return out


def workers_memory() -> dict[str, Any]:
    """USS, PSS and RSS in MB summed over the live worker processes below this one."""
    uss = pss = rss = 0
    pids = processes.live_workers()
    for pid in pids:
        m = smaps_rollup(pid)
        uss += m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)
        pss += m.get("Pss", 0)
        rss += m.get("Rss", 0)
    return {"workers": len(pids), "uss_mb": uss / 1024, "pss_mb": pss / 1024, "rss_mb": rss / 1024}


def wait_no_workers(timeout_s: float = 30.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while processes.live_workers() and time.perf_counter() < deadline:
        time.sleep(0.05)


def memory_epoch(name: str, make_loader: Callable[[], Any]) -> dict[str, Any]:
    """One epoch of ``make_loader()``; the workers' memory at its start, over it, at its end."""
    wait_no_workers()
    common.wait_quiet()
    began = time.perf_counter()
    loader = make_loader()
    total = len(loader)
    it = iter(loader)
    samples: list[tuple[int, dict[str, Any]]] = []
    every = max(1, total // MEMORY_POINTS)
    start = end = None
    try:
        with common.time_limit(600):
            for k, _ in enumerate(it, 1):
                if k == WORKERS:  # each worker has delivered a batch
                    start = workers_memory()
                    samples.append((k, start))
                elif k % every == 0 and k < total:
                    samples.append((k, workers_memory()))
                if k == total:  # the last batch, before StopIteration stops the workers
                    end = workers_memory()
                    samples.append((k, end))
    finally:
        close_any(it)
    seconds = time.perf_counter() - began
    del it, loader
    wait_no_workers()
    assert start is not None and end is not None
    return {
        "name": name,
        "batches": total,
        "epoch_s": seconds,
        "start": start,
        "end": end,
        "peak_uss_mb": max(s["uss_mb"] for _, s in samples),
        "samples": [{"batch": k, **s} for k, s in samples],
    }


def memory() -> dict[str, Any]:
    began = time.perf_counter()
    made = time.perf_counter()
    dataset = ObjectsDataset(make_objects(N_OBJECTS))
    made = time.perf_counter() - made
    parent = smaps_rollup(os.getpid())
    print()
    print(
        f"part 2: a list of {N_OBJECTS:,} tuples (made in {made:.1f} s; this process's USS "
        f"{(parent.get('Private_Clean', 0) + parent.get('Private_Dirty', 0)) / 1024:,.0f} MB), "
        f"batch {OBJ_BATCH}, {WORKERS} workers"
    )
    runs = [
        ("torch", lambda: torch_loader(dataset, OBJ_BATCH)),
        ("torchdata", lambda: torchdata_loader(dataset, OBJ_BATCH)),
        ("chute", lambda: chute_loader(dataset, OBJ_BATCH)),
        ("chute, pack_lists=False", lambda: chute_loader(dataset, OBJ_BATCH, pack_lists=False)),
        ("torch, forkserver", lambda: torch_loader(dataset, OBJ_BATCH, "forkserver")),
        ("chute, forkserver", lambda: chute_loader(dataset, OBJ_BATCH, "forkserver")),
    ]
    results = []
    for name, make in runs:
        try:
            results.append(memory_epoch(name, make))
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            print(f"  ERROR in {name}: {type(e).__name__}: {e}", file=sys.stderr)
            results.append({"name": name, "error": f"{type(e).__name__}: {e}"})
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["name"], "-", "-", "-", "-", "-", "-", "-", r["error"]])
            continue
        s, e = r["start"], r["end"]
        rows.append(
            [
                r["name"],
                f"{s['uss_mb']:,.0f}",
                f"{e['uss_mb']:,.0f}",
                f"{e['uss_mb'] - s['uss_mb']:+,.0f}",
                f"{s['pss_mb']:,.0f}",
                f"{e['pss_mb']:,.0f}",
                f"{e['pss_mb'] - s['pss_mb']:+,.0f}",
                f"{r['epoch_s']:.1f}",
                f"{s['workers']}/{e['workers']}",
            ]
        )
    common.print_table(
        [
            "loader",
            "USS start MB",
            "USS end MB",
            "growth",
            "PSS start MB",
            "PSS end MB",
            "growth",
            "epoch s",
            "workers",
        ],
        rows,
        {1, 2, 3, 4, 5, 6, 7},
    )
    print("  (USS and PSS summed over the worker processes; start: after each delivered a batch)")
    return {
        "name": "memory",
        "description": part_description(2),
        "unit": "MB",
        "seconds": time.perf_counter() - began,
        "impls": [],
        "ratios": [],
        "parent_smaps_kb": parent,
        "runs": results,
    }


# -- part 3: state_dict() every step ---------------------------------------------------------------


def stepping(
    make_loader: Callable[[], Any], take_state: bool, calls: list[float]
) -> Callable[[], Iterator[Any]]:
    """An epoch whose loop calls ``loader.state_dict()`` after every batch (if ``take_state``),
    adding the seconds each call took to ``calls``."""

    def run() -> Iterator[Any]:
        loader = make_loader()
        it = iter(loader)
        try:
            for batch in it:
                if take_state:
                    t = time.perf_counter()
                    loader.state_dict()
                    calls.append(time.perf_counter() - t)
                yield batch
        finally:
            close_any(it)

    return run


def paired_ratio(impl: Impl, base: Impl) -> float | None:
    """The median over rounds of ``impl``'s epoch / ``base``'s epoch in the same round."""
    pairs = [a / b for a, b in zip(impl.times, base.times) if b]
    return statistics.median(pairs) if pairs and len(impl.times) == len(base.times) else None


def state_cost(dataset: JpegDataset, repeats: int, log: list[dict[str, Any]]) -> dict[str, Any]:
    began = time.perf_counter()
    configs: list[tuple[str, Callable[[], Any], bool]] = [
        ("chute", lambda: chute_loader(dataset, BATCH), False),
        ("chute + state_dict", lambda: chute_loader(dataset, BATCH), True),
        ("torchdata snap=1e9", lambda: torchdata_loader(dataset, BATCH, NO_SNAPSHOTS), False),
        ("torchdata snap=1", lambda: torchdata_loader(dataset, BATCH, 1), False),
        ("torchdata snap=1 + state_dict", lambda: torchdata_loader(dataset, BATCH, 1), True),
    ]
    calls: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    impls = [
        Impl(
            name,
            lambda make=make, take=take, name=name: processes.ShutdownChecked(
                stepping(make, take, calls[name])(), log
            ),
            N_IMAGES,
        )
        for name, make, take in configs
    ]
    for impl in impls:  # warm-up; the outputs were checked in part 1
        common.collect(impl)
        impl.check = "ok" if impl.error is None else common.CHECK_RAISED
    for c in calls.values():
        c.clear()
    common.time_runs(impls, repeats)
    by = {i.name: i for i in impls}
    steps = -(-N_IMAGES // BATCH)
    base = {"chute": by["chute"], "torchdata": by["torchdata snap=1e9"]}
    rows, per_call, epoch_ratios = [], {}, {}
    for impl in impls:
        step = impl.median / steps if impl.median else None
        c = calls[impl.name]
        call = statistics.mean(c) if c else None
        per_call[impl.name] = {
            "calls": len(c),
            "mean_s": call,
            "median_s": statistics.median(c) if c else None,
            "max_s": max(c) if c else None,
        }
        ref = base["chute" if impl.name.startswith("chute") else "torchdata"]
        paired = paired_ratio(impl, ref)
        epoch_ratios[impl.name] = paired
        rows.append(
            [
                impl.name,
                f"{step * 1000:.2f}" if step else "-",
                f"{call * 1e6:.1f}" if call is not None else "-",
                f"{call / step:.3%}" if call is not None and step else "-",
                f"{paired:.3f}" if paired else "-",
                f"{impl.spread():.0%}" if impl.spread() is not None else "-",
            ]
        )
    print()
    print(f"part 3: state_dict() after every step, {steps} steps of {BATCH} JPEGs")
    common.print_table(
        ["loop", "step ms", "state_dict() us", "of the step", "epoch / baseline", "spread"],
        rows,
        {1, 2, 3, 4, 5},
    )
    chute_share = None
    if per_call["chute + state_dict"]["mean_s"] and by["chute + state_dict"].median:
        chute_share = per_call["chute + state_dict"]["mean_s"] / (
            by["chute + state_dict"].median / steps
        )
        verdict = "PASS" if chute_share < TARGETS["state cost"] else "SHORT"
        print(
            f"  chute's state_dict() per step / step time: {chute_share:.3%} (target < "
            f"{TARGETS['state cost']:.0%}): {verdict}"
        )
    return {
        "name": "state_dict",
        "description": part_description(3),
        "unit": "images/s",
        "seconds": time.perf_counter() - began,
        "impls": impls,
        "ratios": [],  # the paired ratios below: the medians' ratio is noisier
        "state_dict_calls": per_call,
        "epoch_over_baseline_paired_median": epoch_ratios,
        "chute_state_dict_share_of_step": chute_share,
    }


# -- main ------------------------------------------------------------------------------------------


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0] if __doc__ else "", repeats=5)
    started = time.perf_counter()
    env = common.environment()
    for peer in ("torch", "torchdata", "pillow"):
        env[peer] = common.version_of(peer)
    warning = common.load_warning()
    if warning:
        print(warning)
    shm_start = processes.shm_names()
    made = time.perf_counter()
    dataset = JpegDataset(make_jpegs(N_IMAGES))
    size = sum(len(j) for j in dataset.jpegs)
    print(
        f"{N_IMAGES} JPEGs, {size / 2**20:.1f} MiB, made in {time.perf_counter() - made:.1f} s; "
        f"torch {env['torch']}, torchdata {env['torchdata']}, chute {env['chute']}"
    )
    log: list[dict[str, Any]] = []
    results = [throughput(dataset, args.repeats, log)]
    results.append(memory())
    results.append(state_cost(dataset, max(args.repeats, STATE_REPEATS), log))
    print(f"\nworkers after each close: {processes.shutdown_summary(log)}")
    cleanup, problems = processes.cleanup_report(shm_start)
    env["cleanup"] = cleanup
    for p in problems:
        print(f"PROBLEM: {p}")
    status = common.finish("torch_loader", args, env, started, results)
    return status or (1 if problems else 0)


if __name__ == "__main__":
    sys.exit(main())
