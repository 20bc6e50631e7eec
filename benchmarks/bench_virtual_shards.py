# bench-requires: torch==2.13.0
"""Virtual shards: what ``chute.experimental.virtual_shards`` costs.

One token pipeline, written once, run with and without ``V = 64`` virtual shards:

    src[shard].shuffle(seed=1).to_iter_dataset().filter(keep)
    -> FirstFitPackIterDataset(length_struct={"inputs": 1024}, num_packing_bins=16, seed=0)
    -> batch(8)

over 60,000 generated int32 token sequences (lognormal lengths, median about 150,
each element a fresh copy, as a decoder makes).  ``keep`` drops the sequences whose
length is a multiple of 8.  Four measurements:

* **throughput**, one alternating group: chute without and with virtual shards, 0 and
  2 workers (``mp_prefetch(MultiprocessingOptions(num_workers=2))``), with the default
  read options and with inline reads (``ReadOptions(num_threads=0,
  prefetch_buffer_size=0)``); PyTorch's ``DataLoader`` over an ``IterableDataset``
  doing the same work (permutation, filter, first-fit packing; 0 and 2 workers,
  ``batch_size=8``); the limits: a hand loop in one thread and two bare forked
  processes running it on half the order each.  Rates are input sequences/s.
* **restore**: a state of ``V = 64`` shards over ``MapDataset.range(10**12)`` mapped
  to tokens, saved at element 10, and the same state with every shard 15,625,000
  batches further on (element 1,000,000,010; see ``far_state``): the time to build the
  iterator, restore it and take the next element, in a fresh process each, and a check
  that this element is the one it should be.
* **memory**: tracemalloc and resident memory after the first element and after the
  first round (V elements: every shard has read), for V in {1, 8, 64, 256}, of a
  pipeline that holds buffers (a window shuffle of 256 and the packing bins in every
  shard), with the default read options and with inline reads, each in a fresh process.
* **state size**: the JSON bytes of ``get_state()`` for V = 1 and V = 64.

Run through ``bash benchmarks/run virtual_shards``; see README.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio

N = 60_000
LENGTH = 1024
BINS = 16
BATCH = 8
V = 64
SEED = 1
PACK_SEED = 0
TARGET = 0.95
RESTORE_TARGET_S = 1.0
FAR_ROUNDS = 15_625_000  # 64 shards x 15,625,000 batches: element 10^9 (+ the 10 saved)
MEMORY_VS = (1, 8, 64, 256)
WINDOW = 256
SOURCES_PER_BATCH = 36  # about: 8 rows of 1024 tokens, 1..500 tokens a sequence, 1/8 dropped
HERE = os.path.dirname(os.path.abspath(__file__))


# -- the data ---------------------------------------------------------------------------------


class Corpus:
    """``N`` token sequences in one flat int32 array; ``corpus[i]`` copies sequence ``i``."""

    def __init__(self, n: int = N) -> None:
        rng = np.random.default_rng(0)
        lengths = np.clip(np.round(rng.lognormal(5.0, 1.0, n)), 1, LENGTH).astype(np.int64)
        self.tokens = rng.integers(1, 32_000, int(lengths.sum()), dtype=np.int32)
        self.bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"inputs": self.tokens[self.bounds[i] : self.bounds[i + 1]].copy()}


def keep(x: dict[str, np.ndarray]) -> bool:
    return len(x["inputs"]) % 8 != 0


def far_tokens(i: int) -> dict[str, np.ndarray]:
    """The restore pipeline's element ``i`` of ``range(10**12)``: 1..500 tokens from ``i``."""
    n = 1 + (i * 2_654_435_761 % 4_294_967_291) % 500
    return {"inputs": ((i * 7 + np.arange(n, dtype=np.int64)) % 32_000 + 1).astype(np.int32)}


# -- chute: the same code with and without virtual shards -----------------------------------------


