"""virtual_shards: checkpoints that move between topologies, exactly once, in one order.

Issue 36, items 1-3: every per-shard pipeline below resumes exactly on any
hosts x workers (``chute.testing.assert_resumes_exactly``, with its hosts in
processes of their own); one test does the same by hand with hosts as separate
Python processes; every host does equal work; pipelines without virtual
shards keep their order and states.  Bad input and the checker's own failures
are in ``test_virtual_shards_errors.py``.
"""

from __future__ import annotations

import functools
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute
from chute import (
    ArrayRecordDataSource,
    IterDataset,
    MapDataset,
    MultiprocessingOptions,
    ShardOptions,
)
from chute.experimental import (
    BestFitPackIterDataset,
    ConcatThenSplitIterDataset,
    FirstFitPackIterDataset,
    InterleaveIterDataset,
    WindowShuffleIterDataset,
    ZipIterDataset,
    merge_states,
    virtual_shards,
    write_array_record,
)
from chute.testing import Topology, assert_resumes_exactly

V = 8
TOPOLOGIES = [Topology(hosts, workers) for hosts in (1, 2, 4) for workers in (0, 1, 2, 3)]


# -- the per-shard pipelines -------------------------------------------------------------


def _triple(x: int) -> int:
    return 3 * x


def _not_fifth(x: int) -> bool:
    return x % 5 != 0


def _tokens(i: int) -> dict[str, np.ndarray]:
    """Row ``i``: 1 to 5 tokens ``100 * i + k``."""
    return {"inputs": np.arange(1 + i % 5, dtype=np.int32) + 100 * i}


ROWS = [_tokens(i) for i in range(128)]


def _rows(shard: ShardOptions) -> IterDataset[Any]:
    return MapDataset.source(ROWS)[shard.shard_index :: shard.shard_count].to_iter_dataset()


def shuffle_map_batch(shard: ShardOptions) -> IterDataset[Any]:
    ds = MapDataset.range(96)[shard.shard_index :: shard.shard_count].shuffle(seed=1)
    return ds.map(_triple).to_iter_dataset().batch(3)


def filtered(shard: ShardOptions) -> IterDataset[Any]:
    ds = MapDataset.range(100)[shard.shard_index :: shard.shard_count].shuffle(seed=2)
    return ds.to_iter_dataset().filter(_not_fifth)


def first_fit(shard: ShardOptions) -> IterDataset[Any]:
    return FirstFitPackIterDataset(
        _rows(shard), length_struct={"inputs": 8}, num_packing_bins=2, seed=3
    )


def best_fit(shard: ShardOptions) -> IterDataset[Any]:
    return BestFitPackIterDataset(
        _rows(shard), length_struct={"inputs": 8}, num_packing_bins=3, seed=4
    )


def concat_then_split(shard: ShardOptions) -> IterDataset[Any]:
    return ConcatThenSplitIterDataset(_rows(shard), length_struct={"inputs": 5})


def window_shuffle(shard: ShardOptions) -> IterDataset[Any]:
    ds = MapDataset.range(80)[shard.shard_index :: shard.shard_count].to_iter_dataset()
    return WindowShuffleIterDataset(ds, window_size=4, seed=7)


def mixed(shard: ShardOptions) -> IterDataset[Any]:
    v, n = shard.shard_index, shard.shard_count
    a = MapDataset.range(48)[v::n].to_iter_dataset()
    b = MapDataset.range(1000, 1064)[v::n].to_iter_dataset()
    return IterDataset.mix([a, b], [1, 2])


def zipped(shard: ShardOptions) -> IterDataset[Any]:
    v, n = shard.shard_index, shard.shard_count
    a = MapDataset.range(48)[v::n].to_iter_dataset()
    b = MapDataset.range(48)[v::n].shuffle(seed=5).map(_triple).to_iter_dataset()
    return ZipIterDataset([a, b])


def interleaved(files: list[str], shard: ShardOptions) -> IterDataset[Any]:
    """The shard's files (every ``V``-th), read two at a time."""
    mine = files[shard.shard_index :: shard.shard_count]
    readers = [MapDataset.source(ArrayRecordDataSource(f)).map(bytes.decode) for f in mine]
    return InterleaveIterDataset(readers, cycle_length=2)


PIPELINES = {
    "shuffle_map_batch": shuffle_map_batch,
    "filter": filtered,
    "first_fit": first_fit,
    "best_fit": best_fit,
    "concat_then_split": concat_then_split,
    "window_shuffle": window_shuffle,
    "interleave": None,  # built from the files the fixture writes
    "mix": mixed,
    "zip": zipped,
}


