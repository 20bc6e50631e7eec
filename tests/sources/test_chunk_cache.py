"""ChunkCache: bounded in bytes, least recently used out first, each owner's current chunk kept."""

from __future__ import annotations

from chute._sources.array_record.chunk_cache import ChunkCache, chunk_cost


def chunk(n: int) -> tuple[bytes, list[int]]:
    return (b"x" * n, [0, n])


def test_least_recently_used_chunks_leave_first_within_the_bound() -> None:
    cost = chunk_cost(chunk(100))
    cache = ChunkCache(3 * cost)
    cache.store("a", {0: chunk(100), 1: chunk(100), 2: chunk(100)}, current=None)
    assert sorted(cache.find("a", [0])) == [0]  # 0 is now the most recently used
    cache.store("b", {0: chunk(100)}, current=None)
    assert cache.nbytes == 3 * cost
    assert sorted(cache.find("a", [0, 1, 2])) == [0, 2] and sorted(cache.find("b", [0])) == [0]


def test_each_owners_current_chunk_stays_even_above_the_bound() -> None:
    cache = ChunkCache(1000)
    cache.store("a", {0: chunk(5000)}, current=0)
    cache.store("b", {7: chunk(5000), 8: chunk(5000)}, current=8)
    assert sorted(cache.find("a", [0])) == [0] and sorted(cache.find("b", [7, 8])) == [8]
    cache.store("a", {1: chunk(10)}, current=1)  # 0 is current no more: it goes
    assert sorted(cache.find("a", [0, 1])) == [1]
    cache.release("b")  # b reads no more: its chunk goes too
    assert not cache.find("b", [8]) and cache.nbytes == chunk_cost(chunk(10))


def test_a_bound_of_zero_keeps_nothing() -> None:
    cache = ChunkCache(0)
    cache.store("a", {0: chunk(10)}, current=0)
    assert not cache.find("a", [0]) and cache.nbytes == 0