def token_pipeline(chute: Any, source: Any, window: int | None = None, inline: bool = False) -> Any:
    """shuffle -> filter -> (window shuffle) -> first-fit packing -> batch, over ``source``;
    ``inline``: ``to_iter_dataset`` reads on the calling thread, never ahead on threads."""
    reads = chute.ReadOptions(num_threads=0, prefetch_buffer_size=0) if inline else None
    ds = source.shuffle(seed=SEED).to_iter_dataset(reads).filter(keep)
    if window:
        ds = chute.experimental.WindowShuffleIterDataset(ds, window_size=window, seed=SEED)
    ds = chute.experimental.FirstFitPackIterDataset(
        ds, length_struct={"inputs": LENGTH}, num_packing_bins=BINS, seed=PACK_SEED
    )
    return ds.batch(BATCH)


def plain(chute: Any, src: Any, workers: int, inline: bool = False) -> Any:
    ds = token_pipeline(chute, chute.MapDataset.source(src), inline=inline)
    return runners.with_workers(chute, ds, workers) if workers else ds


def sharded(
    chute: Any,
    src: Any,
    workers: int,
    v: int = V,
    window: int | None = None,
    inline: bool = False,
) -> Any:
    def make_shard(shard: Any) -> Any:
        sliced = chute.MapDataset.source(src)[shard.shard_index :: shard.shard_count]
        return token_pipeline(chute, sliced, window, inline)

    ds = chute.experimental.virtual_shards(make_shard, v)
    return runners.with_workers(chute, ds, workers) if workers else ds


# -- the peers: the same work without chute ----------------------------------------------------


