"""The index shuffle: Grain's golden values, true permutations, validation."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute import MapDataset
from chute._core.index_shuffle import _small_table, index_shuffle_array, seed_seq_generate
from chute.experimental import index_shuffle

# (seed, count, first word, last word) printed by C++ std::seed_seq{seed}.generate.
CPP_SEED_SEQ = [
    (0, 2, 2061087650, 2269319357),
    (0, 4, 2963817213, 532167439),
    (0, 700, 2872702342, 3145793638),
    (3, 8, 4017761874, 769410076),
    (42, 70, 1450432674, 153429126),
    (4294967295, 4, 3258260622, 537413182),
    (4294967295, 700, 45671088, 1034566067),
]


@pytest.mark.parametrize(("seed", "count", "first", "last"), CPP_SEED_SEQ)
def test_seed_seq_matches_cpp_standard_library(
    seed: int, count: int, first: int, last: int
) -> None:
    words = seed_seq_generate(seed, count)
    assert (words[0], words[-1]) == (first, last)


def test_golden_values_match_grain() -> None:
    got = [index_shuffle(i, max_index=99999, seed=3, rounds=4) for i in range(5)]
    assert got == [42407, 51356, 40198, 95258, 34627]


def test_vectorised_equals_scalar() -> None:
    indices = np.arange(0, 5000, 7)
    vector = index_shuffle(indices, 4999, 11, 4)
    scalar = [index_shuffle(int(i), 4999, 11, 4) for i in indices]
    assert vector.tolist() == scalar


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 2**16, 2**16 + 1, 2**16 + 2, 2**17 + 1])
def test_is_a_permutation_including_power_of_two_plus_one(n: int) -> None:
    # Grain's block is one bit short for n = 2**k + 1 (k >= 16); chute's is not.
    perm = index_shuffle_array(np.arange(n), n - 1, seed=5)
    assert np.array_equal(np.sort(perm), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1), rounds=st.sampled_from([4, 6, 8]))
def test_every_length_and_seed_gives_a_permutation(n: int, seed: int, rounds: int) -> None:
    perm = index_shuffle_array(np.arange(n), n - 1, seed, rounds)
    assert np.array_equal(np.sort(perm), np.arange(n))


def test_different_seeds_give_different_orders() -> None:
    a = index_shuffle_array(np.arange(100), 99, 1)
    b = index_shuffle_array(np.arange(100), 99, 2)
    assert not np.array_equal(a, b)


def test_zero_max_index_maps_to_zero() -> None:
    assert index_shuffle(0, 0, 1, 4) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"index": 0, "max_index": 10, "seed": 1, "rounds": 3}, "rounds must be even"),
        ({"index": 0, "max_index": 10, "seed": 1, "rounds": 2}, "rounds must be even"),
        ({"index": 0, "max_index": 10, "seed": -1, "rounds": 4}, "seed must be"),
        ({"index": 0, "max_index": 10, "seed": 2**32, "rounds": 4}, "seed must be"),
        ({"index": 11, "max_index": 10, "seed": 1, "rounds": 4}, "index must be in"),
        ({"index": 0, "max_index": -1, "seed": 1, "rounds": 4}, "max_index must be"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        index_shuffle(**kwargs)


def test_a_cached_permutation_table_holds_only_its_own_indices() -> None:
    table = _small_table(1999, 3, 4)
    assert table.base is None  # not a view that keeps the whole 16-bit block alive
    assert table.nbytes == 2000 * 2


def test_thirty_epochs_of_a_reseeded_shuffle_retain_under_a_mebibyte() -> None:
    # Each epoch reseeds the shuffle and caches a table; 16 tables that each held the
    # 512 KiB block retained 7.5 MiB more after epoch 30 than after epoch 1 (in every
    # worker that lived across the epochs).
    size, epochs = 2000, 30
    shuffled = MapDataset.range(size).seed(3).shuffle().repeat(epochs)
    _small_table.cache_clear()
    retained = []
    tracemalloc.start()
    try:
        for epoch in range(epochs):
            shuffled._getitems(list(range(epoch * size, (epoch + 1) * size)))
            retained.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert retained[-1] - retained[0] < 2**20
    assert _small_table.cache_info().currsize == 16
