"""``RangedFile``: a read-only, seekable binary file over a ranged byte source.

Readers that take a file object (pyarrow's ``ParquetFile``) read an object in a bucket
through it, so their bytes come through chute's transport: the same retries, version
checks and error messages as every other remote read.

How reads become requests:

* **Read-ahead.** A read that the buffers cannot answer becomes one ranged read of at
  least ``read_ahead`` bytes (1 MiB; less at the end of the object), kept as the
  read-ahead block, so the many small reads a format reader makes close together (a
  Parquet footer and its length, a column chunk's pages) cost one request between them.
  A read of ``read_ahead`` bytes or more is fetched as asked and not kept.
* **Prefetch.** ``prefetch(ranges)`` fetches ranges the caller knows it will read (a
  Parquet row group's column chunks) in one ``read_ranges`` call, which a remote source
  serves concurrently; ranges at most 64 KiB apart are fetched as one.  Reads inside them
  are answered from memory until ``forget()`` or the next ``prefetch``.

Memory stays bounded by one read-ahead block plus the ranges prefetched last.

>>> import tempfile
>>> from chute._remote.ranged_source import LocalRanges
>>> with tempfile.NamedTemporaryFile() as f:
...     _ = f.write(b"0123456789"); f.flush()
...     file = RangedFile(LocalRanges(f.name), read_ahead=4)
...     file.seek(-3, 2), file.read(), file.seek(2), file.read(2), file.read(1), file.reads
(7, b'789', 2, b'23', b'4', 2)
"""

from __future__ import annotations

import io
import os
import threading
from typing import Any

from chute._core.validate import check_int
from chute._remote.ranged_object import merge_ranges

__all__ = ["RangedFile"]

_WHAT = "RangedFile"
_PREFETCH_GAP = 64 << 10  # prefetched ranges this close are fetched and kept as one


class RangedFile(io.RawIOBase):
    """A read-only, seekable binary file whose bytes come from ``source.read_ranges``.

    Args:
        source: A ranged byte source (``chute._remote.open_source(url)``, ``LocalRanges``):
            ``size()`` and ``read_ranges([(offset, length), ...])``.
        read_ahead: The fewest bytes one read that misses the buffers fetches.
        name: What errors and ``repr`` call the file (the source's URL by default).

    Attributes:
        reads: How many ``read_ranges`` calls the file made (each one or more requests).
    """

    def __init__(self, source: Any, *, read_ahead: int = 1 << 20, name: str | None = None) -> None:
        super().__init__()
        if not (hasattr(source, "size") and hasattr(source, "read_ranges")):
            raise TypeError(
                f"{_WHAT}: source must have size() and read_ranges(ranges) (got {source!r} "
                f"that is a {type(source).__name__}); open one with chute._remote.open_source."
            )
        self._read_ahead = check_int(read_ahead, f"{_WHAT}: read_ahead", minimum=1)
        self._source = source
        self.name = name if name is not None else str(getattr(source, "url", source))
        self._size = int(source.size())
        self._pos = 0
        self._ahead: tuple[int, bytes] = (0, b"")
        self._blocks: list[tuple[int, bytes]] = []
        self._lock = threading.Lock()
        self.reads = 0

    def size(self) -> int:
        """The object's length in bytes, as it was when opened."""
        return self._size

    @property
    def version(self) -> str | None:
        """The object's version (ETag, generation) when opened, as its source took it."""
        version = getattr(self._source, "version", None)
        return None if version is None else str(version)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._check_open()
        bases = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}
        if whence not in bases:
            raise ValueError(f"{_WHAT}.seek: whence must be 0, 1 or 2 (got {whence!r}).")
        position = bases[whence] + int(offset)
        if position < 0:
            raise ValueError(
                f"{_WHAT}.seek: position {position} is before the start of {self.name}."
            )
        self._pos = position
        return position

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the current position (all the rest when ``-1``)."""
        self._check_open()
        with self._lock:
            start = self._pos
            end = self._size if size is None or size < 0 else min(self._size, start + size)
            if end <= start:
                return b""
            data = self._cached(start, end)
            if data is None:
                data = self._fetch(start, end)
            self._pos = end
            return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(view.nbytes)
        view[: len(data)] = data
        return len(data)

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Fetches ``(offset, length)`` ranges now, in one call, for the reads to come.

        Ranges at most ``_PREFETCH_GAP`` bytes apart are fetched and kept as one, so a
        read across neighbouring ranges (pyarrow reads a row group's column chunks in
        one go) is answered too.
        """
        self._check_open()
        spans = [
            (int(o), min(int(o) + int(n), self._size))
            for o, n in ranges
            if 0 <= o < self._size and n > 0
        ]
        merged = merge_ranges(spans, _PREFETCH_GAP)
        wanted = [(start, end - start) for start, end, _ in merged]
        with self._lock:
            self._blocks = []  # the old ones go first: memory holds one set at a time
            if wanted:
                self.reads += 1
                data = self._source.read_ranges(wanted)
                self._blocks = [(o, bytes(d)) for (o, _), d in zip(wanted, data)]

    def forget(self) -> None:
        """Drops the prefetched ranges and the read-ahead block."""
        with self._lock:
            self._blocks, self._ahead = [], (0, b"")

    def close(self) -> None:
        """Drops the buffers; the source stays open (it holds no handle worth closing)."""
        self._blocks, self._ahead = [], (0, b"")
        super().close()

    def __repr__(self) -> str:
        return f"{_WHAT}({self.name!r}, size={self._size})"

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"{_WHAT}: I/O on {self.name}, which was closed.")

    def _cached(self, start: int, end: int) -> bytes | None:
        for base, data in (self._ahead, *self._blocks):
            if base <= start and end <= base + len(data):
                return data[start - base : end - base]
        return None

    def _fetch(self, start: int, end: int) -> bytes:
        if end - start >= self._read_ahead:
            self.reads += 1
            return bytes(self._source.read_ranges([(start, end - start)])[0])
        stop = min(self._size, start + self._read_ahead)
        self.reads += 1
        block = bytes(self._source.read_ranges([(start, stop - start)])[0])
        self._ahead = (start, block)
        return block[: end - start]
