"""IndexSampler and SequentialSampler: Grain's order, lengths, RNGs and errors.

The expected outputs below were observed from Grain 0.2.18 for the same
arguments (tests never import grain).
"""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute._core.sharding import NoSharding, ShardOptions, even_split
from chute._loader.record import RecordMetadata, philox_generator
from chute._loader.samplers import IndexSampler, SequentialSampler


def _keys(sampler: IndexSampler | SequentialSampler) -> list[int | None]:
    return [metadata.record_key for metadata in sampler]


def test_shuffled_index_sampler_matches_grain() -> None:
    it = iter(IndexSampler(num_records=200, shuffle=True, seed=0))
    assert [next(it).record_key for _ in range(6)] == [134, 133, 10, 136, 149, 69]


def test_index_sampler_shuffles_like_map_dataset() -> None:
    sampler = IndexSampler(num_records=37, shuffle=True, num_epochs=3, seed=9)
    assert _keys(sampler) == list(chute.MapDataset.range(37).shuffle(seed=9).repeat(3))


def test_sequential_sampler_matches_grain() -> None:
    assert list(SequentialSampler(num_records=4)) == [
        RecordMetadata(index=i, record_key=i, rng=None) for i in range(4)
    ]


def test_sharded_positions_are_global_and_strided() -> None:
    # Position i belongs to shard i % 3 and is its (i // 3)-th read.
    sampler = IndexSampler(10, ShardOptions(1, 3), shuffle=True, num_epochs=2, seed=5)
    assert _keys(sampler) == [5, 5, 5, 4, 4, 4, 6, 6, 6, 6, 6, 6, 5, 5, 5, 4, 4, 4, 6, 6]
    dropped = IndexSampler(10, ShardOptions(2, 3, True), shuffle=True, num_epochs=2, seed=5)
    assert _keys(dropped) == [7, 7, 7, 6, 6, 6, 8, 8, 8, 8, 8, 8, 7, 7, 7, 6, 6, 6]
    plain = IndexSampler(7, ShardOptions(0, 2), num_epochs=2)
    assert _keys(plain) == [0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2]


def test_large_sharded_shuffle_matches_grain() -> None:
    sampler = IndexSampler(1000, ShardOptions(3, 4), shuffle=True, seed=42)
    first = [sampler[i].record_key for i in range(3, 3 + 4 * 8, 4)]
    assert first == [966, 981, 999, 815, 838, 891, 991, 987]
    second_epoch = [sampler[i].record_key for i in range(3 + 4 * 250, 3 + 4 * 258, 4)]
    assert second_epoch == [911, 874, 788, 963, 945, 954, 826, 878]
    draws = [int(sampler[i].rng.integers(0, 1000)) for i in range(3, 3 + 4 * 5, 4)]  # type: ignore[union-attr]
    assert draws == [861, 640, 680, 378, 118]


def test_epoch_seed_wraps_at_2_to_the_32() -> None:
    sampler = IndexSampler(10, shuffle=True, num_epochs=3, seed=2**32 - 2)
    assert _keys(sampler)[10:30] == [2, 9, 5, 3, 0, 4, 6, 8, 7, 1, 0, 4, 6, 7, 8, 3, 1, 9, 5, 2]


def test_rng_is_philox_keyed_by_seed_plus_position() -> None:
    rng = IndexSampler(10, seed=7)[3].rng
    assert rng is not None
    assert rng.bit_generator.state["state"]["key"].tolist() == [10, 0]
    assert rng.integers(0, 1000, 3).tolist() == [500, 797, 157]
    draws = [int(m.rng.integers(0, 100)) for m in SequentialSampler(10, seed=3)]  # type: ignore[union-attr]
    assert draws == [86, 31, 20, 20, 16, 31, 80, 50, 85, 15]
    assert all(m.rng is None for m in SequentialSampler(3))