@pytest.fixture(scope="module")
def record_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """16 small ArrayRecord files (two per shard), of 3 or 4 records each."""
    root = tmp_path_factory.mktemp("records")
    files = []
    for f in range(2 * V):
        records = [f"file{f}-record{r}" for r in range(3 + f % 2)]
        files += write_array_record(records, str(root / f"part{f:02d}"))
    return files


def _make_shard(name: str, files: list[str]) -> Any:
    if name == "interleave":
        return functools.partial(interleaved, files)
    return PIPELINES[name]


def _hoisted(make_shard: Any, shard: ShardOptions) -> IterDataset[Any]:
    """The shard's pipeline ending with mp_prefetch (virtual_shards takes it off)."""
    return make_shard(shard).mp_prefetch(MultiprocessingOptions(num_workers=2))


def _boxed(x: Any) -> tuple[Any]:
    return (x,)


def _pipeline(make_shard: Any, form: str) -> IterDataset[Any]:
    """``form``: plain (no workers); hoisted (each shard's pipeline ends with mp_prefetch);
    called (mp_prefetch on the virtual_shards dataset); outer (on a map that holds it)."""
    if form == "hoisted":
        return virtual_shards(functools.partial(_hoisted, make_shard), V)
    ds = virtual_shards(make_shard, V)
    options = MultiprocessingOptions(num_workers=2)
    if form == "called":
        return ds.mp_prefetch(options)
    if form == "outer":
        return ds.map(_boxed).mp_prefetch(options)
    return ds


