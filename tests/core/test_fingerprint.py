"""A checkpoint knows the pipeline that saved it and refuses another one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

import chute
from chute import MapDataset, MultiprocessingOptions
from chute._core import fingerprint as fingerprint_module
from chute._core.errors import CheckpointError
from chute._core.fingerprint import fingerprint
from chute._stages.conformance import assert_equal_output_after_checkpoint
from chute.checkpoint import allow_pipeline_change


def _after(ds: Any, steps: int) -> dict[str, Any]:
    it = iter(ds)
    for _ in range(steps):
        next(it)
    return json.loads(json.dumps(it.get_state()))


def double(x: int) -> int:
    return 2 * x


def test_a_state_from_a_bigger_shuffled_pipeline_is_refused_naming_the_stage() -> None:
    big = MapDataset.range(20000).shuffle(seed=7).batch(64, drop_remainder=True)
    small = MapDataset.range(100).shuffle(seed=999).batch(64, drop_remainder=True)
    state = _after(big.to_iter_dataset(), 1)
    with pytest.raises(CheckpointError, match=r"stage 0: saved range over 20000 elements"):
        iter(small.to_iter_dataset()).set_state(state)
    same_length = MapDataset.range(20000).shuffle(seed=999).batch(64, drop_remainder=True)
    with pytest.raises(
        CheckpointError,
        match=r"stage 1: saved shuffle\(seed=7\) over 20000 elements, this pipeline has "
        r"shuffle\(seed=999\) over 20000 elements",
    ):
        iter(same_length.to_iter_dataset()).set_state(state)


def test_a_refused_state_names_a_derived_seed_by_its_mark_not_its_number() -> None:
    state = _after(MapDataset.range(100).seed(42).shuffle().to_iter_dataset(), 1)
    other = MapDataset.range(100).seed(43).shuffle()
    with pytest.raises(CheckpointError) as raised:
        iter(other.to_iter_dataset()).set_state(state)
    message = str(raised.value)
    assert (
        "stage 1: the saved pipeline's shuffle over 100 elements ran with another seed than "
        "this pipeline's shuffle(seed from .seed(43)) over 100 elements" in message
    )
    assert str(other._shuffle_seed) not in message and "seed=" not in message
    # The state still records the seed itself: any two seeds are told apart.
    assert f"shuffle(seed={other._shuffle_seed}) over 100 elements" in fingerprint(other)


def test_batched_and_unbatched_states_do_not_mix() -> None:
    base = MapDataset.range(100)
    batched = _after(base.batch(8).to_iter_dataset(), 3)
    plain = _after(base.to_iter_dataset(), 24)
    with pytest.raises(CheckpointError, match=r"stage 1: saved batch\(batch_size=8\)"):
        iter(base.to_iter_dataset()).set_state(batched)
    with pytest.raises(CheckpointError, match=r"stage 1: saved to_iter_dataset, this pipeline"):
        iter(base.batch(8).to_iter_dataset()).set_state(plain)


def test_function_names_are_part_of_the_fingerprint() -> None:
    state = _after(MapDataset.range(10).map(double).to_iter_dataset(), 2)
    other = MapDataset.range(10).map(lambda x: x).to_iter_dataset()
    with pytest.raises(CheckpointError, match=r"saved map\(double\) over 10 elements"):
        iter(other).set_state(state)


def test_allow_pipeline_change_accepts_a_deliberate_change() -> None:
    state = _after(MapDataset.range(100).batch(8).to_iter_dataset(), 3)
    it = allow_pipeline_change(iter(MapDataset.range(100).to_iter_dataset()))
    it.set_state(state)
    assert next(it) == 3  # the saved position, taken as it is


def test_states_without_a_fingerprint_still_restore() -> None:
    ds = MapDataset.range(20).shuffle(seed=1).to_iter_dataset().batch(3)
    state = _after(ds, 2)
    expected = list(_rest(ds, state))
    del state["fingerprint"]
    assert list(_rest(ds, state)) == expected


def _rest(ds: Any, state: dict[str, Any]) -> Any:
    it = iter(ds)
    it.set_state(state)
    return ([int(v) for v in b] for b in it)


def test_only_the_outermost_state_carries_the_fingerprint() -> None:
    ds = MapDataset.range(10).to_iter_dataset().map(double).batch(2)
    state = _after(ds, 1)
    assert state["fingerprint"] == [
        "range over 10 elements",
        "to_iter_dataset",
        "map(double)",
        "batch(batch_size=2)",
    ]
    assert "fingerprint" not in json.dumps(state["parent"])
    assert_equal_output_after_checkpoint(ds)


def test_the_fingerprint_is_computed_once_per_iterator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = fingerprint_module.fingerprint
    monkeypatch.setattr(fingerprint_module, "fingerprint", lambda ds: calls.append(1) or real(ds))
    it = iter(MapDataset.range(10).to_iter_dataset())
    for _ in range(3):
        next(it)
        it.get_state()
    assert len(calls) == 1


def test_the_worker_count_is_not_part_of_the_fingerprint() -> None:
    ds = MapDataset.range(10).to_iter_dataset()
    two = fingerprint(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    three = fingerprint(ds.mp_prefetch(MultiprocessingOptions(num_workers=3)))
    assert two == three and two[-1] == "mp_prefetch"


def test_the_fingerprint_is_the_same_in_another_python_run() -> None:
    code = (
        "import json, chute\n"
        "from chute._core.fingerprint import fingerprint\n"
        "ds = chute.MapDataset.range(30).seed(5).shuffle().map(str).batch(4)\n"
        "print(json.dumps(fingerprint(ds.to_iter_dataset())))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    ds = MapDataset.range(30).seed(5).shuffle().map(str).batch(4)
    assert json.loads(out.stdout) == fingerprint(ds.to_iter_dataset())


def test_a_state_without_a_stage_says_what_it_lacks() -> None:
    it = iter(MapDataset.range(10).to_iter_dataset())
    with pytest.raises(CheckpointError, match=r"no 'stage' entry.*expects.*'to_iter_dataset'"):
        it.set_state({"version": 1, "next_index": 3})


def test_a_loader_state_without_a_sampler_says_what_it_lacks() -> None:
    loader = chute.load(list(range(10)), num_epochs=1)
    it = iter(loader)
    state = json.loads(it.get_state())
    del state["sampler"]
    with pytest.raises(CheckpointError, match=r"does not record its sampler.*IndexSampler"):
        it.set_state(json.dumps(state).encode())


# -- which data: shards and sources ---------------------------------------------------------


def test_one_shards_state_is_refused_by_another_shard() -> None:
    state = _after(MapDataset.range(100)[0::2].to_iter_dataset(), 3)
    other = iter(MapDataset.range(100)[1::2].to_iter_dataset())
    with pytest.raises(
        CheckpointError,
        match=r"stage 1: saved slice over 50 elements from positions 0::2, this pipeline has "
        r"slice over 50 elements from positions 1::2",
    ):
        other.set_state(state)
    allow_pipeline_change(other).set_state(state)  # taken as it is, on purpose
    assert next(other) == 7


def test_a_slice_by_indices_is_told_apart_by_its_positions() -> None:
    state = _after(MapDataset.range(10).slice([1, 5, 7]).to_iter_dataset(), 1)
    with pytest.raises(CheckpointError, match=r"stage 1: saved slice over 3 elements from 3 pos"):
        iter(MapDataset.range(10).slice([1, 5, 8]).to_iter_dataset()).set_state(state)
    same = iter(MapDataset.range(10).slice([1, 5, 7]).to_iter_dataset())
    same.set_state(state)
    assert list(same) == [5, 7]


def _shard(index: int, count: int) -> Any:
    ds = MapDataset.source(list(range(30))).map(double).to_iter_dataset()
    ds.set_slice(slice(index, None, count), sequential_slice=True)
    return ds


def test_in_place_shards_are_told_apart() -> None:
    state = _after(_shard(0, 3), 2)
    with pytest.raises(
        CheckpointError,
        match=r"stage 1: saved slice over 10 elements from "
        r"positions 0::1, this pipeline has .* from positions 10::1",
    ):
        iter(_shard(1, 3)).set_state(state)
    source = MapDataset.source(list(range(30)))
    source.set_slice(slice(0, None, 3), sequential_slice=True)
    saved = _after(source.to_iter_dataset(), 2)
    source.set_slice(slice(2, None, 3), sequential_slice=True)
    with pytest.raises(
        CheckpointError,
        match=r"stage 0: saved source list over 10 elements from "
        r"records 0:10, this pipeline has .* from records 20:30",
    ):
        iter(source.to_iter_dataset()).set_state(saved)
    again = iter(_shard(0, 3))
    again.set_state(state)
    assert next(again) == 4


def test_ranges_and_sources_of_the_same_length_are_told_apart() -> None:
    state = _after(MapDataset.range(10).to_iter_dataset(), 2)
    with pytest.raises(
        CheckpointError,
        match=r"saved range over 10 elements, this pipeline has "
        r"range over 10 elements from values 10::1",
    ):
        iter(MapDataset.range(10, 20).to_iter_dataset()).set_state(state)
    saved = _after(MapDataset.source(chute.RangeDataSource(0, 10, 1)).to_iter_dataset(), 2)
    other = MapDataset.source(chute.RangeDataSource(10, 20, 1)).to_iter_dataset()
    with pytest.raises(CheckpointError, match=r"stage 0: .*RangeDataSource\(start=0, stop=10"):
        iter(other).set_state(saved)


class Rows:
    """A user's source that names its data, as chute's file sources do."""

    def __init__(self, table: str) -> None:
        self.table = table

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> str:
        return f"{self.table}:{i}"

    def chute_identity(self) -> str:
        return f"table {self.table}"


def test_a_users_source_names_its_data_with_chute_identity() -> None:
    state = _after(MapDataset.source(Rows("train")).to_iter_dataset(), 2)
    message = (
        r"saved source Rows over 8 elements from table train, this pipeline has source Rows "
        r"over 8 elements from table eval"
    )
    with pytest.raises(CheckpointError, match=message):
        iter(MapDataset.source(Rows("eval")).to_iter_dataset()).set_state(state)
    lists = [_after(MapDataset.source(list(range(8))).to_iter_dataset(), 2)]
    assert (
        fingerprint(MapDataset.source(list("abcdefgh")).to_iter_dataset())
        == lists[0]["fingerprint"]
    )  # a source without chute_identity() is known by its type and length


def test_worker_shares_are_not_part_of_the_fingerprint() -> None:
    ds = MapDataset.range(40)[1::2].map(double).to_iter_dataset()
    two = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    head = [next(two) for _ in range(5)]
    state = json.loads(json.dumps(two.get_state()))
    two.close()
    assert (
        fingerprint(ds.mp_prefetch(MultiprocessingOptions(num_workers=3))) == state["fingerprint"]
    )
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=3))) as three:
        three.set_state(state)
        assert head + list(three) == [2 * x for x in range(1, 40, 2)]
