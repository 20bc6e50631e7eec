# bench-requires: torch==2.13.0
"""Mixture weights on a schedule: what ``IterDataset.mix`` with a ``WeightSchedule`` costs.

Sources of cheap elements (ints), ``S`` in {2, 4, 8}, mixed and batched:

    sources = [MapDataset.range(i * BIG, i * BIG + n).map(tag).to_iter_dataset() for i in S]
    IterDataset.mix(sources, weights).batch(256)      # then mp_prefetch(2 workers), or not

with ``weights``:

* ``fixed``: today's fixed weights (Grain's order);
* ``piecewise``: ``WeightSchedule(points=...)``, the fixed weights rotated by one source
  every 1,000 elements;
* ``fn every=1`` and ``fn every=100``: ``WeightSchedule(fn=Smooth(...), every=...)``, each
  weight ``w_i * (1 + 0.5 sin(2 pi k / 20,000 + 2 pi i / S))`` at step ``k``.

Peers and limits, in the same alternating group: Grain 0.2.18's fixed-weight mix (the
same code; it is slow here, so it reads fewer elements and rates are compared per
element), PyTorch's ``DataLoader`` over an ``IterableDataset`` that picks a source per
element with numpy's seeded ``choice`` (what a PyTorch user writes: torch has no mix),
and the bare loop: the fixed mix's source order, ``next()`` on plain Python iterators and
``np.asarray`` per batch (in one thread; with workers, two forked processes doing half
each and handing nothing back).  A run reads ``M`` elements (``M_GRAIN`` for Grain) and
stops.  Also printed: the worst deviation of any source's share from its weight over the
1,000-element windows of chute's in-process output.

Run through ``bash benchmarks/run mix_schedule``; see README.md.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio

runners.mark_grain_flags_parsed()  # Grain's spawned workers import this script too

BIG = 10**9  # source i yields tag(i * BIG + j): the source of an element is (v - 1) // BIG
BATCH = 256
M = 256 * 400  # elements a run of chute, PyTorch and the loop reads
M_GRAIN = 256 * 16  # Grain reads about 3,000 elements/s here
N = M  # elements in each source: no source runs out within a run
EVERY = 1_000  # the piecewise schedule's stretch
PERIOD = 20_000  # the smooth schedule's period
WINDOW = 1_000
TARGET = 0.95
WEIGHTS = {
    2: [0.7, 0.3],
    4: [0.4, 0.3, 0.2, 0.1],
    8: [0.2, 0.15, 0.15, 0.1, 0.1, 0.1, 0.1, 0.1],
}
MODES = (0, 2)  # worker processes


def tag(x: int) -> int:
    return x + 1


def source_of(values: np.ndarray) -> np.ndarray:
    return (values - 1) // BIG


def rotated(weights: list[float], j: int) -> list[float]:
    return [float(w) for w in np.roll(weights, j)]


def piecewise_points(weights: list[float]) -> dict[int, list[float]]:
    return {k: rotated(weights, k // EVERY) for k in range(0, M + EVERY, EVERY)}


class Smooth:
    """The smooth schedule's function: each weight swings by half around its fixed value."""

    def __init__(self, weights: list[float]) -> None:
        self.weights = list(weights)

    def __call__(self, step: int) -> list[float]:
        s = len(self.weights)
        return [
            w * (1.0 + 0.5 * math.sin(2 * math.pi * step / PERIOD + 2 * math.pi * i / s))
            for i, w in enumerate(self.weights)
        ]


# -- the pipelines: the same code for chute and Grain ------------------------------------------


def mixed(lib: Any, s: int, weights: Any, workers: int) -> Any:
    sources = [
        lib.MapDataset.range(i * BIG, i * BIG + N).map(tag).to_iter_dataset() for i in range(s)
    ]
    ds = lib.IterDataset.mix(sources, weights).batch(BATCH)
    return runners.with_workers(lib, ds, workers) if workers else ds


