"""RngPool: per-(seed, op_seed, index) generators; numbers observed from Grain 0.2.18."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

from chute import MapDataset
from chute._core.rng_pool import RngPool


def test_numbers_match_grain() -> None:
    pool = RngPool(42)
    assert pool.acquire_rng(0).integers(0, 1000, 5).tolist() == [925, 86, 140, 141, 407]
    assert pool.acquire_rng(5).integers(0, 1000, 5).tolist() == [219, 882, 938, 168, 623]
    assert pool.acquire_rng(5, op_seed=3).integers(0, 1000, 5).tolist() == [254, 399, 860, 920, 220]
    assert [int(RngPool(41).acquire_rng(i).integers(0, 1000)) for i in range(3)] == [821, 314, 461]
    assert int(RngPool(2**64).acquire_rng(0).integers(0, 1000)) == 199


def test_a_released_generator_is_reused_and_restarted() -> None:
    pool = RngPool(123)
    rng = pool.acquire_rng(10**12, op_seed=7)
    first = rng.integers(0, 2**32, 3, dtype=np.uint32).tolist()  # leaves a half-used word
    pool.release_rng(rng)
    again = pool.acquire_rng(10**12, op_seed=7)
    assert again is rng
    # Observed from Grain 0.2.18: the stream restarts from its beginning.
    assert first == [1171783789, 2988926657, 1267258090]
    assert again.integers(0, 2**32, 2, dtype=np.uint32).tolist() == first[:2]


def test_generators_held_at_once_are_distinct() -> None:
    pool = RngPool(0)
    a, b = pool.acquire_rng(1), pool.acquire_rng(1)
    assert a is not b
    assert a.random() == b.random()


def test_index_stream_is_random_map_of_the_same_seed() -> None:
    ds = MapDataset.range(4).random_map(lambda x, rng: int(rng.integers(0, 10**6)), seed=9)
    pool = RngPool(9)
    assert list(ds) == [int(pool.acquire_rng(i).integers(0, 10**6)) for i in range(4)]


def test_pool_pickles_and_is_thread_safe() -> None:
    pool = pickle.loads(pickle.dumps(RngPool(42)))
    assert pool.acquire_rng(0).integers(0, 1000, 5).tolist() == [925, 86, 140, 141, 407]
    results: list[float] = []

    def work() -> None:
        for i in range(200):
            rng = pool.acquire_rng(i)
            results.append(rng.random())
            pool.release_rng(rng)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = [RngPool(42).acquire_rng(i).random() for i in range(200)]
    assert sorted(results) == sorted(expected * 4)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="seed"):
        RngPool(-1)
    with pytest.raises(TypeError, match="seed"):
        RngPool(None)  # type: ignore[arg-type]  # Grain draws a random seed; chute wants one
    with pytest.raises(TypeError, match="seed"):
        RngPool(1.5)  # type: ignore[arg-type]
    pool = RngPool(1)
    with pytest.raises(ValueError, match="index"):
        pool.acquire_rng(-1)
    with pytest.raises(ValueError, match="below 2\\*\\*64"):
        pool.acquire_rng(2**64)
    with pytest.raises(TypeError, match="op_seed"):
        pool.acquire_rng(0, op_seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="acquire_rng"):
        pool.release_rng("x")  # type: ignore[arg-type]
