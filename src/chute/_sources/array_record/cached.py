"""``CachedShardReader``: a shard's whole local copy (``ShardCache``), read as a local file.

Once a shard in a bucket is in the cache, its records are read by array_record's own
reader, as ``ArrayRecordDataSource`` reads local files (a few microseconds a record),
instead of by ranged requests.  The reader holds the copy, so no process evicts it
while it is open.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chute._core import metrics
from chute._remote.shard_cache import CachedCopy
from chute._sources.array_record.files import open_reader, options_string

__all__ = ["CachedShardReader"]


class CachedShardReader:
    """The records of ``url``'s copy ``copy``, by position in the shard.

    Has what ``OpenShards`` asks of a shard's reader: ``read``, ``retries``, ``close``
    and ``release_cache``.
    """

    retries = 0  # a local copy makes no requests

    def __init__(self, copy: CachedCopy, url: str) -> None:
        self._copy, self._url = copy, url
        try:
            self._reader = open_reader(copy.path, options_string(None))
        except BaseException:
            copy.close()
            raise

    def read(self, positions: Any) -> list[bytes]:
        """The records at ``positions`` (ints), in that order."""
        read = self._reader.read
        at = positions.tolist() if isinstance(positions, np.ndarray) else list(positions)
        try:
            records = [read(p, p + 1)[0] for p in at]
        except RuntimeError as exc:  # array_record's own checks failed on the copy
            raise ValueError(
                f"ArrayRecordDataSource: the cached copy {self._copy.path!r} of {self._url} "
                f"cannot be read: {exc}. Delete it (or the cache directory) to fetch it again."
            ) from exc
        metrics.count("cache_bytes_read", sum(map(len, records)))
        metrics.count("cache_hits")
        return records

    def release_cache(self) -> None:
        """Nothing to let go of: the copy's pages are the kernel's to keep."""

    def close(self) -> None:
        """Closes the file; the copy may then be evicted."""
        self._reader.close()
        self._copy.close()

    def __repr__(self) -> str:
        return f"CachedShardReader({self._url!r}, copy={self._copy.path!r})"
