"""The DataLoader: Grain's order with and without workers, operations, checkpoints."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import chute as grain
from chute import CheckpointError, IteratorClosedError

SOURCE = list(range(10))


class Times10(grain.MapTransform):
    def map(self, x: int) -> int:
        return x * 10


class Not20(grain.FilterTransform):
    def filter(self, x: int) -> bool:
        return bool(x % 20)


class Draw(grain.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> int:
        return int(rng.integers(100))


def _plain(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else x


def run(ops: list[Any], workers: int, sampler: Any = None, source: Any = SOURCE) -> list[Any]:
    sampler = sampler or grain.SequentialSampler(num_records=len(source))
    loader = grain.DataLoader(
        data_source=source, sampler=sampler, operations=ops, worker_count=workers
    )
    return [_plain(x) for x in loader]


# Expected outputs below are Grain 0.2.18's for the same loaders.


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_sequential_order_does_not_depend_on_workers(workers: int) -> None:
    assert run([], workers) == SOURCE


def test_workers_batch_their_own_elements_round_robin() -> None:
    assert run([grain.Batch(3)], 0) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert run([grain.Batch(3)], 2) == [[0, 2, 4], [1, 3, 5], [6, 8], [7, 9]]
    assert run([grain.Batch(3)], 3) == [[0, 3, 6], [1, 4, 7], [2, 5, 8], [9]]


def test_map_filter_and_batch_per_worker() -> None:
    assert run([Times10(), Not20(), grain.Batch(2)], 2) == [[10, 30], [50, 70], [90]]


def test_shuffled_index_sampler_with_workers() -> None:
    sampler = grain.IndexSampler(10, shuffle=True, seed=1, num_epochs=1)
    assert run([grain.Batch(4)], 0, sampler)[0] == [5, 7, 6, 0]
    assert run([grain.Batch(4)], 2, sampler)[0] == [5, 6, 4, 9]


def test_random_map_uses_the_records_rng() -> None:
    assert run([Draw()], 0, grain.IndexSampler(5, seed=3, num_epochs=1)) == [86, 31, 20, 20, 16]
    assert run([Draw()], 2, grain.IndexSampler(5, seed=3, num_epochs=1)) == [86, 31, 20, 20, 16]


def test_legacy_operations() -> None:
    ops = [
        grain.MapOperation(lambda x: x + 1),
        grain.FilterOperation(lambda x: x % 2),
        grain.BatchOperation(2),
    ]
    assert run(ops, 0) == [[1, 3], [5, 7], [9]]


def test_epochs_continue_across_workers() -> None:
    sampler = grain.IndexSampler(7, num_epochs=2)
    expected = [[0, 2], [1, 3], [4, 6], [5, 0], [1, 3], [2, 4], [5], [6]]
    assert run([grain.Batch(2)], 2, sampler) == expected


def test_loader_shard_options_interleave_positions() -> None:
    def sharded(options: grain.ShardOptions, epochs: int) -> list[int]:
        sampler = grain.IndexSampler(10, num_epochs=epochs)
        loader = grain.DataLoader(data_source=SOURCE, sampler=sampler, shard_options=options)
        return list(loader)

    assert sharded(grain.ShardOptions(1, 2), 1) == [1, 3, 5, 7, 9]  # as Grain
    # Grain stops every shard after len // count positions, dropping 18 here;
    # chute gives the first len % count shards one more position.
    assert sharded(grain.ShardOptions(0, 3), 2) == [0, 3, 6, 9, 2, 5, 8]
    assert sharded(grain.ShardOptions(0, 3, drop_remainder=True), 2) == [0, 3, 6, 9, 2, 5]


@pytest.mark.parametrize("count", [2, 3])
def test_sharding_in_the_sampler_alone_reads_each_record_once(count: int) -> None:
    union = []
    for index in range(count):
        sampler = grain.IndexSampler(
            10, shard_options=grain.ShardOptions(index, count), num_epochs=1
        )
        shard = list(grain.DataLoader(data_source=SOURCE, sampler=sampler))
        assert len(shard) == len(set(shard))
        union += shard
    assert sorted(union) == SOURCE
    both = grain.DataLoader(
        data_source=SOURCE,
        sampler=grain.IndexSampler(10, shard_options=grain.ShardOptions(1, 2), num_epochs=1),
        shard_options=grain.ShardOptions(1, 2),
    )
    assert list(both) == [5, 6, 7, 8, 9]  # as Grain: the same sharding applies once


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_loader_shards_read_every_record_exactly_once(count: int) -> None:
    union = []
    for index in range(count):
        loader = grain.DataLoader(
            data_source=SOURCE,
            sampler=grain.SequentialSampler(10),
            shard_options=grain.ShardOptions(index, count),
        )
        union += list(loader)
    assert sorted(union) == SOURCE


def test_map_with_index_and_flat_map() -> None:
    class Pair(grain.MapWithIndexTransform):
        def map_with_index(self, index: int, x: int) -> tuple[int, int]:
            return (index, x)

    class Twice(grain.experimental.FlatMapTransform):
        max_fan_out = 2

        def flat_map(self, x: int) -> list[int]:
            return [x, x]

    sampler = grain.IndexSampler(4, shuffle=True, seed=0, num_epochs=1)
    pairs = run([Pair()], 0, sampler)
    assert [p[0] for p in pairs] == [0, 1, 2, 3]
    assert sorted(p[1] for p in pairs) == [0, 1, 2, 3]
    assert run([Twice(), grain.Batch(3)], 0)[:2] == [[0, 0, 1], [1, 2, 2]]


class ThreeToNone(grain.MapTransform):
    def map(self, x: Any) -> Any:
        return None if x == 3 else x


class Not3(grain.FilterTransform):
    def filter(self, x: Any) -> bool:
        return x != 3


class Both(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x: Any) -> list[Any]:
        return [x, x]


class Indexed(grain.MapWithIndexTransform):
    def map_with_index(self, index: int, x: Any) -> Any:
        return (index, x)


WITH_NONES = [1, None, 3, 4, None]


@pytest.mark.parametrize(
    ("ops", "workers", "expected"),
    [  # Grain 0.2.18's outputs for the same loaders
        ([], 0, [1, None, 3, 4, None]),
        ([], 2, [1, None, 3, 4, None]),
        ([ThreeToNone()], 0, [1, None, None, 4, None]),
        ([ThreeToNone()], 2, [1, None, None, 4, None]),
        ([Not3()], 0, [1, None, 4, None]),
        ([Not3()], 2, [1, None, None, 4]),
        ([Both()], 0, [1, 1, None, None, 3, 3, 4, 4, None, None]),
        ([Both()], 2, [1, None, 1, None, 3, 4, 3, 4, None, None]),
        ([Indexed()], 2, [(0, 1), (1, None), (2, 3), (3, 4), (4, None)]),  # Grain refuses it
        ([Not3(), grain.Batch(2)], 0, [[1, None], [4, None]]),
        ([grain.Batch(2)], 2, [[1, 3], [None, 4], None]),  # Grain: [None] (an all-None batch)
    ],
)
def test_none_records_pass_through_as_in_grain(
    ops: list[Any], workers: int, expected: list[Any]
) -> None:
    assert run(ops, workers, source=WITH_NONES) == expected


def test_load_is_a_data_loader_over_an_index_sampler() -> None:
    loader = grain.load(SOURCE, num_epochs=1, shuffle=True, seed=1, batch_size=4)
    direct = run([grain.Batch(4)], 0, grain.IndexSampler(10, shuffle=True, seed=1, num_epochs=1))
    assert [_plain(b) for b in loader] == direct


def _drain(it: Any) -> list[Any]:
    return [_plain(x) for x in it]


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_restores_exactly_at_every_step(workers: int) -> None:
    loader = grain.DataLoader(
        data_source=SOURCE,
        sampler=grain.IndexSampler(10, shuffle=True, seed=4, num_epochs=3),
        operations=[Times10(), grain.Batch(3)],
        worker_count=workers,
    )
    grain.experimental.assert_equal_output_after_checkpoint(loader, max_steps=None)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_iterator_restores_through_one_worker_pool(workers: int) -> None:
    from chute._execution.pool import WorkerPool

    with iter(grain.load(SOURCE, num_epochs=1, batch_size=2, worker_count=workers)) as it:
        pool = it._workers
        assert isinstance(pool, WorkerPool)
        next(it)
        state = it.get_state()
        rest = _drain(it)
        it.set_state(state)
        assert it._workers is pool and _drain(it) == rest


def test_state_is_small_versioned_json() -> None:
    it = iter(grain.load(SOURCE, shuffle=True, seed=0, batch_size=2, worker_count=2))
    next(it)
    state = it.get_state()
    assert isinstance(state, bytes) and len(state) < 2000
    decoded = json.loads(state)
    assert decoded["version"] == 1 and decoded["worker_count"] == 2


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (0, 2), (2, 0)])
def test_checkpoints_survive_a_change_of_worker_count(before: int, after: int) -> None:
    def loader(workers: int) -> grain.DataLoader:
        return grain.DataLoader(
            data_source=list(range(50)),
            sampler=grain.IndexSampler(50, shuffle=True, seed=7, num_epochs=1),
            operations=[Not20(), grain.Batch(4)],
            worker_count=workers,
        )

    it = iter(loader(before))
    seen = [x for _ in range(5) for x in _plain(next(it))]
    resumed = iter(loader(after))
    resumed.set_state(it.get_state())
    rest = [x for batch in resumed for x in _plain(batch)]
    expected = [x for x in range(50) if x % 20]
    assert sorted(seen + rest) == expected  # nothing lost, nothing repeated


def test_worker_count_change_is_refused_with_a_reason_for_flat_map() -> None:
    class Twice(grain.experimental.FlatMapTransform):
        max_fan_out = 2

        def flat_map(self, x: int) -> list[int]:
            return [x, x]

    def loader(workers: int) -> grain.DataLoader:
        return grain.DataLoader(
            data_source=SOURCE,
            sampler=grain.SequentialSampler(10),
            operations=[Twice()],
            worker_count=workers,
        )

    it = iter(loader(2))
    next(it)
    with pytest.raises(
        CheckpointError, match="FlatMap operation splits elements.*saved worker count"
    ):
        iter(loader(3)).set_state(it.get_state())


def test_restore_checks_sampler_and_source() -> None:
    it = iter(grain.load(SOURCE, shuffle=True, seed=1))
    next(it)
    with pytest.raises(
        CheckpointError,
        match=r"sampler IndexSampler\(.*seed=1.*but this DataLoader has IndexSampler\(.*seed=2",
    ):
        iter(grain.load(SOURCE, shuffle=True, seed=2)).set_state(it.get_state())
    ranged = iter(grain.load(grain.RangeDataSource(0, 10, 1), shuffle=True, seed=1))
    with pytest.raises(
        CheckpointError, match=r"data_source RangeDataSource\(start=0.*RangeDataSource\(start=10"
    ):
        iter(grain.load(grain.RangeDataSource(10, 20, 1), shuffle=True, seed=1)).set_state(
            ranged.get_state()
        )
    with pytest.raises(CheckpointError, match="takes the bytes returned by get_state"):
        iter(grain.load(SOURCE)).set_state(b"not json")


def test_bad_arguments_are_rejected_when_building() -> None:
    sampler = grain.SequentialSampler(10)
    with pytest.raises(
        ValueError, match="sampler reads 20 records but the data source has only 10"
    ):
        grain.DataLoader(data_source=SOURCE, sampler=grain.SequentialSampler(20))
    with pytest.raises(TypeError, match=r"operations\[1\] must be a chute.transforms object"):
        grain.DataLoader(data_source=SOURCE, sampler=sampler, operations=[grain.Batch(2), "x + 1"])
    with pytest.raises(ValueError, match="worker_count must be >= 0"):
        grain.DataLoader(data_source=SOURCE, sampler=sampler, worker_count=-1)
    with pytest.raises(TypeError, match="read_options must be a chute.ReadOptions"):
        grain.DataLoader(data_source=SOURCE, sampler=sampler, read_options=4)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="__len__ and __getitem__"):
        grain.DataLoader(data_source=42, sampler=sampler)
    with pytest.raises(ValueError, match="sharding is given twice"):
        grain.DataLoader(
            data_source=SOURCE,
            sampler=grain.IndexSampler(10, shard_options=grain.ShardOptions(0, 2), num_epochs=1),
            shard_options=grain.ShardOptions(1, 2),
        )


def test_a_failing_source_names_itself_and_the_loader_continues() -> None:
    class Flaky:
        def __len__(self) -> int:
            return 6

        def __getitem__(self, index: int) -> int:
            if index == 2:
                raise OSError("bad sector")
            return index

    it = iter(grain.DataLoader(data_source=Flaky(), sampler=grain.SequentialSampler(6)))
    assert [next(it), next(it)] == [0, 1]
    with pytest.raises(OSError, match="bad sector") as info:
        next(it)
    assert any("source Flaky" in note for note in info.value.__notes__)
    assert list(it) == [3, 4, 5]


def test_closed_iterators_raise() -> None:
    with iter(grain.load(SOURCE, worker_count=2)) as it:
        next(it)
    with pytest.raises(IteratorClosedError):
        next(it)


def _shard_loader(index: int) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=list(range(20)),
        sampler=grain.SequentialSampler(20, grain.NoSharding()),
        shard_options=grain.ShardOptions(index, 2),
    )


def test_a_checkpoint_of_another_loader_shard_is_refused() -> None:
    it = iter(_shard_loader(0))
    assert [next(it) for _ in range(3)] == [0, 2, 4]
    state = it.get_state()
    with pytest.raises(CheckpointError, match="shard_options shard 0 of 2, drop_remainder=False"):
        iter(_shard_loader(1)).set_state(state)
    older = json.loads(state)
    del older["shard_options"]  # saved before loaders recorded their shard: unchecked
    resumed = iter(_shard_loader(0))
    resumed.set_state(json.dumps(older).encode())
    assert list(resumed) == list(range(6, 20, 2))
    moved = grain.checkpoint.allow_pipeline_change(iter(_shard_loader(1)))
    moved.set_state(state)  # on purpose: the positions taken as they are
    assert next(moved) == 7
