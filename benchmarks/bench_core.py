"""Core-engine benchmarks: chute against Grain (and a hand-written loop).

Both libraries run the very same pipeline code (a function that takes the
module, ``chute`` or ``grain``) in one process, alternating, on the same data.

1. ``mnist``: an MNIST-shaped in-memory source (60,000 dicts with a random
   uint8 28x28x1 image and an int label) through
   ``source().seed(42).shuffle().map(normalise).batch(128, drop_remainder=True)
   .to_iter_dataset()`` with default options; one run is one epoch (468
   batches).  Also against a plain Python loop doing the same work: a numpy
   permutation, per-element normalise, ``np.stack`` per batch.
2. ``cheap``: ``range(N).seed(0).shuffle().map(x * 2).filter(x % 3)
   .to_iter_dataset().batch(256)``; Grain is slow here, so it runs a smaller N
   and the rates (input elements per second) are compared.

Run through ``bash benchmarks/run core``; see README.md.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio

try:
    import grain
except ImportError:
    sys.exit("bench_core: the peer library 'grain' is not installed; use bash benchmarks/run")
try:
    import chute
except ImportError:
    sys.exit("bench_core: chute is not installed; use bash benchmarks/run")

TARGETS = {
    "mnist chute/grain": 4.0,
    "mnist chute/hand loop": 0.9,
    "cheap chute/grain": 10.0,
}

# -- 1. MNIST-shaped pipeline -------------------------------------------------------------

MNIST_N = 60_000
MNIST_BATCH = 128
MNIST_BATCHES = MNIST_N // MNIST_BATCH  # 468, the remainder is dropped
CHECK_FULL_BATCHES = 3  # compared value by value; every other batch by digest


def mnist_source() -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(MNIST_N, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, size=MNIST_N)
    return [{"image": images[i].copy(), "label": int(labels[i])} for i in range(MNIST_N)]


def normalise(r: dict[str, Any]) -> dict[str, Any]:
    return {"image": r["image"].astype(np.float32) / 255.0, "label": r["label"]}


def mnist_pipeline(lib: Any, source: list[dict[str, Any]]) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    return (
        lib.MapDataset.source(source)
        .seed(42)
        .shuffle()
        .map(normalise)
        .batch(MNIST_BATCH, drop_remainder=True)
        .to_iter_dataset()
    )


def hand_loop(source: list[dict[str, Any]], permutation: Any) -> Any:
    """What a user would write by hand: the same work as the pipeline, in one generator."""
    return runners.hand_loop(source, permutation, normalise, MNIST_BATCH, drop_remainder=True)


def mnist_digest() -> Any:
    """Keeps the first batches whole and, for the rest, shape, dtype, per-image sums, labels."""
    seen = [0]

    def digest(batch: Any) -> Any:
        seen[0] += 1
        if seen[0] <= CHECK_FULL_BATCHES or not isinstance(batch, dict):
            return batch
        out = dict(batch)
        image = batch.get("image")
        if isinstance(image, np.ndarray) and image.ndim >= 1:
            out["image"] = {
                "shape": list(image.shape),
                "dtype": image.dtype.str,
                "sums": image.reshape(len(image), -1).sum(axis=1, dtype=np.float64),
            }
        return out

    return digest


MNIST_DESCRIPTION = (
    f"{MNIST_N:,} dicts (uint8 28x28x1 image, int label); source().seed(42).shuffle()"
    f".map(normalise).batch({MNIST_BATCH}, drop_remainder=True).to_iter_dataset(); "
    f"one run = one epoch = {MNIST_BATCHES} batches"
)


def bench_mnist(repeats: int) -> dict[str, Any]:
    print(f"  {MNIST_DESCRIPTION}")
    source = mnist_source()
    impls = [
        Impl("chute", lambda: iter(mnist_pipeline(chute, source)), MNIST_BATCHES * MNIST_BATCH),
        Impl("grain", lambda: iter(mnist_pipeline(grain, source)), MNIST_BATCHES * MNIST_BATCH),
        Impl(
            "hand loop",
            lambda: hand_loop(source, np.random.default_rng(42).permutation(MNIST_N)),
            MNIST_BATCHES * MNIST_BATCH,
        ),
    ]
    chute_impl, grain_impl, hand_impl = impls

    # Output check, which is also every implementation's warm-up run.  The
    # hand loop is checked with Grain's permutation in place of its own, so
    # that its elements and order must match exactly; its timed runs draw a
    # numpy permutation (a different order, the same work).
    grain_out = common.collect(grain_impl, mnist_digest())
    chute_out = common.collect(chute_impl, mnist_digest())
    grain_order = grain.MapDataset.range(MNIST_N).seed(42).shuffle()
    perm = np.array([grain_order[i] for i in range(MNIST_N)])
    hand_check = Impl("hand loop", lambda: hand_loop(source, perm), 0)
    hand_out = common.collect(hand_check, mnist_digest())
    hand_impl.error = hand_check.error
    common.mark_reference(grain_impl, grain_out)
    for impl, out in ((chute_impl, chute_out), (hand_impl, hand_out)):
        common.check_against(impl, out, "grain", grain_out)
    del grain_out, chute_out, hand_out
    common.report_check(
        impls,
        "grain",
        f"all {MNIST_BATCHES} batches (first {CHECK_FULL_BATCHES} value by value, "
        "the rest by shape, dtype, per-image sums and labels); "
        "hand loop checked with Grain's permutation",
    )

    common.time_runs(impls, repeats)
    common.time_first_batch(impls)
    ratios = [
        Ratio("mnist chute/grain", chute_impl, grain_impl, TARGETS["mnist chute/grain"]),
        Ratio("mnist chute/hand loop", chute_impl, hand_impl, TARGETS["mnist chute/hand loop"]),
    ]
    common.mark_invalid(ratios)
    return {
        "name": "mnist",
        "description": MNIST_DESCRIPTION,
        "unit": "elements/s",
        "impls": impls,
        "ratios": ratios,
        "batch_size": MNIST_BATCH,
    }


# -- 2. Cheap elements ------------------------------------------------------------------------

CHEAP_BATCH = 256
CHEAP_N_GRAIN = 10_000
CHEAP_N_PROBE = 100_000
CHEAP_TARGET_RUN_S = 1.5
CHEAP_MIN_PROBE_S = 0.4
CHEAP_N_MIN, CHEAP_N_MAX = 100_000, 5_000_000


def cheap_pipeline(lib: Any, n: int) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    return (
        lib.MapDataset.range(n)
        .seed(0)
        .shuffle()
        .map(lambda x: x * 2)
        .filter(lambda x: x % 3)
        .to_iter_dataset()
        .batch(CHEAP_BATCH)
    )


def cheap_expected_sorted(n: int) -> np.ndarray:
    doubled = np.arange(n, dtype=np.int64) * 2
    return doubled[doubled % 3 != 0]


def check_cheap_contents(out: list[Any], n: int) -> str:
    """Checks that ``out`` holds each expected element once, in batches of 256."""
    try:
        sizes = [len(b) for b in out]
        if any(s != CHEAP_BATCH for s in sizes[:-1]) or (sizes and not 0 < sizes[-1] <= 256):
            return f"MISMATCH: batch sizes {sorted(set(sizes))} at N={n:,}"
        got = np.sort(np.concatenate([np.asarray(b) for b in out]))
    except Exception as e:
        return f"MISMATCH: batches at N={n:,} are not 1-d arrays ({type(e).__name__}: {e})"
    want = cheap_expected_sorted(n)
    if got.shape != want.shape or not np.array_equal(got, want):
        return (
            f"MISMATCH: at N={n:,} the batches do not hold each of the {len(want):,} elements once"
        )
    return "ok"


def bench_cheap(repeats: int) -> dict[str, Any]:
    print(
        f"  range(N).seed(0).shuffle().map(x*2).filter(x%3).to_iter_dataset().batch({CHEAP_BATCH})"
    )
    n_grain = CHEAP_N_GRAIN
    chute_check = Impl("chute", lambda: iter(cheap_pipeline(chute, n_grain)), n_grain)
    grain_impl = Impl("grain", lambda: iter(cheap_pipeline(grain, n_grain)), n_grain)

    # Output check on the same N (whole output, in order), also the warm-up.
    grain_out = common.collect(grain_impl)
    chute_out = common.collect(chute_check)
    common.mark_reference(grain_impl, grain_out)
    if grain_out is None or chute_out is None:
        check = common.CHECK_RAISED
    else:
        check = common.compare_outputs("chute", chute_out, "grain", grain_out)
        if check == "ok":
            check = check_cheap_contents(grain_out, n_grain)

    # chute's contents at a larger N, then size its runs to take about
    # CHEAP_TARGET_RUN_S: probe runs at growing N until one lasts long enough
    # to give the rate.
    n_chute = CHEAP_N_MIN
    if chute_check.error is None:
        probe = Impl("chute", lambda: iter(cheap_pipeline(chute, CHEAP_N_PROBE)), CHEAP_N_PROBE)
        probe_out = common.collect(probe)
        if probe_out is not None and check == "ok":
            check = check_cheap_contents(probe_out, CHEAP_N_PROBE)
        del probe_out
        n_probe = CHEAP_N_PROBE
        while probe.error is None:
            probe = Impl("chute", lambda n=n_probe: iter(cheap_pipeline(chute, n)), n_probe)
            try:
                elapsed = common.one_run(probe)
            except Exception:
                common.fail(probe, "probe run")
                break
            if elapsed >= CHEAP_MIN_PROBE_S or n_probe >= CHEAP_N_MAX:
                wanted = n_probe / elapsed * CHEAP_TARGET_RUN_S
                n_chute = int(min(max(round(wanted, -5), CHEAP_N_MIN), CHEAP_N_MAX))
                break
            n_probe = min(4 * n_probe, CHEAP_N_MAX)
        chute_check.error = probe.error
    chute_impl = Impl("chute", lambda: iter(cheap_pipeline(chute, n_chute)), n_chute)
    chute_impl.error, chute_impl.check = chute_check.error, check
    common.report_check(
        [chute_impl, grain_impl],
        "grain",
        f"whole output at N={n_grain:,}, in order; chute's contents also at N={CHEAP_N_PROBE:,}",
    )
    del grain_out, chute_out

    impls = [chute_impl, grain_impl]
    common.time_runs(impls, repeats)
    # Time to first batch on identical work: both at chute's N.
    first = [
        Impl("chute", lambda: iter(cheap_pipeline(chute, n_chute)), 0, error=chute_impl.error),
        Impl("grain", lambda: iter(cheap_pipeline(grain, n_chute)), 0, error=grain_impl.error),
    ]
    common.time_first_batch(first)
    for impl, f in zip(impls, first):
        impl.first_batch = f.first_batch
        impl.error = impl.error or f.error
    chute_impl.note = f"N={n_chute:,}"
    grain_impl.note = f"N={n_grain:,}"
    description = (
        f"range(N).seed(0).shuffle().map(x*2).filter(x%3).to_iter_dataset().batch({CHEAP_BATCH}); "
        f"rates in input elements/s; chute N={n_chute:,} (sized from probe runs to take "
        f"~{CHEAP_TARGET_RUN_S} s), grain N={n_grain:,}; "
        f"first batch timed at N={n_chute:,} for both"
    )
    print(
        f"  chute N={n_chute:,}, grain N={n_grain:,}; first batch timed at N={n_chute:,} for both"
    )
    ratios = [Ratio("cheap chute/grain", chute_impl, grain_impl, TARGETS["cheap chute/grain"])]
    common.mark_invalid(ratios)
    return {
        "name": "cheap",
        "description": description,
        "unit": "input elements/s",
        "impls": impls,
        "ratios": ratios,
        "batch_size": CHEAP_BATCH,
    }


# -- reporting ----------------------------------------------------------------------------------


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    env = common.environment()
    print(
        f"core benchmarks: chute {env['chute']} vs grain {env['grain']} | {env['python']}, "
        f"{env['cpus']} cpus, numpy {env['numpy']}"
    )
    print(
        f"timing: 1 warm-up run per implementation (the output check), then the median of "
        f"{args.repeats} timed runs; implementations alternate in one process; "
        "first batch = median of 3 builds of a fresh pipeline to its first batch"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    results = []
    for bench in (bench_mnist, bench_cheap):
        name = bench.__name__.removeprefix("bench_")
        print(f"\n[{name}]")
        t0 = time.perf_counter()
        res = bench(args.repeats)
        res["seconds"] = time.perf_counter() - t0
        results.append(res)

    print()
    rows = []
    for res in results:
        batch = res["batch_size"]
        for impl in res["impls"]:
            rate = impl.rate()
            fb = impl.first_batch
            rows.append(
                [
                    res["name"],
                    impl.name,
                    impl.note,
                    "ERROR" if impl.error else common.fmt_num(rate),
                    common.fmt_num(rate / batch if rate and res["name"] == "mnist" else None, 1),
                    common.fmt_num(impl.median, 3),
                    f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
                    common.fmt_num(statistics.median(fb) * 1e3 if fb else None, 1),
                    impl.check.split(":")[0],
                ]
            )
    common.print_table(
        [
            "bench",
            "impl",
            "size",
            "elements/s",
            "batches/s",
            "run s",
            "spread",
            "1st batch ms",
            "output",
        ],
        rows,
        right={3, 4, 5, 6, 7},
    )
    return common.finish("core", args, env, started, results)


if __name__ == "__main__":
    sys.exit(main())
