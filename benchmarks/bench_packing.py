"""Sequence-packing benchmark: chute against Grain, first fit and best fit.

The source is 200,000 token sequences ``{"inputs": int32 array}`` whose
lengths are a fixed-seed lognormal (median about 150) clipped to 1..2048.
Both libraries run the very same code:

    lib.experimental.<First|Best>FitPackIterDataset(
        lib.MapDataset.source(src).to_iter_dataset(INLINE),
        length_struct={"inputs": 2048}, num_packing_bins=64, seed=0)

with ``INLINE = ReadOptions(num_threads=0, prefetch_buffer_size=0)`` for both,
so the rates measure the packing stage, not Grain's thread-pool prefetch
(which is slower still).  Grain runs on the first ``GRAIN_N`` sequences (all
200,000 by default; lower it for a quicker run) and the rates (input sequences
per second) are compared.

The output check compares chute's whole output with Grain's on those first
``GRAIN_N`` sequences: every packed bin, in order, keys, dtypes and values
(by a hash of the bytes).  It also reports the padding fraction, the share of
output tokens that are padding, for both; its target is chute's <= Grain's.

Run through ``bash benchmarks/run packing``; see README.md.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import time
from typing import Any

import numpy as np

import common
from common import Impl, Ratio

try:
    import grain
except ImportError:
    sys.exit("bench_packing: the peer library 'grain' is not installed; use bash benchmarks/run")
try:
    import chute
except ImportError:
    sys.exit("bench_packing: chute is not installed; use bash benchmarks/run")

N = 200_000
GRAIN_N = 200_000  # every sequence: Grain packs ~25k sequences/s here, ~8 s a run
LENGTH = 2048
BINS = 64
TARGET = 2.0
KINDS = {"first fit": "FirstFitPackIterDataset", "best fit": "BestFitPackIterDataset"}


def source() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    lengths = np.clip(np.round(rng.lognormal(5.0, 1.0, N)), 1, LENGTH).astype(np.int64)
    tokens = rng.integers(1, 32_000, int(lengths.sum()), dtype=np.int32)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return [{"inputs": tokens[a:b]} for a, b in itertools.pairwise(bounds)]


def pipeline(lib: Any, kind: str, src: list[dict[str, np.ndarray]]) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    inline = lib.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    packer = getattr(lib.experimental, KINDS[kind])
    return packer(
        lib.MapDataset.source(src).to_iter_dataset(inline),
        length_struct={"inputs": LENGTH},
        num_packing_bins=BINS,
        seed=0,
    )


def digest(x: dict[str, np.ndarray]) -> tuple[Any, ...]:
    """Keys, dtypes, shapes and a hash of every array of one packed bin.

    Sorted by key: Grain's key order depends on whether JAX is installed (its
    tree utilities then sort dict keys), and dicts compare equal either way.
    """
    return tuple(
        (k, str(v.dtype), v.shape, hashlib.blake2b(v.tobytes(), digest_size=16).hexdigest())
        for k, v in sorted(x.items())
    )


def padding(outputs: list[dict[str, np.ndarray]]) -> float:
    used = sum(int(np.count_nonzero(x["inputs_segment_ids"])) for x in outputs)
    return 1.0 - used / (len(outputs) * LENGTH) if outputs else 0.0


def check(kind: str, head: list[Any], chute_impl: Impl, grain_impl: Impl) -> dict[str, Any]:
    """The check runs (also the warm-up): the whole output on the first GRAIN_N sequences."""
    chute_head = Impl("chute", lambda: iter(pipeline(chute, kind, head)), GRAIN_N)
    grain_out = common.collect(grain_impl)
    chute_out = common.collect(chute_head)
    common.mark_reference(grain_impl, grain_out)
    pads: dict[str, Any] = {"grain": None, "chute": None, "chute_full": None}
    chute_impl.check = common.CHECK_RAISED
    if grain_out is not None and chute_out is not None:
        pads["grain"], pads["chute"] = padding(grain_out), padding(chute_out)
        chute_impl.check = common.compare_outputs(
            "chute", [digest(x) for x in chute_out], "grain", [digest(x) for x in grain_out]
        )
    chute_impl.error = chute_head.error
    del grain_out, chute_out
    common.report_check(
        [chute_impl, grain_impl], "grain", f"every packed bin of the first {GRAIN_N:,} sequences"
    )
    full = common.collect(chute_impl) if chute_impl.error is None else None
    if full is not None:
        pads["chute_full"] = padding(full)
    return pads


def bench_kind(kind: str, src: list[Any], repeats: int) -> dict[str, Any]:
    head = src[:GRAIN_N]
    chute_impl = Impl("chute", lambda: iter(pipeline(chute, kind, src)), N, f"N={N:,}")
    grain_impl = Impl("grain", lambda: iter(pipeline(grain, kind, head)), GRAIN_N, f"N={GRAIN_N:,}")
    pads = check(kind, head, chute_impl, grain_impl)
    impls = [chute_impl, grain_impl]
    common.time_runs(impls, repeats)
    common.time_first_batch(impls)
    ratio = Ratio(f"{kind} chute/grain", chute_impl, grain_impl, TARGET)
    common.mark_invalid([ratio])
    return {
        "name": kind,
        "description": (
            f"{KINDS[kind]}(source(src).to_iter_dataset(inline), length_struct="
            f"{{'inputs': {LENGTH}}}, num_packing_bins={BINS}, seed=0); chute N={N:,}, "
            f"grain N={GRAIN_N:,} (the first sequences); rates in input sequences/s"
        ),
        "unit": "input sequences/s",
        "impls": impls,
        "ratios": [ratio],
        "padding": pads,
    }


def padding_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for res in results:
        p = res["padding"]
        ok = p["chute"] is not None and p["grain"] is not None and p["chute"] <= p["grain"]
        res["padding"]["result"] = "PASS" if ok else "SHORT"
        rows.append(
            [
                res["name"],
                f"{p['chute'] * 100:.3f}%" if p["chute"] is not None else "-",
                f"{p['grain'] * 100:.3f}%" if p["grain"] is not None else "-",
                f"{p['chute_full'] * 100:.3f}%" if p["chute_full"] is not None else "-",
                "chute <= grain",
                res["padding"]["result"],
            ]
        )
    return rows


def print_results(results: list[dict[str, Any]]) -> None:
    print()
    rows = []
    for res in results:
        for impl in res["impls"]:
            first = np.median(impl.first_batch) * 1e3 if impl.first_batch else None
            rows.append(
                [
                    res["name"],
                    impl.name,
                    impl.note,
                    "ERROR" if impl.error else common.fmt_num(impl.rate()),
                    common.fmt_num(impl.median, 3),
                    f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
                    common.fmt_num(first, 1),
                    impl.check.split(":")[0],
                ]
            )
    common.print_table(
        ["bench", "impl", "size", "sequences/s", "run s", "spread", "1st bin ms", "output"],
        rows,
        right={3, 4, 5, 6},
    )
    print()
    sizes = [f"chute ({GRAIN_N:,})", f"grain ({GRAIN_N:,})", f"chute ({N:,})"]
    common.print_table(
        ["padding fraction", *sizes, "target", "result"],
        padding_rows(results),
        right={1, 2, 3},
    )


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    env = common.environment()
    print(
        f"packing benchmarks: chute {env['chute']} vs grain {env['grain']} | {env['python']}, "
        f"{env['cpus']} cpus, numpy {env['numpy']}"
    )
    print(
        f"timing: 1 warm-up run per implementation (the output check), then the median of "
        f"{args.repeats} timed runs; implementations alternate in one process"
    )
    print(
        f"Grain runs on the first {GRAIN_N:,} of the {N:,} sequences (it is slow); rates are "
        "per input sequence; both read their source inline (num_threads=0)"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    src = source()
    lengths = np.array([len(x["inputs"]) for x in src])
    print(
        f"source: {N:,} sequences, lengths 1..{lengths.max()} (mean {lengths.mean():.0f}, "
        f"median {np.median(lengths):.0f}); bins of {LENGTH}, num_packing_bins={BINS}"
    )
    results = []
    for kind in KINDS:
        print(f"\n[{kind}]")
        t0 = time.perf_counter()
        res = bench_kind(kind, src, args.repeats)
        res["seconds"] = time.perf_counter() - t0
        results.append(res)

    print_results(results)
    return common.finish("packing", args, env, started, results)


if __name__ == "__main__":
    sys.exit(main())
