"""ArrayRecord benchmark: a global shuffle over an ArrayRecord file, chute against Grain.

One file of 200,000 records of 1 KiB (128 random float64 each, written with
``group_size:1``) in a temporary directory.  Two pipelines, the same code for
both libraries, each library reading through its own ``ArrayRecordDataSource``:

1. ``dataset``: ``MapDataset.source(src).seed(1).shuffle().map(np.frombuffer)
   .batch(256).to_iter_dataset()``;
2. ``loader``: ``DataLoader(data_source=src, sampler=IndexSampler(num_records=N,
   shuffle=True, seed=1, num_epochs=1), operations=[FromBuffer(), Batch(256)],
   worker_count=0)``, where ``FromBuffer`` is a ``transforms.Map`` subclass
   whose ``map`` is ``np.frombuffer``.

Each is also measured against loops with no loader, given the same shuffled
order: ``raw batched``, the ceiling the targets name, reads 256 indices per
call of array_record's reader (``reader.read(indices)``), ``np.frombuffer``
each record and ``np.stack`` the batch; ``raw ranged`` does the same with one
``reader.read(i, i + 1)`` per record, as chute's source does.  Grain reads
one record at a time, so it reads only the first ``GRAIN_BATCHES`` batches
of each epoch and rates are compared.

A third part measures what checking every chunk's data hash costs chute's own
reader (``verify``): sets of 4 shards (1 KiB and 64 KiB records, uncompressed
and chute's default zstd:3), opened from their ``.chute-index``, read in one
shuffled order by batches of 256 straight from the source
(``src.__getitems__(batch)``), with the checks on (the default: the compiled
hash where built), off, and on with the NumPy fallback; it prints the on/off
ratios (target >= 0.9 for the default).

Run through ``bash benchmarks/run arrayrecord``; see README.md.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio

try:
    import grain
    from array_record.python.array_record_module import ArrayRecordReader
except ImportError:
    sys.exit("bench_arrayrecord: the peers grain and array_record are not installed; use run")
try:
    import chute
except ImportError:
    sys.exit("bench_arrayrecord: chute is not installed; use bash benchmarks/run")
from chute._sources import checksums
from chute._sources.array_record import indexed as indexed_array_record
from chute._sources.array_record.index import write_index
from chute.experimental import write_array_record
from chute.sources import ArrayRecordDataSource

N = 200_000
RECORD_FLOATS = 128  # 1 KiB records
BATCH = 256
BATCHES = -(-N // BATCH)  # 782, the last one of 64
GRAIN_BATCHES = 32  # Grain's runs stop after these; rates are compared
SEED = 1
CHECK_FULL_BATCHES = 3
RAW_OPTIONS = "readahead_buffer_size:0"  # what Grain and array_record use for random access

TARGETS = {"chute/grain": 20.0, "chute/raw batched": 0.8, "verify on/off": 0.9}
# (record bytes, records) of each verify set: about 100 and 390 MB
VERIFY_SETS = [(1024, 100_000), (64 << 10, 6_000)]
VERIFY_OPTIONS = ["group_size:1,uncompressed", "group_size:1"]  # the second: zstd:3, the default
VERIFY_SHARDS = 4


def write_file(directory: str) -> str:
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal(RECORD_FLOATS).tobytes() for _ in range(N))
    return write_array_record(rows, f"{directory}/records")[0]


# -- the pipelines --------------------------------------------------------------------------


def dataset_pipeline(lib: Any, source: Any) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    return (
        lib.MapDataset.source(source)
        .seed(SEED)
        .shuffle()
        .map(np.frombuffer)
        .batch(BATCH)
        .to_iter_dataset()
    )


# ``np.frombuffer`` as a ``lib.transforms.Map`` subclass (Grain's Map takes no callable).
FROM_BUFFER = {
    lib: runners.map_transform(lib, np.frombuffer, "FromBuffer") for lib in (chute, grain)
}


def loader_pipeline(lib: Any, source: Any) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    return runners.data_loader(lib, source, FROM_BUFFER[lib], N, BATCH, SEED)


def grain_dataset_order() -> np.ndarray:
    """The record order of Grain's ``MapDataset.range(N).seed(SEED).shuffle()``."""
    shuffled = grain.MapDataset.range(N).seed(SEED).shuffle()
    return np.array([shuffled[i] for i in range(N)])


def grain_loader_order() -> np.ndarray:
    """The record order of Grain's ``IndexSampler(N, shuffle=True, seed=SEED)``."""
    sampler = grain.samplers.IndexSampler(num_records=N, shuffle=True, seed=SEED, num_epochs=1)
    return np.array([sampler[i].record_key for i in range(N)])


def raw_batched(path: str, order: np.ndarray) -> Iterator[np.ndarray]:
    """The ceiling: array_record's reader, 256 indices a call, no loader."""
    reader = ArrayRecordReader(path, RAW_OPTIONS)
    try:
        for start in range(0, N, BATCH):
            records = reader.read(order[start : start + BATCH].tolist())
            yield np.stack([np.frombuffer(r) for r in records])
    finally:
        reader.close()


