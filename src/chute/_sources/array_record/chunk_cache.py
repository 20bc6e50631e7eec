"""``ChunkCache``: decoded ArrayRecord chunks, bounded in bytes, shared by a source's files.

A source that reads many shards (``IndexedArrayRecordDataSource``) keeps one cache per
process for all of them, so the bound is the source's, not a slice of it per shard.
Entries are ``(owner, chunk)``: ``owner`` tells the files apart.  The least recently
used chunks go first when the bound is passed, except each owner's *current* chunk,
the one its last read ended in, which stays even when it alone exceeds the bound: a
file written with a large ``group_size`` has chunks of megabytes, and reading it in
order, a few records at a time, would otherwise fetch and decode each chunk once per
read instead of once.  A bound of 0 keeps nothing.

>>> cache = ChunkCache(100)
>>> cache.store("a", {0: (b"x" * 400, [0, 400])}, current=0)  # over the bound: kept
>>> sorted(cache.find("a", [0, 1]))
[0]
>>> cache.store("a", {1: (b"y" * 10, [0, 10])}, current=1)  # chunk 0 is current no more
>>> sorted(cache.find("a", [0, 1]))
[1]
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable, Iterable

__all__ = ["Chunk", "ChunkCache", "chunk_cost"]

Chunk = tuple[bytes, list[int]]  # a chunk's record values and its record offsets
_ENTRY_OVERHEAD = 200  # bytes counted per cached chunk beyond its records


def chunk_cost(chunk: Chunk) -> int:
    """The bytes a decoded chunk is counted as: its values and its offsets."""
    return len(chunk[0]) + 36 * len(chunk[1]) + _ENTRY_OVERHEAD


class ChunkCache:
    """Decoded chunks of one or more files, least recently used out first, thread-safe.

    Args:
      max_bytes: the bound on the chunks kept, beyond each owner's current chunk.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[tuple[Hashable, int], tuple[Chunk, int]] = (
            collections.OrderedDict()
        )
        self._current: dict[Hashable, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of the chunks held now."""
        return self._bytes

    def find(self, owner: Hashable, chunks: Iterable[int]) -> dict[int, Chunk]:
        """The chunks of ``owner`` that the cache holds, among ``chunks``."""
        found = {}
        with self._lock:
            for c in chunks:
                hit = self._entries.get((owner, c))
                if hit is not None:
                    self._entries.move_to_end((owner, c))
                    found[c] = hit[0]
        return found

    def store(self, owner: Hashable, fetched: dict[int, Chunk], current: int | None) -> None:
        """Keeps ``owner``'s ``fetched`` chunks and makes ``current`` its current chunk
        (``None``: it has none), then evicts down to the bound."""
        if self.max_bytes <= 0:
            return
        with self._lock:
            for c, chunk in fetched.items():
                cost = chunk_cost(chunk)
                if (cost > self.max_bytes and c != current) or (owner, c) in self._entries:
                    continue
                self._entries[owner, c] = (chunk, cost)
                self._bytes += cost
            if current is None:
                self._current.pop(owner, None)
            else:
                self._current[owner] = current
            self._evict()

    def release(self, owner: Hashable) -> None:
        """``owner`` reads no more for now: its current chunk may go like any other."""
        with self._lock:
            self._current.pop(owner, None)
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._current.clear()
            self._bytes = 0

    def _evict(self) -> None:
        """Drops the least recently used chunks that are no owner's current one until the
        rest fit the bound (called with the lock held)."""
        victims, freed = [], 0
        for key, (_, cost) in self._entries.items():  # oldest first
            if self._bytes - freed <= self.max_bytes:
                break
            if self._current.get(key[0]) != key[1]:
                victims.append(key)
                freed += cost
        for key in victims:
            del self._entries[key]
        self._bytes -= freed