def first_fit(rows: Iterator[np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
    """First-fit packing in rounds, as chute's and Grain's: sequences go into the first of
    ``BINS`` bins with room; when one fits none the round's bins are handed out (shuffled
    with ``default_rng(PACK_SEED + bins handed out before)``) and it opens the next round."""
    room: list[int] = []
    held: list[list[np.ndarray]] = []
    done = 0

    def flush() -> list[dict[str, np.ndarray]]:
        outs = []
        for seqs in held:
            inputs = np.zeros(LENGTH, np.int32)
            ids = np.zeros(LENGTH, np.int32)
            pos = np.zeros(LENGTH, np.int32)
            at = 0
            for s, seq in enumerate(seqs):
                n = len(seq)
                inputs[at : at + n] = seq
                ids[at : at + n] = s + 1
                pos[at : at + n] = np.arange(n, dtype=np.int32)
                at += n
            outs.append({"inputs": inputs, "inputs_segment_ids": ids, "inputs_positions": pos})
        perm = np.random.default_rng(PACK_SEED + done).permutation(len(outs))
        return [outs[i] for i in perm]

    for seq in rows:
        n = len(seq)
        b = next((b for b, r in enumerate(room) if r >= n), -1)
        if b < 0 and len(room) < BINS:
            room.append(LENGTH)
            held.append([])
            b = len(room) - 1
        if b < 0:
            outs = flush()
            yield from outs
            done += len(outs)
            room, held = [LENGTH], [[]]
            b = 0
        room[b] -= n
        held[b].append(seq)
    if held:
        yield from flush()


def hand_rows(src: Corpus, order: list[int]) -> Iterator[dict[str, np.ndarray]]:
    """The packed rows of ``src`` read in ``order`` and filtered by ``keep``."""
    return first_fit(x["inputs"] for x in (src[i] for i in order) if keep(x))


def hand_loop(src: Corpus, order: list[int]) -> Iterator[dict[str, np.ndarray]]:
    """The work with no loader, in one thread: rows stacked per batch of ``BATCH``."""
    batch: list[dict[str, np.ndarray]] = []
    for row in hand_rows(src, order):
        batch.append(row)
        if len(batch) == BATCH:
            yield {k: np.stack([r[k] for r in batch]) for k in batch[0]}
            batch = []
    if batch:
        yield {k: np.stack([r[k] for r in batch]) for k in batch[0]}


def permutation() -> list[int]:
    return np.random.default_rng(SEED).permutation(N).tolist()


def torch_dataset(torch: Any, src: Corpus) -> Any:
    """What a PyTorch user writes: an ``IterableDataset`` packing its worker's share."""

    class Packed(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
            info = torch.utils.data.get_worker_info()
            order = permutation()
            if info is not None:
                order = order[info.id :: info.num_workers]
            return hand_rows(src, order)

    return Packed()


def limit_job(src: Corpus) -> Any:
    def job(w: int) -> None:
        for _ in hand_loop(src, permutation()[w::2]):
            pass

    return job


# -- checks --------------------------------------------------------------------------------------


def as_numpy(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: runners.as_numpy(v) for k, v in batch.items()}


def work_digest(batch: dict[str, Any]) -> tuple[int, int, int, int]:
    """(rows, sequences, tokens, sum of the tokens): what the same work must give."""
    b = as_numpy(batch)
    ids, inputs = b["inputs_segment_ids"], b["inputs"]
    return (
        len(ids),
        int(ids.max(axis=1).sum()),
        int(np.count_nonzero(ids)),
        int(inputs.astype(np.int64).sum()),
    )


def batch_hash(batch: dict[str, Any]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for k, v in sorted(as_numpy(batch).items()):
        h.update(k.encode())
        h.update(str(v.dtype).encode())
        h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


def totals(digests: list[tuple[int, int, int, int]]) -> tuple[int, int, int]:
    """Sequences, tokens and token sum of a whole run (rows differ with the packing)."""
    return tuple(sum(d[i] for d in digests) for i in (1, 2, 3))  # type: ignore[return-value]


def check_throughput(impls: dict[str, Impl], chute: Any, src: Corpus) -> str:
    """Warm-up runs: every implementation packs the same sequences, and the exact claims."""
    ref = impls["chute 0 workers"]
    outs: dict[str, list[Any] | None] = {}
    for name, impl in impls.items():
        outs[name] = common.collect(impl, lambda b: (work_digest(b), batch_hash(b)))
    common.mark_reference(ref, outs[ref.name])
    ref_out = outs[ref.name]
    for name, impl in impls.items():
        if impl is ref:
            continue
        out = outs[name]
        if name.startswith("limit"):
            impl.check = "ok" if out is not None else common.CHECK_RAISED
            continue
        if out is None or ref_out is None:
            impl.check = common.CHECK_RAISED
            continue
        a, b = totals([d for d, _ in out]), totals([d for d, _ in ref_out])
        impl.check = "ok" if a == b else f"MISMATCH: (sequences, tokens, sum) {a} vs {b}"
    v0, v2 = outs["V=64 0 workers"], outs["V=64 2 workers"]
    if v0 is not None and v2 is not None and [h for _, h in v0] != [h for _, h in v2]:
        impls["V=64 2 workers"].check = "MISMATCH: not batch for batch the 0-worker V=64 output"
    # The hand loop, given chute's order, must give chute's batches exactly.
    order = [i for i in chute.MapDataset.range(N).shuffle(seed=SEED)]
    mine = [batch_hash(b) for b in hand_loop(src, order)]
    exact = ref_out is not None and mine == [h for _, h in ref_out]
    if not exact:
        impls["hand loop"].check = "MISMATCH: with chute's order, not chute's batches"
    common.report_check(
        list(impls.values()),
        ref.name,
        "every run packs the same sequences (count, tokens, token sum); V=64 with 2 workers "
        "gives V=64's 0-worker batches exactly; the hand loop in chute's order gives chute's "
        "batches exactly",
    )
    return "ok" if exact else "hand loop differs"


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that ended (workers, once joined)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class CpuCounted:
    """An iterator that adds, when closed, the CPU seconds since it was made to ``sink``:
    this process's and its workers' (joined by then), which other processes' load on the
    machine hardly changes, unlike the wall time."""

    def __init__(self, it: Iterator[Any], start: float, sink: list[float]) -> None:
        self._it, self._start, self._sink = it, start, sink

    def __iter__(self) -> CpuCounted:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        common.close(self._it)
        runners.shutdown_torch(self._it)
        self._sink.append(cpu_seconds() - self._start)


def counted(impl: Impl, cpu: dict[str, list[float]]) -> Impl:
    """``impl``, its iterators counting their CPU seconds into ``cpu[impl.name]``."""
    make, sink = impl.make_iter, cpu.setdefault(impl.name, [])

    def make_iter() -> Iterator[Any]:
        start = cpu_seconds()
        return CpuCounted(make(), start, sink)

    impl.make_iter = make_iter
    return impl


def cpu_impl(impl: Impl, cpu: dict[str, list[float]]) -> Impl:
    """An ``Impl`` whose run times are ``impl``'s timed runs' CPU seconds (the first, the
    check run, left out), for ratios of CPU cost."""
    return Impl(
        f"{impl.name} (cpu)",
        impl.make_iter,
        impl.units,
        times=cpu[impl.name][1:],
        check=impl.check,
        error=impl.error,
    )


def bench_throughput(chute: Any, torch: Any, src: Corpus, repeats: int) -> dict[str, Any]:
    impls = {
        "chute 0 workers": Impl("chute 0 workers", lambda: iter(plain(chute, src, 0)), N),
        "V=64 0 workers": Impl("V=64 0 workers", lambda: iter(sharded(chute, src, 0)), N),
        "chute 2 workers": Impl("chute 2 workers", lambda: iter(plain(chute, src, 2)), N),
        "V=64 2 workers": Impl("V=64 2 workers", lambda: iter(sharded(chute, src, 2)), N),
        **{
            name: Impl(name, make, N, "inline reads")
            for name, make in (
                ("chute 0 workers inline", lambda: iter(plain(chute, src, 0, inline=True))),
                ("V=64 0 workers inline", lambda: iter(sharded(chute, src, 0, inline=True))),
                ("chute 2 workers inline", lambda: iter(plain(chute, src, 2, inline=True))),
                ("V=64 2 workers inline", lambda: iter(sharded(chute, src, 2, inline=True))),
            )
        },
        "torch 0 workers": Impl(
            "torch 0 workers",
            lambda: iter(runners.torch_loader(torch, torch_dataset(torch, src), 0, BATCH)),
            N,
        ),
        "torch 2 workers": Impl(
            "torch 2 workers",
            lambda: iter(runners.torch_loader(torch, torch_dataset(torch, src), 2, BATCH)),
            N,
        ),
        "hand loop": Impl("hand loop", lambda: hand_loop(src, permutation()), N, "1 thread"),
        "limit 2 processes": Impl(
            "limit 2 processes",
            lambda: runners.bare_processes(limit_job(src), 2),
            N,
            "forked, hand back nothing",
        ),
    }
    cpu: dict[str, list[float]] = {}
    for impl in impls.values():
        counted(impl, cpu)
    check_throughput(impls, chute, src)
    group = list(impls.values())
    common.time_runs(group, repeats)
    i = impls
    c = {name: cpu_impl(impl, cpu) for name, impl in impls.items()}
    ratios = [
        Ratio(
            "V=64 / no virtual shards, 0 workers", i["V=64 0 workers"], i["chute 0 workers"], TARGET
        ),
        Ratio(
            "V=64 / no virtual shards, 2 workers", i["V=64 2 workers"], i["chute 2 workers"], TARGET
        ),
        Ratio("V=64 / torch, 0 workers", i["V=64 0 workers"], i["torch 0 workers"], None),
        Ratio("V=64 / torch, 2 workers", i["V=64 2 workers"], i["torch 2 workers"], None),
        Ratio("V=64 0 workers / hand loop", i["V=64 0 workers"], i["hand loop"], None),
        Ratio("V=64 2 workers / limit", i["V=64 2 workers"], i["limit 2 processes"], None),
        Ratio("chute 0 workers / hand loop", i["chute 0 workers"], i["hand loop"], None),
        Ratio(
            "V=64 / none, 0 workers, inline reads",
            i["V=64 0 workers inline"],
            i["chute 0 workers inline"],
            None,
        ),
        Ratio(
            "V=64 / none, 2 workers, inline reads",
            i["V=64 2 workers inline"],
            i["chute 2 workers inline"],
            None,
        ),
    ]
    ratios += [
        Ratio("CPU: V=64 / none, 0 workers", c["V=64 0 workers"], c["chute 0 workers"], None),
        Ratio("CPU: V=64 / none, 2 workers", c["V=64 2 workers"], c["chute 2 workers"], None),
        Ratio(
            "CPU: V=64 / none, 0 workers, inline reads",
            c["V=64 0 workers inline"],
            c["chute 0 workers inline"],
            None,
        ),
        Ratio(
            "CPU: V=64 / none, 2 workers, inline reads",
            c["V=64 2 workers inline"],
            c["chute 2 workers inline"],
            None,
        ),
    ]
    common.mark_invalid(ratios)
    return {
        "name": "throughput",
        "cpu_seconds": cpu,
        "description": (
            f"{N:,} token sequences: shuffle(seed={SEED}) -> filter -> FirstFitPack("
            f"{LENGTH}, num_packing_bins={BINS}) -> batch({BATCH}); with and without "
            f"virtual_shards(V={V}); rates in input sequences/s"
        ),
        "unit": "input sequences/s",
        "impls": group,
        "ratios": ratios,
    }


# -- restore -------------------------------------------------------------------------------------


def far_shard(chute: Any, shard: Any) -> Any:
    ds = chute.MapDataset.range(10**12)[shard.shard_index :: shard.shard_count]
    return token_pipeline(chute, ds.map(far_tokens))


def far_pipeline(chute: Any) -> Any:
    return chute.experimental.virtual_shards(lambda s: far_shard(chute, s), V)


def moved_on(state: dict[str, Any], rounds: int, sources: int) -> dict[str, Any]:
    """A shard's state with its positions moved on: ``sources`` elements of its source
    (``rounds`` batches) later."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        stage = node.get("stage")
        if stage == "to_iter_dataset":
            out["next_index"] += sources
        elif stage == "filter":
            out["index"] += sources
        elif stage == "first_fit_pack":
            out["index"] += sources - sources // 8
            out["bins"] += rounds * BATCH
        elif stage == "batch":
            out["batches"] += rounds
        return out

    return walk(state)


def far_state(chute: Any, near: dict[str, Any], rounds: int) -> dict[str, Any]:
    """``near`` (a real V-shard state) with every shard ``rounds`` batches further on.

    A packing round's contents depend on the data, so each shard's positions are not
    scaled in place: the shard's pipeline alone starts a round ``rounds`` batches on
    (its initial state with the source positions and counters moved on), takes as many
    batches as it had taken in ``near``, and its real state is the shard's entry.
    """
    sources = rounds * SOURCES_PER_BATCH // 1000 * 1000  # whole windows of filter's check
    shards = []
    for v, entry in enumerate(near["shards"]):
        options = chute.ShardOptions(v, V, drop_remainder=True)
        start = moved_on(iter(far_shard(chute, options)).get_state(), rounds, sources)
        it = iter(far_shard(chute, options))
        it.set_state(start)
        for _ in range(entry["taken"]):
            next(it)
        shards.append({"state": it.get_state(), "taken": entry["taken"] + rounds, "dry": False})
    return {**near, "shards": shards}


def restore_child(which: str) -> dict[str, Any]:
    """In a fresh process: save at element 10, move on (for ``far``), restore, take one."""
    import chute

    it = iter(far_pipeline(chute))
    for _ in range(10):
        next(it)
    state = it.get_state()
    if which == "far":
        state = far_state(chute, state, FAR_ROUNDS)
    elements = sum(e["taken"] for e in state["shards"])
    t0 = time.perf_counter()
    fresh = iter(far_pipeline(chute))
    t1 = time.perf_counter()
    fresh.set_state(state)
    t2 = time.perf_counter()
    got = next(fresh)
    t3 = time.perf_counter()
    shard, n = fresh.last_origin
    entry = state["shards"][shard]
    # The element, restored through the shard's own pipeline alone.
    alone = iter(far_shard(chute, chute.ShardOptions(shard, V, drop_remainder=True)))
    alone.set_state(entry["state"])
    same = batch_hash(got) == batch_hash(next(alone))
    # Every sequence of it is one the shard's source holds near the saved position.
    start = _find(entry["state"], "to_iter_dataset")["next_index"]
    ids = chute.MapDataset.range(10**12)[shard::V].shuffle(seed=SEED)
    near = {far_tokens(int(ids[j] or 0))["inputs"].tobytes() for j in range(start, start + 2_000)}
    found = all(
        row[seg == s].tobytes() in near
        for row, seg in zip(got["inputs"], got["inputs_segment_ids"])
        for s in range(1, int(seg.max()) + 1)
    )
    return {
        "element": elements,
        "build_s": t1 - t0,
        "set_state_s": t2 - t1,
        "next_s": t3 - t2,
        "restore_s": t3 - t0,
        "shard": shard,
        "n": n,
        "expected_n": entry["taken"],
        "same_as_shard_alone": same,
        "from_saved_position": found,
        "source_position": start,
        "state_bytes": len(json.dumps(state)),
    }


def _find(node: Any, stage: str) -> Any:
    if isinstance(node, dict):
        if node.get("stage") == stage:
            return node
        for v in node.values():
            hit = _find(v, stage)
            if hit is not None:
                return hit
    return None


def child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args],
        capture_output=True,
        text=True,
        timeout=common.RUN_TIMEOUT_S,
        cwd=HERE,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"{args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_restore(repeats: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"near": [], "far": []}
    for _ in range(repeats):
        for which in runs:
            common.wait_quiet()
            runs[which].append(child("--restore", which))
    return runs


# -- memory --------------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(v: int, inline: bool = False) -> dict[str, Any]:
    """In a fresh process: memory after the first element, and after the first round, of
    ``v`` shards with buffers (``inline``: no read-ahead, only the stages' own buffers)."""
    import chute

    src = Corpus()
    ds = sharded(chute, src, 0, v=v, window=WINDOW, inline=inline)
    before = rss_bytes()
    tracemalloc.start()
    it = iter(ds)
    next(it)
    first = tracemalloc.get_traced_memory()[0], rss_bytes() - before
    for _ in range(v - 1):  # the first round: every shard has read and holds its buffers
        next(it)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "v": v,
        "traced_first": first[0],
        "rss_growth_first": first[1],
        "traced_round": current,
        "rss_growth_round": rss_bytes() - before,
        "traced_peak": peak,
    }


def bench_memory() -> list[dict[str, Any]]:
    out = [child("--memory", str(v)) for v in MEMORY_VS]
    for m in out:
        m["traced_round_inline"] = child("--memory", str(m["v"]), "inline")["traced_round"]
    return out


# -- state size -----------------------------------------------------------------------------------


def state_sizes(chute: Any, src: Corpus) -> dict[str, int]:
    sizes = {}
    for name, ds in (
        ("no virtual shards", plain(chute, src, 0)),
        ("V=1", sharded(chute, src, 0, v=1)),
        ("V=64", sharded(chute, src, 0, v=64)),
    ):
        it = iter(ds)
        for _ in range(10):
            next(it)
        sizes[name] = len(json.dumps(it.get_state()))
    return sizes


# -- reporting ------------------------------------------------------------------------------------


def print_throughput(res: dict[str, Any]) -> None:
    cpu = {name: times[1:] for name, times in res["cpu_seconds"].items()}
    rows = [
        [
            impl.name,
            impl.note,
            "ERROR" if impl.error else common.fmt_num(impl.rate()),
            common.fmt_num(impl.median, 3),
            common.fmt_num(statistics.median(cpu[impl.name]), 3) if cpu.get(impl.name) else "-",
            f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
            impl.check.split(":")[0],
        ]
        for impl in res["impls"]
    ]
    common.print_table(
        ["throughput", "note", "sequences/s", "run s", "cpu s", "spread", "output"],
        rows,
        right={2, 3, 4, 5},
    )


def print_restore(runs: dict[str, list[dict[str, Any]]]) -> list[bool]:
    rows, checks = [], []
    for samples in runs.values():
        med = {k: statistics.median(s[k] for s in samples) for k in ("restore_s", "set_state_s")}
        first = samples[0]
        ok = all(
            s["same_as_shard_alone"] and s["from_saved_position"] and s["n"] == s["expected_n"]
            for s in samples
        )
        checks.append(ok)
        rows.append(
            [
                f"{first['element']:,}",
                f"{first['source_position']:,}",
                f"{med['set_state_s'] * 1e3:.1f}",
                f"{med['restore_s'] * 1e3:.1f}",
                f"< {RESTORE_TARGET_S:g} s",
                "PASS" if med["restore_s"] < RESTORE_TARGET_S else "SHORT",
                "ok" if ok else "WRONG ELEMENT",
                f"{first['state_bytes']:,}",
            ]
        )
    common.print_table(
        [
            "restore V=64 at element",
            "shard source pos",
            "set_state ms",
            "build+restore+next ms",
            "target",
            "result",
            "next element",
            "state bytes",
        ],
        rows,
        right={0, 1, 2, 3, 7},
    )
    return checks


def print_memory(mem: list[dict[str, Any]]) -> None:
    rows = [
        [
            str(m["v"]),
            f"{m['traced_first'] / 1e6:.1f}",
            f"{m['rss_growth_first'] / 1e6:.1f}",
            f"{m['traced_round'] / 1e6:.1f}",
            f"{m['rss_growth_round'] / 1e6:.1f}",
            f"{m['traced_peak'] / 1e6:.1f}",
            f"{m['traced_round'] / m['v'] / 1e3:.0f}",
            f"{m['traced_round_inline'] / 1e6:.1f}",
            f"{m['traced_round_inline'] / m['v'] / 1e3:.0f}",
        ]
        for m in mem
    ]
    common.print_table(
        [
            "memory: V",
            "1st element traced MB",
            "RSS +MB",
            "1st round (V elements) traced MB",
            "RSS +MB",
            "traced peak MB",
            "traced KB / shard",
            "inline reads: 1st round traced MB",
            "KB / shard",
        ],
        rows,
        right={0, 1, 2, 3, 4, 5, 6, 7, 8},
    )


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--restore":
        print(json.dumps(restore_child(sys.argv[2])))
        return 0
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--memory":
        print(json.dumps(memory_child(int(sys.argv[2]), inline=sys.argv[3:] == ["inline"])))
        return 0
    args = common.parse_args(__doc__.splitlines()[0], repeats=5)
    try:
        import torch
        import torch.utils.data

        import chute
    except ImportError as exc:
        sys.exit(f"bench_virtual_shards: {exc}; use bash benchmarks/run virtual_shards")
    env = common.environment()
    env["torch"] = common.version_of("torch")
    print(
        f"virtual shards: chute {env['chute']}, torch {env['torch']} | {env['python']}, "
        f"{env['cpus']} cpus, numpy {env['numpy']}"
    )
    print(
        f"timing: 1 warm-up run per implementation (the output check), then the median of "
        f"{args.repeats} timed runs; implementations alternate in one process; restore and "
        "memory in a fresh process each"
    )
    warning = common.load_warning()
    if warning:
        print(warning)
    started = time.perf_counter()
    src = Corpus()
    lengths = np.diff(np.array(src.bounds))
    print(
        f"source: {N:,} sequences, lengths 1..{lengths.max()} (median "
        f"{np.median(lengths):.0f}), {int(sum(keep(src[i]) for i in range(N))):,} kept; "
        f"rows of {LENGTH}, num_packing_bins={BINS}, batches of {BATCH}"
    )
    print("\n[throughput]")
    t0 = time.perf_counter()
    res = bench_throughput(chute, torch, src, args.repeats)
    res["seconds"] = time.perf_counter() - t0
    print("\n[restore]")
    restore = bench_restore(args.repeats)
    print("[memory]")
    memory = bench_memory()
    sizes = state_sizes(chute, src)
    res["restore"], res["memory"], res["state_bytes"] = restore, memory, sizes

    print()
    print_throughput(res)
    print()
    checks = print_restore(restore)
    print()
    print_memory(memory)
    print()
    common.print_table(
        ["state after 10 elements", "JSON bytes"],
        [[k, f"{v:,}"] for k, v in sizes.items()],
        right={1},
    )
    status = common.finish("virtual_shards", args, env, started, [res])
    if not all(checks):
        print("PROBLEM: a restored iterator's next element is not the one it should be")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