def raw_ranged(path: str, order: np.ndarray) -> Iterator[np.ndarray]:
    """The same loop reading one record per call, ``reader.read(i, i + 1)``, as chute does."""
    reader = ArrayRecordReader(path, RAW_OPTIONS)
    try:
        read = reader.read
        for start in range(0, N, BATCH):
            indices = order[start : start + BATCH].tolist()
            yield np.stack([np.frombuffer(read(i, i + 1)[0]) for i in indices])
    finally:
        reader.close()


def first_batches(iterator: Iterator[Any], count: int) -> Iterator[Any]:
    """The first ``count`` batches of ``iterator``, which is closed after them."""
    try:
        for _ in range(count):
            yield next(iterator)
    finally:
        common.close(iterator)


def digest() -> Any:
    """Keeps the first batches whole and, for the rest, shape, dtype and per-row sums."""
    seen = [0]

    def keep(batch: Any) -> Any:
        seen[0] += 1
        if seen[0] <= CHECK_FULL_BATCHES or not isinstance(batch, np.ndarray):
            return batch
        sums = batch.reshape(len(batch), -1).sum(axis=1) if batch.ndim else batch
        return {"shape": list(batch.shape), "dtype": batch.dtype.str, "sums": sums}

    return keep


# -- one benchmark: a pipeline against Grain and the raw reader -----------------------------


def bench(name: str, build: Any, path: str, order: np.ndarray, repeats: int) -> dict[str, Any]:
    description = (
        f"{name}: {N:,} records of 1 KiB in one ArrayRecord file (group_size:1), shuffled "
        f"(seed {SEED}), np.frombuffer, batches of {BATCH}; Grain reads the first "
        f"{GRAIN_BATCHES} batches of each run, the others the whole epoch ({BATCHES} batches)"
    )
    print(f"  {description}")
    chute_src, grain_src = ArrayRecordDataSource(path), grain.sources.ArrayRecordDataSource(path)
    grain_units = GRAIN_BATCHES * BATCH
    impls = [
        Impl("chute", lambda: iter(build(chute, chute_src)), N),
        Impl(
            "grain",
            lambda: first_batches(iter(build(grain, grain_src)), GRAIN_BATCHES),
            grain_units,
            note=f"first {grain_units:,}",
        ),
        Impl("raw batched", lambda: raw_batched(path, order), N),
        Impl("raw ranged", lambda: raw_ranged(path, order), N),
    ]
    chute_impl, grain_impl, raw_impl, ranged_impl = impls
    # Output check, also each implementation's warm-up: Grain's batches are the
    # reference for chute's first ones; the raw loops, given Grain's order,
    # must then give chute's whole epoch.
    grain_out = common.collect(grain_impl, digest())
    chute_out = common.collect(chute_impl, digest())
    raw_out = common.collect(raw_impl, digest())
    ranged_out = common.collect(ranged_impl, digest())
    common.mark_reference(grain_impl, grain_out)
    common.check_against(chute_impl, chute_out and chute_out[:GRAIN_BATCHES], "grain", grain_out)
    if chute_impl.check == "ok" and chute_out is not None and len(chute_out) != BATCHES:
        chute_impl.check = f"MISMATCH: chute gave {len(chute_out)} batches, not {BATCHES}"
    common.check_against(raw_impl, raw_out, "chute", chute_out)
    common.check_against(ranged_impl, ranged_out, "chute", chute_out)
    del grain_out, chute_out, raw_out, ranged_out
    common.report_check(
        impls,
        "grain",
        f"Grain's first {GRAIN_BATCHES} batches equal chute's ({CHECK_FULL_BATCHES} value by "
        "value, the rest by shape, dtype and row sums); both raw loops, in Grain's order, "
        f"give chute's whole epoch ({BATCHES} batches)",
    )
    common.time_runs(impls, repeats)
    common.time_first_batch(impls)
    ratios = [
        Ratio(f"{name} chute/grain", chute_impl, grain_impl, TARGETS["chute/grain"]),
        Ratio(f"{name} chute/raw batched", chute_impl, raw_impl, TARGETS["chute/raw batched"]),
        Ratio(f"{name} chute/raw ranged", chute_impl, ranged_impl, None),
    ]
    common.mark_invalid(ratios)
    return {
        "name": name,
        "description": description,
        "unit": "records/s",
        "impls": impls,
        "ratios": ratios,
        "record_bytes": RECORD_FLOATS * 8,
    }


# -- the cost of checking chunk data hashes: chute's indexed reads, verify on and off -------