def _plain(x: Any) -> Any:
    """An element as plain Python values, to compare whole streams."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, np.ndarray):
        return (str(x.dtype), x.tolist())
    return x


# -- 1. exactly once, in the same order --------------------------------------------------


def _shard_lengths(make_shard: Any) -> list[int]:
    return [sum(1 for _ in make_shard(ShardOptions(v, V, drop_remainder=True))) for v in range(V)]


#: The pipelines whose shards hold different numbers of elements (filters, packing,
#: files of different lengths): their hosts' shards run dry at different steps.
UNEVEN = {"filter", "first_fit", "best_fit", "interleave"}


@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize(
    ("form", "seed"), [("plain", 1), ("hoisted", 2), ("called", 3), ("outer", 4)]
)
def test_every_pipeline_resumes_exactly_on_any_topology(
    name: str, form: str, seed: int, record_files: list[str]
) -> None:
    """While every shard runs (the first ``V x`` shortest shard's length elements)."""
    make_shard = _make_shard(name, record_files)
    live = V * min(_shard_lengths(make_shard))
    if form == "outer":  # short of the end: see test_a_stage_after_virtual_shards_merges_at_the_end
        live -= V
    report = assert_resumes_exactly(
        lambda: _pipeline(make_shard, form),
        topologies=TOPOLOGIES,
        resumes=5,
        elements=live,
        seed=seed,
    )
    assert report.elements == live >= 3 * V
    assert len(report.parts) >= 2
    assert sum(n for _, n in report.parts) == report.elements


@pytest.mark.parametrize("name", list(PIPELINES))
def test_every_pipeline_resumes_exactly_to_its_end(name: str, record_files: list[str]) -> None:
    make_shard = _make_shard(name, record_files)
    report = assert_resumes_exactly(
        lambda: virtual_shards(make_shard, V), topologies=TOPOLOGIES, resumes=5, seed=0
    )
    assert report.elements == sum(_shard_lengths(make_shard))


def _origin(it: Any) -> tuple[int, int]:
    """``(shard, n)`` of the element ``it`` yielded last (``__iter__`` is typed as giving a
    plain DatasetIterator)."""
    origin: tuple[int, int] = it.last_origin
    return origin


def _origins(ds: IterDataset[Any]) -> list[tuple[int, int]]:
    with iter(ds) as it:
        return [_origin(it) for _ in it]


@pytest.mark.parametrize("hosts", [2, 4])
@pytest.mark.parametrize("name", list(PIPELINES))
def test_hosts_together_yield_the_global_stream_at_every_step(
    name: str, hosts: int, record_files: list[str]
) -> None:
    """While every shard runs, after ``s`` steps on every host, the hosts' elements are the
    first of the global stream, for every ``s``: what a state saved at any step describes.
    Once shards ran dry, hosts reach later rounds at their own pace; nothing is lost."""
    make_shard = _make_shard(name, record_files)
    whole = _origins(virtual_shards(make_shard, V))
    streams = [
        _origins(virtual_shards(make_shard, V, shard_options=ShardOptions(h, hosts)))
        for h in range(hosts)
    ]
    running = min(_shard_lengths(make_shard)) * V // hosts
    for step in range(1, running + 1):
        union = sorted((o for s in streams for o in s[:step]), key=lambda o: (o[1], o[0]))
        assert union == whole[: len(union)], f"after step {step}"
    everything = sorted((o for s in streams for o in s), key=lambda o: (o[1], o[0]))
    assert everything == whole


@pytest.mark.parametrize("name", list(PIPELINES))
def test_uneven_pipelines_are_the_ones_with_shards_of_different_lengths(
    name: str, record_files: list[str]
) -> None:
    lengths = _shard_lengths(_make_shard(name, record_files))
    assert (len(set(lengths)) > 1) == (name in UNEVEN), lengths


@pytest.mark.parametrize("name", list(PIPELINES))
def test_workers_give_the_stream_of_one_process(name: str, record_files: list[str]) -> None:
    make_shard = _make_shard(name, record_files)
    inline = [_plain(x) for x in _pipeline(make_shard, "plain")]
    assert [_plain(x) for x in _pipeline(make_shard, "hoisted")] == inline
    assert [_plain(x) for x in _pipeline(make_shard, "called")] == inline
    assert [_plain(x) for x in _pipeline(make_shard, "outer")] == [(x,) for x in inline]


def _short_first(opts: ShardOptions) -> MapDataset[int]:
    """Shard 0 holds one element, the others three: ``100 * v + i``."""
    v = opts.shard_index
    return MapDataset.range(100 * v, 100 * v + (1 if v == 0 else 3))


def test_once_shards_of_one_host_ran_dry_it_reaches_later_rounds_first() -> None:
    """The documented tail of a finite pass: hosts step together, so a host whose shards
    ran dry moves to later rounds sooner; every element still comes once."""
    whole = list(virtual_shards(_short_first, 4))
    assert whole == [0, 100, 200, 300, 101, 201, 301, 102, 202, 302]
    hosts = [
        iter(virtual_shards(_short_first, 4, shard_options=ShardOptions(h, 2))) for h in (0, 1)
    ]
    steps = [[next(it) for _ in range(4)] for it in hosts]
    assert steps == [[0, 200, 201, 202], [100, 300, 101, 301]]  # host 0 is in round 2 already
    # 202 (shard 2, round 2) went before 102 (shard 1, round 2): not the global order
    assert sorted(steps[0] + steps[1], key=lambda x: (x % 100, x // 100)) != whole[:8]
    rest = [x for it in hosts for x in it]
    assert sorted(steps[0] + steps[1] + rest) == sorted(whole)


def test_a_merged_state_restores_alike_with_any_worker_count() -> None:
    def shard(opts: ShardOptions) -> MapDataset[int]:  # shard v: 2 * (1 + v % 4) elements
        v = opts.shard_index
        return MapDataset.range(100 * v, 100 * v + 2 * (1 + v % 4))

    hosts = [iter(virtual_shards(shard, V, shard_options=ShardOptions(h, 2))) for h in (0, 1)]
    for it in hosts:
        for _ in range(10):
            next(it)
    merged = merge_states([it.get_state() for it in hosts])
    rests = []
    for workers in (0, 2):
        ds = virtual_shards(shard, V).mp_prefetch(MultiprocessingOptions(num_workers=workers))
        with iter(ds) as it:
            it.set_state(merged)
            rests.append([(_origin(it), x) for x in it])
    assert all(x // 100 == origin[0] for origin, x in rests[1]), rests[1]  # shard 2 as 6...
    assert rests[1] == rests[0]


def test_the_global_stream_is_every_shard_read_round_by_round() -> None:
    def shard(opts: ShardOptions) -> MapDataset[int]:
        return MapDataset.range(10)[opts.shard_index :: opts.shard_count]

    # shards 0 and 1 hold 3 elements, shards 2 and 3 hold 2: the last round skips them
    assert list(virtual_shards(shard, 4)) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    ds = virtual_shards(lambda o: shard(o).map(lambda x: x * (o.shard_index + 1)), 4)
    assert list(ds) == [0, 2, 6, 12, 4, 10, 18, 28, 8, 18]
    with iter(ds) as it:
        origins = []
        for _ in it:
            origins.append(_origin(it))
    assert origins == [(v, n) for n in range(3) for v in range(4) if n < 2 or v < 2]


# -- hosts as separate Python processes --------------------------------------------------

HOST_SCRIPT = textwrap.dedent(
    """
    import json, pickle, sys
    import numpy as np
    import chute
    from chute.experimental import virtual_shards

    KIND = sys.argv[1]

    def make_shard(shard):
        v, n = shard.shard_index, shard.shard_count
        if KIND == "filter":
            ds = chute.MapDataset.range(160)[v::n].shuffle(seed=5).to_iter_dataset()
            return ds.filter(lambda x: x % 5 != 0).batch(2)
        if KIND == "equal":
            return chute.MapDataset.range(96)[v::n].shuffle(seed=5).to_iter_dataset().batch(4)
        if KIND == "endless":
            return chute.MapDataset.range(21)[v::n].repeat().to_iter_dataset().batch(4)
        if KIND == "unequal":
            return chute.MapDataset.range(91)[v::n].to_iter_dataset()
        raise ValueError(KIND)

    def main():
        host, hosts, workers, steps = map(int, sys.argv[2:6])
        state_in, out = sys.argv[6], sys.argv[7]
        ds = virtual_shards(make_shard, 8, shard_options=chute.ShardOptions(host, hosts))
        if workers:
            ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
        got = []
        with iter(ds) as it:
            if state_in != "-":
                with open(state_in, "rb") as f:
                    it.set_state(pickle.load(f))
            while steps < 0 or len(got) < steps:
                try:
                    x = next(it)
                except StopIteration:
                    break
                got.append([list(it.last_origin), np.asarray(x).tolist()])
            state = it.get_state()
        with open(out, "wb") as f:
            pickle.dump({"elements": got, "state": state}, f)
        json.dumps(state)  # states stay JSON-able

    if __name__ == "__main__":
        main()
    """
)


def _hosts(
    tmp: Path, kind: str, hosts: int, workers: int, steps: int = -1, state: Any = None
) -> list[dict[str, Any]]:
    """Runs hosts ``0..hosts-1`` of ``kind``'s pipeline, each a Python process of its own,
    from ``state`` for ``steps`` steps (-1: to the end); their elements and states."""
    script = tmp / "host.py"
    script.write_text(HOST_SCRIPT)
    state_in = "-"
    if state is not None:
        state_in = str(tmp / f"in-{kind}-{hosts}-{workers}.pkl")
        Path(state_in).write_bytes(pickle.dumps(state))
    outs = [tmp / f"out-{kind}-{hosts}-{workers}-{h}.pkl" for h in range(hosts)]
    args = [str(hosts), str(workers), str(steps), state_in]
    running = [
        subprocess.Popen(
            [sys.executable, str(script), kind, str(h), *args, str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for h, out in enumerate(outs)
    ]
    for h, process in enumerate(running):
        log, _ = process.communicate(timeout=100)
        assert process.returncode == 0, f"host {h} of {hosts} failed:\n{log}"
    return [pickle.loads(out.read_bytes()) for out in outs]


def _union(results: list[dict[str, Any]]) -> list[tuple[tuple[int, int], Any]]:
    """The hosts' elements in the global order, by ``(n, shard)`` of their origins."""
    pairs = [(tuple(origin), x) for r in results for origin, x in r["elements"]]
    return sorted(pairs, key=lambda pair: (pair[0][1], pair[0][0]))


def test_hosts_in_separate_processes_resume_on_other_hosts_and_workers(tmp_path: Path) -> None:
    (whole,) = _hosts(tmp_path, "filter", hosts=1, workers=0)
    expected = [(tuple(o), x) for o, x in whole["elements"]]
    flat = sorted(v for _, batch in expected for v in batch)
    assert flat == [x for x in range(160) if x % 5 != 0]  # all the data, once
    assert [o for o, _ in expected] == sorted((o for o, _ in expected), key=lambda o: (o[1], o[0]))

    saved = _hosts(tmp_path, "filter", hosts=2, workers=2, steps=5)
    assert [len(r["elements"]) for r in saved] == [5, 5]
    assert _union(saved) == expected[:10]
    for h, r in enumerate(saved):  # each host's state holds its own shards only
        held = [v for v, part in enumerate(r["state"]["shards"]) if part is not None]
        assert held == list(range(h, V, 2))
    merged = merge_states([r["state"] for r in saved])

    assert _union(_hosts(tmp_path, "filter", hosts=4, workers=1, state=merged)) == expected[10:]
    assert _union(_hosts(tmp_path, "filter", hosts=1, workers=3, state=merged)) == expected[10:]


# -- 2. equal work per host --------------------------------------------------------------


def test_endless_shards_give_every_host_equal_batches(tmp_path: Path) -> None:
    results = _hosts(tmp_path, "endless", hosts=4, workers=2, steps=9)
    for r in results:
        assert len(r["elements"]) == 9
        assert {len(batch) for _, batch in r["elements"]} == {4}
    # together they are the first 36 batches of the one-host stream
    (one,) = _hosts(tmp_path, "endless", hosts=1, workers=0, steps=36)
    assert _union(results) == [(tuple(o), x) for o, x in one["elements"]]


def test_equal_shards_give_every_host_equal_batches_to_the_end(tmp_path: Path) -> None:
    results = _hosts(tmp_path, "equal", hosts=2, workers=1)
    counts = [len(r["elements"]) for r in results]
    sizes = [{len(batch) for _, batch in r["elements"]} for r in results]
    assert counts == [12, 12]  # 4 shards x 3 batches of 4 on each host
    assert sizes == [{4}, {4}]


def test_unequal_shards_drop_nothing_and_longer_shards_end_later(tmp_path: Path) -> None:
    """The remainder rule: a shard that runs dry is skipped, nothing is dropped, so a host
    whose shards hold more elements yields more at the end."""
    results = _hosts(tmp_path, "unequal", hosts=2, workers=2)
    # 91 = 8 x 11 + 3: shards 0, 1 and 2 hold 12 elements, the others 11
    assert [len(r["elements"]) for r in results] == [46, 45]
    union = _union(results)
    assert [x for _, x in union] == list(range(91))
    assert [o for o, _ in union][-3:] == [(0, 11), (1, 11), (2, 11)]


def _range_shard(opts: ShardOptions) -> MapDataset[int]:
    return MapDataset.range(64)[opts.shard_index :: opts.shard_count]


def _restored_on_two_hosts(after: Any) -> list[tuple[int, dict[str, Any]]]:
    """Each of 2 hosts, restored from 1 host's state after 5 steps: its count to the end and
    its final state."""
    with iter(after(virtual_shards(_range_shard, V))) as it:
        for _ in range(5):
            next(it)
        state = it.get_state()
    out = []
    for h in (0, 1):
        with iter(after(virtual_shards(_range_shard, V, shard_options=ShardOptions(h, 2)))) as it:
            it.set_state(state)
            out.append((sum(1 for _ in it), it.get_state()))
    return out


def test_the_remainder_of_a_state_saved_between_rounds_goes_to_the_first_hosts() -> None:
    """The documented remainder: 59 elements left after 5 of 64 cannot split evenly over
    2 hosts; nothing is lost, and one host makes one step more at the very end."""
    counts = [count for count, _ in _restored_on_two_hosts(lambda ds: ds)]
    assert sum(counts) == 64 - 5
    assert sorted(counts) == [29, 30]


def test_a_stage_after_virtual_shards_that_counts_refuses_a_merge_of_uneven_ends() -> None:
    """A map after virtual_shards counts its host's elements: after hosts ended unevenly
    their states differ there, and merge_states says which stage to move."""
    parts = _restored_on_two_hosts(lambda ds: ds.map(_boxed))
    with pytest.raises(chute.CheckpointError, match="a stage after virtual_shards"):
        merge_states([state for _, state in parts])


# -- 3. opt-in ---------------------------------------------------------------------------


def test_a_pipeline_without_virtual_shards_keeps_its_order_and_states() -> None:
    """The literals are what chute yielded and saved before virtual shards existed."""
    ds = MapDataset.range(10).shuffle(seed=3).to_iter_dataset().filter(_not_fifth)
    assert list(ds) == [4, 7, 8, 2, 3, 6, 1, 9]
    # Grain's worker order: worker 0 reads indices 0, 2, 4..., worker 1 the odd ones
    prefetched = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    assert list(prefetched) == [4, 7, 2, 8, 3, 6, 1, 9]
    with iter(ds) as it:
        next(it)
        assert it.get_state() == {
            "version": 1,
            "stage": "filter",
            "parent": {"version": 1, "stage": "to_iter_dataset", "next_index": 1},
            "index": 1,
            "dropped": 0,
            "fingerprint": [
                "range over 10 elements",
                "shuffle(seed=3) over 10 elements",
                "to_iter_dataset",
                "filter(_not_fifth)",
            ],
        }


def test_a_host_count_that_does_not_divide_num_shards_is_refused_naming_ones_that_do() -> None:
    with pytest.raises(ValueError, match=r"\b(63|66)\b"):
        virtual_shards(shuffle_map_batch, 64, shard_options=ShardOptions(0, 3))
