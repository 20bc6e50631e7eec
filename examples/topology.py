"""Moving a checkpoint to another topology: save on 2 hosts, resume on 4 or on 1.

A language-model input pipeline (documents tokenized on the fly, shuffled,
too-short ones filtered out, packed first-fit into rows of 128 tokens,
batched) is split into 8 virtual shards with
``chute.experimental.virtual_shards``.  The global stream depends on the 8
shards alone: round ``n`` takes the ``n``-th batch of every shard, in shard
order.  Hosts only decide who runs which shards.

Each host here is a real process that builds the same pipeline with its own
``ShardOptions(host, hosts)``, reads its batches and writes its state with
``chute.checkpoint.save`` (one JSON file per host), as the hosts of a training
job do; ``chute.checkpoint.load`` merges every host's file.  The run:

1. 2 hosts x 2 worker processes each read 6 batches, then save.
2. 4 hosts x 1 worker each merge the 2 saved files and read 5 batches.
3. 1 host x 3 workers merges the same 2 files and reads 20 batches.

Both resumed runs must give exactly the batches that an uninterrupted run on
one host gives after its first 12, in the same global order.

Run:  python examples/topology.py
"""

from __future__ import annotations

import multiprocessing
import pathlib
import pickle
import tempfile
import time

import numpy as np

import chute

SHARDS = 8  # virtual shards: every host count used must divide it (1, 2, 4, 8)
ROW = 128  # tokens per packed row
BATCH = 4  # rows per batch


def document(i: int) -> dict[str, np.ndarray]:
    """Document ``i``'s tokens (a stand-in for reading and tokenizing a text)."""
    rng = np.random.default_rng(i)
    length = int(np.clip(rng.lognormal(3.0, 0.9), 1, ROW))
    return {"inputs": rng.integers(1, 32_000, length, dtype=np.int32)}


def long_enough(doc: dict[str, np.ndarray]) -> bool:
    return len(doc["inputs"]) >= 8


DOCUMENTS = chute.MapDataset.range(4_000).map(document)


def make_shard(shard: chute.ShardOptions) -> chute.IterDataset:
    """The whole pipeline of one virtual shard: its slice of the documents, then the rest."""
    docs = (
        DOCUMENTS[shard.shard_index :: shard.shard_count]
        .shuffle(seed=7)
        .repeat()  # endless: every host makes the same number of steps
        .to_iter_dataset()
        .filter(long_enough)
    )
    packed = chute.experimental.FirstFitPackIterDataset(
        docs, length_struct={"inputs": ROW}, num_packing_bins=BATCH, seed=0
    )
    return packed.batch(BATCH)


def pipeline(host: int, hosts: int, workers: int) -> chute.IterDataset:
    """Host ``host`` of ``hosts``: its shards (``v % hosts == host``), on ``workers`` workers."""
    ds: chute.IterDataset = chute.experimental.virtual_shards(
        make_shard, SHARDS, shard_options=chute.ShardOptions(host, hosts)
    )
    if workers:
        ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
    return ds


def run_host(
    host: int, hosts: int, workers: int, steps: int, restore: str | None, folder: str
) -> None:
    """One host's process: restore from the checkpoint ``restore``, read ``steps`` batches,
    save its state into ``folder/checkpoint`` and its batches for the check."""
    out = pathlib.Path(folder)
    with iter(pipeline(host, hosts, workers)) as it:
        if restore is not None:
            # Reads every host's file in the folder and merges them
            # (chute.experimental.merge_states): each holds only its host's shards.
            chute.checkpoint.load(it, restore)
        got = []
        for _ in range(steps):
            batch = next(it)
            got.append((it.last_origin, batch))  # (shard, n): where it sits in the global order
        # Writes checkpoint/process_{host}-of-{hosts}.json, named by the host's ShardOptions.
        chute.checkpoint.save(it, out / "checkpoint")
    (out / f"batches_{host}.pkl").write_bytes(pickle.dumps(got))


def run_part(
    hosts: int, workers: int, steps: int, restore: pathlib.Path | None, folder: pathlib.Path
) -> list[dict[str, np.ndarray]]:
    """Runs ``hosts`` host processes side by side; returns their batches in the global
    order (by ``(n, shard)``)."""
    folder.mkdir()
    shards = [list(range(h, SHARDS, hosts)) for h in range(hosts)]
    print(f"{hosts} host(s) x {workers} worker(s), the hosts' virtual shards {shards}:")
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(
            target=run_host,
            args=(h, hosts, workers, steps, None if restore is None else str(restore), str(folder)),
        )
        for h in range(hosts)
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a host process failed (exit code {p.exitcode})")
    got = [
        pair
        for h in range(hosts)
        for pair in pickle.loads((folder / f"batches_{h}.pkl").read_bytes())
    ]
    got.sort(key=lambda pair: (pair[0][1], pair[0][0]))
    return [batch for _, batch in got]


def check(
    label: str, got: list[dict[str, np.ndarray]], expected: list[dict[str, np.ndarray]]
) -> None:
    assert len(got) == len(expected), (label, len(got), len(expected))
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), (label, i)
    print(f"  {label}: identical to the uninterrupted run")


def main() -> None:
    start = time.perf_counter()
    saved_after, resumed = 12, 20
    with iter(pipeline(0, 1, 0)) as it:
        expected = [next(it) for _ in range(saved_after + resumed)]
    first = expected[0]
    print(
        f"uninterrupted, 1 host: {len(expected)} batches of {BATCH} rows x {ROW} tokens, "
        f"keys {sorted(first)}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)

        part = run_part(hosts=2, workers=2, steps=saved_after // 2, restore=None, folder=root / "a")
        check("batches 0-11", part, expected[:saved_after])
        saved = {p.name: p.stat().st_size for p in sorted((root / "a" / "checkpoint").iterdir())}
        print(f"  saved the hosts' states (file: bytes) {saved}")

        rest = expected[saved_after:]
        part = run_part(4, 1, resumed // 4, root / "a" / "checkpoint", root / "b")
        check("resumed from the 2 files, batches 12-31", part, rest)
        part = run_part(1, 3, resumed, root / "a" / "checkpoint", root / "c")
        check("resumed from the 2 files, batches 12-31", part, rest)
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
