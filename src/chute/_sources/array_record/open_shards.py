"""``OpenShards``: the shard readers open in one process, the least recently used closing first.

A data set of thousands of shards keeps only a few readers open.  A read pins the
reader of each shard it reads until it is done, so no reader closes under a read; past
the limit, the least recently used readers that no read holds close.  The readers'
requests retried so far stay counted when they close (``retries``).
"""

from __future__ import annotations

import collections
import threading
from typing import Any

__all__ = ["OpenShards", "close_reader"]


def close_reader(reader: Any) -> None:
    """Closes a shard's reader: a ``RangedArrayRecordReader``'s source, or a copy's reader
    (``CachedShardReader``)."""
    if hasattr(reader, "close"):
        reader.close()
    else:
        reader._source.close()


def _retries(reader: Any) -> int:
    """Requests a shard's reader retried so far (a cached copy's: none)."""
    return int(getattr(reader, "retries", 0) or 0)


class OpenShards:
    """The open readers of shards ``0, 1, ...``, at most ``limit`` beyond those pinned.

    Thread-safe; one per process (the owner makes another in a forked child).

    Args:
        limit: How many readers stay open once no read holds them.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._readers: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._pins: collections.Counter[int] = collections.Counter()  # reads under way
        self._retiring: dict[int, list[Any]] = {}  # replaced readers that reads still hold
        self._closed_retries = 0  # of the readers' sources closed so far
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._readers)

    def pin(self, k: int) -> Any:
        """Shard ``k``'s reader, pinned open until ``release``; None where it is not open."""
        with self._lock:
            reader = self._readers.get(k)
            if reader is not None:
                self._readers.move_to_end(k)
                self._pins[k] += 1
            return reader

    def add(self, k: int, reader: Any) -> Any:
        """Keeps ``reader`` open as shard ``k``'s, pinned until ``release``; where another
        thread opened shard ``k`` meanwhile, closes ``reader``'s source and returns that one."""
        with self._lock:
            if k in self._readers:  # another thread opened it meanwhile: use that one
                close_reader(reader)
                reader = self._readers[k]
                self._readers.move_to_end(k)
            else:
                self._readers[k] = reader
            self._pins[k] += 1
            self._close_unused()
        return reader

    def release(self, ks: list[int]) -> None:
        """Shards ``ks``' readers are no longer read (``pin`` or ``add`` pinned them)."""
        done: list[Any] = []
        with self._lock:
            for k in ks:
                self._pins[k] -= 1
                if not self._pins[k]:
                    del self._pins[k]
                    done += self._retiring.pop(k, [])
            self._close_unused()
        for reader in done:  # replaced while read: closed once no read holds it
            close_reader(reader)

    def replace(self, k: int, reader: Any) -> None:
        """Makes ``reader`` shard ``k``'s from now on; the reader it replaces closes once
        the reads that hold it are done (at once where none does)."""
        with self._lock:
            old = self._readers.get(k)
            self._readers[k] = reader
            self._readers.move_to_end(k)
            if old is not None and self._pins[k]:
                self._retiring.setdefault(k, []).append(old)
                old = None
            self._close_unused()
        if old is not None:
            self._closed_retries += _retries(old)
            close_reader(old)

    def _close_unused(self) -> None:
        """Closes the least recently used readers that no read holds, down to the limit
        (called with the lock held)."""
        excess = len(self._readers) - self._limit
        for k in [k for k in self._readers if k not in self._pins][: max(0, excess)]:
            old = self._readers.pop(k)
            self._closed_retries += _retries(old)
            close_reader(old)
            old.release_cache()  # its chunks stay cached while they fit

    def not_open(self, ks: list[int]) -> list[int]:
        """Those of shards ``ks`` whose reader is not open."""
        with self._lock:
            return [k for k in ks if k not in self._readers]

    def retries(self) -> int:
        """Requests retried by the readers' sources, open or closed, so far."""
        with self._lock:
            open_now = sum(_retries(r) for r in self._readers.values())
        return self._closed_retries + open_now

    def take_all(self) -> list[Any]:
        """Every open reader, forgotten here (their retries stay counted); the caller closes
        their sources where they are this process's."""
        with self._lock:
            readers, self._readers = list(self._readers.values()), collections.OrderedDict()
            readers += [r for old in self._retiring.values() for r in old]
            self._retiring = {}
            self._closed_retries += sum(_retries(r) for r in readers)
        return readers
