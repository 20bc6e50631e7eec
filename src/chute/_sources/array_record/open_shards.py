"""``OpenShards``: the shard readers open in one process, the least recently used closing first.

A data set of thousands of shards keeps only a few readers open.  A read pins the
reader of each shard it reads until it is done, so no reader closes under a read; past
the limit, the least recently used readers that no read holds close.  The readers'
requests retried so far stay counted when they close (``retries``).
"""

from __future__ import annotations

import collections
import threading

from chute._sources.array_record.ranged import RangedArrayRecordReader

__all__ = ["OpenShards"]


class OpenShards:
    """The open readers of shards ``0, 1, ...``, at most ``limit`` beyond those pinned.

    Thread-safe; one per process (the owner makes another in a forked child).

    Args:
        limit: How many readers stay open once no read holds them.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._readers: collections.OrderedDict[int, RangedArrayRecordReader] = (
            collections.OrderedDict()
        )
        self._pins: collections.Counter[int] = collections.Counter()  # reads under way
        self._closed_retries = 0  # of the readers' sources closed so far
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._readers)

    def pin(self, k: int) -> RangedArrayRecordReader | None:
        """Shard ``k``'s reader, pinned open until ``release``; None where it is not open."""
        with self._lock:
            reader = self._readers.get(k)
            if reader is not None:
                self._readers.move_to_end(k)
                self._pins[k] += 1
            return reader

    def add(self, k: int, reader: RangedArrayRecordReader) -> RangedArrayRecordReader:
        """Keeps ``reader`` open as shard ``k``'s, pinned until ``release``; where another
        thread opened shard ``k`` meanwhile, closes ``reader``'s source and returns that one."""
        with self._lock:
            if k in self._readers:  # another thread opened it meanwhile: use that one
                reader._source.close()  # type: ignore[attr-defined]
                reader = self._readers[k]
                self._readers.move_to_end(k)
            else:
                self._readers[k] = reader
            self._pins[k] += 1
            self._close_unused()
        return reader

    def release(self, ks: list[int]) -> None:
        """Shards ``ks``' readers are no longer read (``pin`` or ``add`` pinned them)."""
        with self._lock:
            for k in ks:
                self._pins[k] -= 1
                if not self._pins[k]:
                    del self._pins[k]
            self._close_unused()

    def _close_unused(self) -> None:
        """Closes the least recently used readers that no read holds, down to the limit
        (called with the lock held)."""
        excess = len(self._readers) - self._limit
        for k in [k for k in self._readers if k not in self._pins][: max(0, excess)]:
            old = self._readers.pop(k)
            self._closed_retries += old._source.retries  # type: ignore[attr-defined]
            old._source.close()  # type: ignore[attr-defined]
            old.release_cache()  # its chunks stay cached while they fit

    def not_open(self, ks: list[int]) -> list[int]:
        """Those of shards ``ks`` whose reader is not open."""
        with self._lock:
            return [k for k in ks if k not in self._readers]

    def retries(self) -> int:
        """Requests retried by the readers' sources, open or closed, so far."""
        with self._lock:
            open_now = sum(r._source.retries for r in self._readers.values())  # type: ignore[attr-defined]
        return self._closed_retries + open_now

    def take_all(self) -> list[RangedArrayRecordReader]:
        """Every open reader, forgotten here (their retries stay counted); the caller closes
        their sources where they are this process's."""
        with self._lock:
            readers, self._readers = list(self._readers.values()), collections.OrderedDict()
            self._closed_retries += sum(r._source.retries for r in readers)  # type: ignore[attr-defined]
        return readers