def test_lengths() -> None:
    assert len(IndexSampler(10)) == sys.maxsize
    assert len(IndexSampler(10, ShardOptions(0, 3), num_epochs=2)) == 20
    assert len(IndexSampler(10, ShardOptions(2, 3, True), num_epochs=2)) == 18
    assert len(SequentialSampler(10, ShardOptions(1, 4))) == 10
    assert len(SequentialSampler(10, ShardOptions(1, 4, True))) == 8


def test_sequential_sampler_with_drop_remainder_stops_early() -> None:
    sampler = SequentialSampler(7, ShardOptions(0, 2, True), seed=1)
    assert _keys(sampler) == [0, 1, 2, 3, 4, 5]
    assert [int(m.rng.integers(0, 1000)) for m in sampler] == [458, 457, 862, 317, 206, 208]  # type: ignore[union-attr]


def test_iteration_ends_after_the_last_epoch() -> None:
    sampler = IndexSampler(3, num_epochs=2)
    assert [m.index for m in sampler] == list(range(6))
    assert _keys(sampler) == [0, 1, 2, 0, 1, 2]


def test_infinite_sampler_keeps_going() -> None:
    sampler = IndexSampler(3, shuffle=True, seed=1)
    it = iter(sampler)
    keys = np.array([next(it).record_key for _ in range(3000)])
    assert (np.sort(keys.reshape(-1, 3), axis=1) == [0, 1, 2]).all()
    assert sampler[10**12].record_key in (0, 1, 2)


@pytest.mark.parametrize("index", [-1, 20, 21])
def test_positions_out_of_range_raise_index_error(index: int) -> None:
    sampler = IndexSampler(10, num_epochs=2)
    with pytest.raises(IndexError, match=r"out of range \[0, 20\)"):
        sampler[index]
    with pytest.raises(IndexError, match=r"out of range \[0, 20\)"):
        sampler._record_keys(np.array([0, index]))