@contextlib.contextmanager
def verify_mode(mode: str) -> Iterator[None]:
    """``on`` (the default), ``off`` (readers opened with ``verify_data=False``), or
    ``numpy`` (on, with the NumPy fallback hash)."""
    reader_class = indexed_array_record.RangedArrayRecordReader
    previous = checksums.use_compiled(mode != "numpy" and checksums._COMPILED is not None)
    if mode == "off":
        indexed_array_record.RangedArrayRecordReader = functools.partial(
            reader_class, verify_data=False
        )
    try:
        yield
    finally:
        indexed_array_record.RangedArrayRecordReader = reader_class
        checksums.use_compiled(previous)


def indexed_reads(index: str, order: np.ndarray, mode: str) -> Iterator[list[bytes]]:
    """One epoch of shuffled batches read from a fresh source (no chunk cached yet)."""
    source = ArrayRecordDataSource(index)
    try:
        with verify_mode(mode):
            for start in range(0, len(order), BATCH):
                yield source.__getitems__(order[start : start + BATCH])
    finally:
        source.close()


def bench_verify(directory: str, size: int, count: int, options: str, repeats: int) -> Any:
    kind = "uncompressed" if "uncompressed" in options else "zstd:3"
    name = f"verify {size >> 10} KiB {kind}"
    description = (
        f"{name}: {count:,} random records of {size:,} bytes in {VERIFY_SHARDS} shards "
        f"({options}), opened from their index, read in a shuffled order by batches of "
        f"{BATCH} (src.__getitems__); chunk data hashes checked ({checksums.implementation()}), "
        "not checked, and checked with the NumPy fallback"
    )
    print(f"\n[{name}]\n  {description}")
    rng = np.random.default_rng(0)
    prefix = f"{directory}/verify-{size}-{kind.replace(':', '')}"
    files = write_array_record((rng.bytes(size) for _ in range(count)), prefix,
                               num_shards=VERIFY_SHARDS, options=options)  # fmt: skip
    index = write_index(files, f"{prefix}.chute-index")
    order = np.random.default_rng(SEED).permutation(count)
    impls = [
        Impl(f"verify {mode}", functools.partial(indexed_reads, index, order, mode), count)
        for mode in ("on", "off", "numpy")
    ]
    outs = [common.collect(impl, lambda b: zlib.crc32(b"".join(b))) for impl in impls]
    common.mark_reference(impls[1], outs[1])
    for impl, out in ((impls[0], outs[0]), (impls[2], outs[2])):
        common.check_against(impl, out, "verify off", outs[1])
    common.report_check(impls, "verify off", "every batch's records equal (CRC-32)")
    common.time_runs(impls, repeats)
    ratios = [
        Ratio(f"{name} on/off", impls[0], impls[1], TARGETS["verify on/off"]),
        Ratio(f"{name} NumPy on/off", impls[2], impls[1], None),
    ]
    common.mark_invalid(ratios)
    return {"name": name, "description": description, "unit": "records/s", "impls": impls,
            "ratios": ratios, "record_bytes": size}  # fmt: skip


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    env = common.environment()
    env["array_record"] = common.version_of("array_record")
    env["checksums"] = checksums.implementation()
    print(
        f"arrayrecord benchmarks: chute {env['chute']} vs grain {env['grain']} "
        f"(array_record {env['array_record']}; checksums {env['checksums']}) | "
        f"{env['python']}, {env['cpus']} cpus"
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
    with tempfile.TemporaryDirectory(prefix="chute-bench-arrayrecord-") as directory:
        t0 = time.perf_counter()
        path = write_file(directory)
        print(f"wrote {N:,} records in {time.perf_counter() - t0:.1f} s")
        for name, build, order in (
            ("dataset", dataset_pipeline, grain_dataset_order),
            ("loader", loader_pipeline, grain_loader_order),
        ):
            print(f"\n[{name}]")
            t0 = time.perf_counter()
            res = bench(name, build, path, order(), args.repeats)
            res["seconds"] = time.perf_counter() - t0
            results.append(res)
        for size, count in VERIFY_SETS:
            for options in VERIFY_OPTIONS:
                t0 = time.perf_counter()
                res = bench_verify(directory, size, count, options, args.repeats)
                res["seconds"] = time.perf_counter() - t0
                results.append(res)
    print_rates(results)
    return common.finish("arrayrecord", args, env, started, results)


def print_rates(results: list[dict[str, Any]]) -> None:
    print()
    rows = []
    for res in results:
        for impl in res["impls"]:
            rate, fb = impl.rate(), impl.first_batch
            rows.append(
                [
                    res["name"],
                    impl.name,
                    f"{impl.units:,}",
                    "ERROR" if impl.error else common.fmt_num(rate),
                    common.fmt_num(rate * res["record_bytes"] / 1e6 if rate else None, 1),
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
            "records",
            "records/s",
            "MB/s",
            "run s",
            "spread",
            "1st batch ms",
            "output",
        ],
        rows,
        right={2, 3, 4, 5, 6, 7},
    )


if __name__ == "__main__":
    sys.exit(main())