def schedules(chute: Any, s: int) -> dict[str, Any]:
    w = WEIGHTS[s]
    ws = chute.experimental.WeightSchedule
    return {
        "fixed": w,
        "piecewise": ws(points=piecewise_points(w)),
        "fn every=1": ws(fn=Smooth(w), every=1),
        "fn every=100": ws(fn=Smooth(w), every=100),
    }


def in_force(name: str, s: int, steps: np.ndarray) -> np.ndarray:
    """(len(steps), s): the normalised weights in force at each step of schedule ``name``."""
    w = np.array(WEIGHTS[s], dtype=np.float64)
    if name == "fixed":
        out = np.tile(w, (len(steps), 1))
    elif name == "piecewise":
        out = np.stack([np.roll(w, int(j)) for j in steps // EVERY])
    else:
        every = 1 if name == "fn every=1" else 100
        at = steps - steps % every
        phase = 2 * np.pi * at[:, None] / PERIOD + 2 * np.pi * np.arange(s)[None, :] / s
        out = w[None, :] * (1.0 + 0.5 * np.sin(phase))
    return out / out.sum(axis=1, keepdims=True)


# -- PyTorch and the loop ---------------------------------------------------------------------


def torch_dataset(torch: Any, s: int) -> Any:
    """An ``IterableDataset`` mixing ``s`` sources: a seeded numpy choice per element; each
    worker reads every ``num_workers``-th element of each source."""
    w = np.array(WEIGHTS[s]) / sum(WEIGHTS[s])

    class Mix(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[int]:
            info = torch.utils.data.get_worker_info()
            wid, count = (0, 1) if info is None else (info.id, info.num_workers)
            its = [map(tag, range(i * BIG + wid, i * BIG + N, count)) for i in range(s)]
            for k in np.random.default_rng(wid).choice(s, size=M // count, p=w).tolist():
                yield next(its[k])

    return Mix()


def loop(order: list[int], s: int, wid: int = 0, count: int = 1) -> Iterator[np.ndarray]:
    """The bare loop: ``order``'s sources, plain iterators, ``np.asarray`` per batch."""
    its = [map(tag, range(i * BIG + wid, i * BIG + N, count)) for i in range(s)]
    for a in range(0, len(order), BATCH):
        yield np.asarray([next(its[k]) for k in order[a : a + BATCH]])


def drain(it: Iterator[Any]) -> None:
    for _ in it:
        pass


class Limited:
    """The first ``units`` elements of a batch iterator; ``close`` closes what it reads."""

    def __init__(self, it: Iterator[Any], units: int) -> None:
        self._it, self._left = it, units

    def __iter__(self) -> Limited:
        return self

    def __next__(self) -> Any:
        if self._left <= 0:
            raise StopIteration
        batch = next(self._it)
        self._left -= len(batch)
        return batch

    def close(self) -> None:
        common.close(self._it)
        runners.shutdown_torch(self._it)


# -- checks and windows ----------------------------------------------------------------------


def flat(out: list[Any] | None) -> np.ndarray | None:
    return None if out is None else np.concatenate([np.asarray(b) for b in out])


def in_order(values: np.ndarray, s: int, workers: int) -> str:
    """'ok' if every source's elements (each worker's share of it) come once each, in order,
    from its beginning: nothing lost or repeated."""
    count = max(workers, 1)
    src = source_of(values)
    for i in range(s):
        mine = values[src == i] - 1 - i * BIG
        for w in range(count):
            got = mine[mine % count == w]
            if not np.array_equal(got, np.arange(w, w + count * len(got), count)):
                return f"MISMATCH: source {i} (worker share {w}) is not read once each, in order"
    return "ok"


def deviation(order: np.ndarray, name: str, s: int) -> dict[str, float]:
    """Worst |share - weight| in percentage points over the 1,000-element windows of
    ``order``: against the window's mean weight (every window), and for a piecewise
    schedule within its constant stretches only."""
    n = len(order) - len(order) % WINDOW
    if n < WINDOW:
        return {}
    order = order[:n]
    hits = np.zeros((n + 1, s))
    hits[1:] = np.cumsum(np.eye(s)[order], axis=0)
    weights = np.zeros((n + 1, s))
    weights[1:] = np.cumsum(in_force(name, s, np.arange(n)), axis=0)
    shares = (hits[WINDOW:] - hits[:-WINDOW]) / WINDOW
    means = (weights[WINDOW:] - weights[:-WINDOW]) / WINDOW
    out = {"sliding_vs_mean_pp": float(np.abs(shares - means).max() * 100)}
    if name == "piecewise":
        starts = np.arange(0, n - WINDOW + 1, EVERY)
        out["within_stretches_pp"] = float(np.abs(shares[starts] - means[starts]).max() * 100)
    out["min_weight_pct"] = float(means.min() * 100)
    return out


# -- one group: S sources, in process or with workers ---------------------------------------


def chute_run(chute: Any, s: int, weights: Any, workers: int) -> Any:
    """``make_iter`` of chute's mix with ``weights``: the first ``M`` elements."""
    return lambda: Limited(iter(mixed(chute, s, weights, workers)), M)


def bench_group(chute: Any, grain: Any, torch: Any, s: int, workers: int, repeats: int) -> Any:
    where = f"{workers} workers" if workers else "in process"
    impls: dict[str, Impl] = {}
    for name, weights in schedules(chute, s).items():
        impls[name] = Impl(f"chute {name}", chute_run(chute, s, weights, workers), M)
    impls["grain"] = Impl(
        "grain fixed",
        lambda: Limited(iter(mixed(grain, s, WEIGHTS[s], workers)), M_GRAIN),
        M_GRAIN,
        f"{M_GRAIN:,} elements",
    )
    impls["torch"] = Impl(
        "torch",
        lambda: Limited(
            iter(runners.torch_loader(torch, torch_dataset(torch, s), workers, BATCH)), M
        ),
        M,
        "numpy choice per element",
    )
    order: list[int] = []
    if workers:
        impls["limit"] = Impl(
            "limit 2 processes",
            lambda: runners.bare_processes(lambda w: drain(loop(order[: M // 2], s, w, 2)), 2),
            M,
            "forked, hand back nothing",
        )
    else:
        impls["limit"] = Impl("loop", lambda: loop(order, s), M, "fixed order, 1 thread")

    # The check runs (also the warm-up); the loop's order is the fixed mix's.
    outs = {"fixed": flat(common.collect(impls["fixed"]))}
    if outs["fixed"] is not None:
        order[:] = source_of(outs["fixed"][:M]).tolist()
    for key, impl in impls.items():
        if key != "fixed" and (key != "limit" or not workers):
            outs[key] = flat(common.collect(impl))
    if workers:
        try:
            common.one_run(impls["limit"])
            impls["limit"].check = "ok"
        except Exception:
            common.fail(impls["limit"], "check run")
    ref = outs["grain"]
    common.mark_reference(impls["grain"], None if ref is None else [ref])
    for key, impl in impls.items():
        got = outs.get(key)
        if key in ("grain",) or (key == "limit" and workers):
            continue
        if got is None:
            impl.check = common.CHECK_RAISED
        elif len(got) < impl.units:
            impl.check = f"MISMATCH: {len(got)} elements, expected {impl.units}"
        elif key == "fixed" and ref is None:
            impl.check = "MISMATCH: not compared, Grain's check run raised"
        elif key == "fixed":
            same = ref is not None and np.array_equal(got[:M_GRAIN], ref) and got.dtype == ref.dtype
            impl.check = "ok" if same else "MISMATCH: not Grain's elements in Grain's order"
        elif key == "limit":
            same = outs["fixed"] is not None and np.array_equal(got, outs["fixed"][: len(got)])
            impl.check = "ok" if same else "MISMATCH: not the fixed mix's elements"
        else:
            impl.check = in_order(got, s, workers)
    common.report_check(
        list(impls.values()),
        "grain fixed",
        "chute fixed = Grain's first elements exactly; the loop = chute fixed exactly; every "
        "schedule and PyTorch read each source (each worker's share) once each, in order",
    )
    group = list(impls.values())
    common.time_runs(group, repeats)
    i = impls
    ratios = [
        Ratio(f"S={s} {where}: piecewise / fixed", i["piecewise"], i["fixed"], TARGET),
        Ratio(f"S={s} {where}: fn every=100 / fixed", i["fn every=100"], i["fixed"], TARGET),
        Ratio(f"S={s} {where}: fn every=1 / fixed", i["fn every=1"], i["fixed"], None),
        Ratio(f"S={s} {where}: chute fixed / grain fixed", i["fixed"], i["grain"], None),
        Ratio(f"S={s} {where}: piecewise / grain fixed", i["piecewise"], i["grain"], None),
        Ratio(f"S={s} {where}: chute fixed / torch", i["fixed"], i["torch"], None),
        Ratio(f"S={s} {where}: chute fixed / {i['limit'].name}", i["fixed"], i["limit"], None),
    ]
    common.mark_invalid(ratios)
    dev = {}
    if not workers:
        for key in ("fixed", "piecewise", "fn every=1", "fn every=100"):
            got = outs.get(key)
            if got is not None:
                dev[key] = deviation(source_of(got[:M]), key, s)
        if ref is not None:
            dev["grain fixed"] = deviation(source_of(ref), "fixed", s)
    return {
        "name": f"S={s} {where}",
        "description": f"mix of {s} sources of ints, weights {WEIGHTS[s]}, batch({BATCH}), {where}",
        "unit": "elements/s",
        "impls": group,
        "ratios": ratios,
        "deviation_pp": dev,
    }


def print_results(results: list[dict[str, Any]]) -> None:
    rows = []
    for res in results:
        for impl in res["impls"]:
            rows.append(
                [
                    res["name"],
                    impl.name,
                    impl.note,
                    "ERROR" if impl.error else common.fmt_num(impl.rate()),
                    common.fmt_num(impl.median, 3),
                    f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
                    impl.check.split(":")[0],
                ]
            )
    common.print_table(
        ["group", "implementation", "note", "elements/s", "run s", "spread", "output"],
        rows,
        right={3, 4, 5},
    )
    print()
    rows = []
    for res in results:
        for key, d in res["deviation_pp"].items():
            if not d:
                continue
            rows.append(
                [
                    res["name"],
                    key,
                    f"{d['sliding_vs_mean_pp']:.2f}",
                    f"{d['within_stretches_pp']:.2f}" if "within_stretches_pp" in d else "",
                    f"{d['min_weight_pct']:.1f}",
                ]
            )
    if rows:
        common.print_table(
            [
                f"share deviation ({WINDOW:,}-element windows)",
                "weights",
                "worst pp vs window's mean weight",
                "worst pp within constant stretches",
                "least weight %",
            ],
            rows,
            right={2, 3, 4},
        )


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0], repeats=5)
    try:
        import grain
        import torch
        import torch.utils.data

        import chute
    except ImportError as exc:
        sys.exit(f"bench_mix_schedule: {exc}; use bash benchmarks/run mix_schedule")
    env = common.environment()
    env["torch"] = common.version_of("torch")
    print(
        f"mix schedule: chute {env['chute']}, grain {env['grain']}, torch {env['torch']} | "
        f"{env['python']}, {env['cpus']} cpus, numpy {env['numpy']}"
    )
    print(
        f"timing: 1 warm-up run per implementation (the output check), then the median of "
        f"{args.repeats} timed runs; implementations alternate within each group; a run reads "
        f"{M:,} elements ({M_GRAIN:,} for Grain) in batches of {BATCH}"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    results = []
    for workers in MODES:
        for s in WEIGHTS:
            print(f"\n[S={s}, {workers} workers]")
            t0 = time.perf_counter()
            res = bench_group(chute, grain, torch, s, workers, args.repeats)
            res["seconds"] = time.perf_counter() - t0
            results.append(res)
    print()
    print_results(results)
    return common.finish("mix_schedule", args, env, started, results)


if __name__ == "__main__":
    sys.exit(main())