def test_positions_must_be_ints() -> None:
    with pytest.raises(TypeError, match="indices must be ints"):
        SequentialSampler(4)[1.0]  # type: ignore[index]
    assert SequentialSampler(4)[np.int64(2)].record_key == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"shuffle": True}, ValueError, "shuffle=True needs a seed"),
        ({"num_epochs": 0}, ValueError, "num_epochs must be >= 1"),
        ({"num_epochs": 1.5}, TypeError, "num_epochs must be an int"),
        ({"num_records": 0}, ValueError, "num_records must be >= 1"),
        ({"num_records": 10.0}, TypeError, "num_records must be an int"),
        ({"seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
        ({"seed": 2**32}, ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
        ({"shuffle": 1, "seed": 1}, TypeError, "shuffle must be a bool"),
        ({"shard_options": None}, TypeError, "shard_options must be a ShardOptions"),
        ({"shard_options": ShardOptions(15, 20)}, ValueError, "shard 15 of 20 would get no"),
    ],
)
def test_index_sampler_rejects_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        IndexSampler(**{"num_records": 10, **kwargs})


def test_sequential_sampler_rejects_empty_shards() -> None:
    with pytest.raises(ValueError, match="would get no records"):
        SequentialSampler(10, ShardOptions(0, 20, drop_remainder=True))


def test_reprs_name_every_argument() -> None:
    assert repr(IndexSampler(num_records=200, shuffle=True, seed=0)) == (
        "IndexSampler(num_records=200, shard_options=NoSharding(shard_index=0, shard_count=1, "
        "drop_remainder=False), shuffle=True, num_epochs=None, seed=0)"
    )
    # Grain leaves the seed out of SequentialSampler's repr; chute names it.
    assert repr(SequentialSampler(4, ShardOptions(1, 2), seed=3)) == (
        "SequentialSampler(num_records=4, shard_options=ShardOptions(shard_index=1, "
        "shard_count=2, drop_remainder=False), seed=3)"
    )


def test_defaults_are_no_sharding() -> None:
    assert IndexSampler(5)._shard_options == NoSharding()
    assert SequentialSampler(5)._shard_options == NoSharding()


_SAMPLER_ARGS = st.tuples(
    st.integers(1, 60),  # num_records
    st.integers(1, 5),  # shard_count
    st.data(),
    st.booleans(),  # drop_remainder
    st.sampled_from([None, 0, 12345]),  # seed
)


def _build(args: tuple, shuffle: bool) -> tuple[IndexSampler, ShardOptions]:
    n, count, data, drop, seed = args
    index = data.draw(st.integers(0, count - 1))
    options = ShardOptions(index, count, drop)
    start, stop = even_split(n, options)
    if stop == start:
        options = ShardOptions(0, 1)
    seed = 1 if shuffle and seed is None else seed
    return IndexSampler(n, options, shuffle=shuffle, num_epochs=3, seed=seed), options


@settings(max_examples=100, deadline=None)
@given(args=_SAMPLER_ARGS)
def test_each_epoch_is_a_permutation_of_the_shard(args: tuple) -> None:
    sampler, options = _build(args, shuffle=True)
    start, stop = even_split(sampler._num_records, options)
    size, count = stop - start, options.shard_count
    positions = np.arange(options.shard_index, len(sampler), count)[: 3 * size]
    keys = sampler._record_keys(positions)
    for epoch in range(len(keys) // size):
        assert sorted(keys[epoch * size : (epoch + 1) * size]) == list(range(start, stop))


@settings(max_examples=100, deadline=None)
@given(args=_SAMPLER_ARGS, shuffle=st.booleans())
def test_vectorised_reads_agree_with_getitem(args: tuple, shuffle: bool) -> None:
    sampler, _ = _build(args, shuffle)
    positions = np.arange(len(sampler))[::-1]
    metadata = sampler._metadata(positions)
    one_by_one = [sampler[int(i)] for i in positions]
    assert [(m.index, m.record_key) for m in metadata] == [
        (m.index, m.record_key) for m in one_by_one
    ]
    assert sampler._record_keys(positions).tolist() == [m.record_key for m in metadata]
    assert all(type(m.index) is int and type(m.record_key) is int for m in metadata)
    draws = [None if m.rng is None else int(m.rng.integers(1 << 30)) for m in metadata]
    again = [None if m.rng is None else int(m.rng.integers(1 << 30)) for m in one_by_one]
    assert draws == again


def test_sequential_keys_are_positions() -> None:
    sampler = SequentialSampler(9, ShardOptions(1, 2))
    assert sampler._record_keys(np.array([8, 1, 3])).tolist() == [8, 1, 3]
    assert sampler._record_keys(np.array([], dtype=np.int64)).tolist() == []


def test_public_module_exports() -> None:
    assert chute.samplers.__all__ == ["IndexSampler", "Sampler", "SequentialSampler"]
    assert chute.samplers.IndexSampler is IndexSampler
    assert chute.IndexSampler is IndexSampler
    assert chute.SequentialSampler is SequentialSampler


@pytest.mark.parametrize("key", [0, 7, 2**32 + 5, 2**63 + 11])
def test_fast_philox_is_philox_keyed_by_key(key: int) -> None:
    fast, plain = philox_generator(key), np.random.Generator(np.random.Philox(key=key))
    assert repr(fast.bit_generator.state) == repr(plain.bit_generator.state)
    assert fast.integers(0, 2**62, 10).tolist() == plain.integers(0, 2**62, 10).tolist()
    assert pickle.loads(pickle.dumps(fast)).random() == fast.random()
    assert [g.random() for g in philox_generator(key).spawn(2)] == [
        g.random() for g in philox_generator(key).spawn(2)
    ]


def test_samplers_survive_pickle() -> None:
    sampler = IndexSampler(50, ShardOptions(1, 3), shuffle=True, num_epochs=2, seed=4)
    restored = pickle.loads(pickle.dumps(sampler))
    assert repr(restored) == repr(sampler)
    assert _keys(restored) == _keys(sampler)
