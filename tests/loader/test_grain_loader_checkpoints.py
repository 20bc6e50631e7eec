"""DataLoader checkpoints cross between Grain and chute (Grain's state is JSON bytes).

The Grain states and the batches after them were observed from Grain 0.2.18's
DataLoader over the same source and sampler; the tests never import grain.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from typing import Any

import pytest

from chute import CheckpointError, DataLoader, IndexSampler, NoSharding
from chute.checkpoint import allow_pipeline_change, from_grain_state, to_grain_state
from chute.transforms import Batch


class Squares:
    """A source whose repr Grain and chute both write into the checkpoint."""

    def __len__(self) -> int:
        return 9

    def __getitem__(self, i: int) -> int:
        return i * i

    def __repr__(self) -> str:
        return "Squares(9)"


SAMPLER = (
    "IndexSampler(num_records=9, shard_options=NoSharding(shard_index=0, shard_count=1, "
    "drop_remainder=False), shuffle=True, num_epochs=1, seed=3)"
)


def _loader(workers: int) -> DataLoader:
    sampler = IndexSampler(9, NoSharding(), shuffle=True, seed=3, num_epochs=1)
    return DataLoader(
        data_source=Squares(), sampler=sampler, operations=[Batch(2)], worker_count=workers
    )


def _grain(last_seen: dict[str, int], last_worker: int, workers: int) -> dict[str, Any]:
    return {
        "version": 2,
        "last_seen_indices": last_seen,
        "last_worker_index": last_worker,
        "worker_count": workers,
        "sampler": SAMPLER,
        "data_source": "Squares(9)",
    }


# (worker_count, batches read, Grain's state there, Grain's batches after it)
CASES = {
    "two_workers": (2, 1, _grain({"0": 2, "1": -1}, 0, 2), [[49, 64], [4, 9], [25, 36], [1]]),
    "two_workers_turn_wrapped": (2, 2, _grain({"0": 2, "1": 3}, -1, 2), [[4, 9], [25, 36], [1]]),
    "no_workers": (0, 2, _grain({"0": 3}, -1, 0), [[4, 25], [9, 36], [1]]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_loader_restores_from_grain_state_bytes(name: str) -> None:
    workers, _, grain, expected = CASES[name]
    it = iter(_loader(workers))
    it.set_state(json.dumps(grain, indent=4).encode())
    assert [b.tolist() for b in it] == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_loader_writes_the_grain_state_grain_writes(name: str) -> None:
    workers, steps, grain, _ = CASES[name]
    it = iter(_loader(workers))
    for _ in range(steps):
        next(it)
    written = to_grain_state(it)
    it.close()
    assert isinstance(written, bytes)
    assert json.loads(written) == grain


def test_from_grain_state_gives_chute_loader_bytes() -> None:
    workers, _, grain, expected = CASES["two_workers"]
    it = iter(_loader(workers))
    state = from_grain_state(it, json.dumps(grain).encode())
    assert json.loads(state)["positions"] == [2, 0]  # records read per worker
    it.set_state(state)
    assert [b.tolist() for b in it] == expected


def test_grain_state_of_another_sampler_is_refused() -> None:
    grain = dict(CASES["two_workers"][2], sampler="IndexSampler(num_records=9, seed=4)")
    it = iter(_loader(2))
    with pytest.raises(CheckpointError, match="sampler"):
        it.set_state(json.dumps(grain).encode())
    it.close()


def test_grain_state_restores_into_another_worker_count_without_loss() -> None:
    grain = CASES["two_workers"][2]
    it = iter(_loader(3))
    it.set_state(json.dumps(grain).encode())
    rest = sorted(x for b in it for x in b.tolist())
    assert rest == sorted([49, 64, 4, 9, 25, 36, 1])


def test_the_grain_state_names_an_array_record_source_as_grain_does(tmp_path: Any) -> None:
    import hashlib

    from chute import ArrayRecordDataSource, SequentialSampler
    from chute.experimental import write_array_record

    paths = write_array_record([b"a", b"b", b"c"], str(tmp_path / "data"), num_shards=2)
    source = ArrayRecordDataSource(paths)
    loader = DataLoader(data_source=source, sampler=SequentialSampler(3, NoSharding()))
    it = iter(loader)
    next(it)
    saved = json.loads(to_grain_state(it))
    # Grain 0.2.18 writes repr(source): the SHA-1 of its file paths joined.
    digest = hashlib.sha1("".join(paths).encode()).hexdigest()
    assert saved["data_source"] == f"ArrayRecordDataSource(hash_of_paths={digest})"


# -- the data source Grain's state names ----------------------------------------------------


class Cubes(Squares):
    def __getitem__(self, i: int) -> int:
        return i**3

    def __repr__(self) -> str:
        return "Cubes(9)"


def _over(source: Any, workers: int = 2) -> DataLoader:
    sampler = IndexSampler(9, NoSharding(), shuffle=True, seed=3, num_epochs=1)
    return DataLoader(
        data_source=source, sampler=sampler, operations=[Batch(2)], worker_count=workers
    )


def test_a_grain_state_of_another_data_source_is_refused() -> None:
    grain = json.dumps(CASES["two_workers"][2]).encode()
    with iter(_over(Cubes())) as it:
        message = r"saved with data source Squares\(9\) but this DataLoader has Cubes\(9\)"
        with pytest.raises(CheckpointError, match=message):
            it.set_state(grain)
        with pytest.raises(CheckpointError, match=message):
            from_grain_state(it, grain)
        allow_pipeline_change(it).set_state(grain)  # taken as it is, on purpose
        assert [b.tolist() for b in it] == [[343, 512], [8, 27], [125, 216], [1]]


def _grain_array_record_state(names: list[str], records: int) -> bytes:
    # What Grain 0.2.18's DataLoader saved after two records of a SequentialSampler over
    # ArrayRecordDataSource(names): a SHA-1 of the file names joined, without the record
    # ranges of sliced files ("a[0:5]" counts as "a"), and the sampler's repr without a seed.
    digest = hashlib.sha1("".join(n.split("[")[0] for n in names).encode()).hexdigest()
    state = {
        "version": 2,
        "last_seen_indices": {"0": 1},
        "last_worker_index": -1,
        "worker_count": 0,
        "sampler": f"SequentialSampler(num_records={records}, shard_options=NoSharding("
        "shard_index=0, shard_count=1, drop_remainder=False))",
        "data_source": f"ArrayRecordDataSource(hash_of_paths={digest})",
    }
    return json.dumps(state).encode()


def test_a_grain_state_of_other_array_record_files_is_refused(tmp_path: Any) -> None:
    from chute import ArrayRecordDataSource, SequentialSampler
    from chute.experimental import write_array_record

    first = write_array_record([b"a%d" % i for i in range(10)], str(tmp_path / "a"))[0]
    second = write_array_record([b"b%d" % i for i in range(10)], str(tmp_path / "b"))[0]
    copy = shutil.copy(second, tmp_path / "c.array_record")

    def loader(names: list[str]) -> DataLoader:
        source = ArrayRecordDataSource(names)
        return DataLoader(data_source=source, sampler=SequentialSampler(15, NoSharding()))

    names = [f"{first}[0:5]", second]
    state = _grain_array_record_state(names, 15)
    it = iter(loader(names))
    it.set_state(state)  # the same files: Grain's description matches
    assert next(it) == b"a2"
    with pytest.raises(CheckpointError, match=r"data source ArrayRecordDataSource\(hash_of_paths"):
        iter(loader([f"{first}[0:5]", copy])).set_state(state)


def test_list_sources_and_sequential_samplers_are_described_as_grain_does() -> None:
    from chute import SequentialSampler

    loader = DataLoader(data_source=list(range(9)), sampler=SequentialSampler(9, NoSharding()))
    it = iter(loader)
    next(it)
    written = json.loads(to_grain_state(it))
    # Grain 0.2.18 writes these for the same loader, and refuses the state otherwise.
    assert written["data_source"] == "<class 'list'>"
    assert written["sampler"] == (
        "SequentialSampler(num_records=9, shard_options=NoSharding(shard_index=0, "
        "shard_count=1, drop_remainder=False))"
    )
    again = iter(loader)
    again.set_state(json.dumps(written).encode())
    assert list(again) == list(range(1, 9))
