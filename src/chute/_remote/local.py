"""``LocalSource``: the ranged byte source over a local file, read with ``os.pread``."""

from __future__ import annotations

import os

from chute._core.errors import SourceChangedError


class LocalSource:
    """Ranged reads of a local file; its version is its size and modification time.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     _ = f.write(b"hello world"); f.flush()
        ...     with LocalSource(f.name) as source:
        ...         source.read_ranges([(6, 5), (0, 5)])
        [b'world', b'hello']
    """

    retries = 0

    def __init__(self, path: str, url: str | None = None) -> None:
        self.url = url or path
        self._fd: int | None = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        stat = os.fstat(self._fd)
        self._size = stat.st_size
        self.version = f"{stat.st_mtime_ns}-{stat.st_size}"

    def size(self) -> int:
        return self._size

    def read_all(self) -> bytes:
        return self.read_ranges([(0, self._size)])[0]

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        fd = self._fd
        if fd is None:
            raise ValueError(f"the source for {self.url} was closed.")
        stat = os.fstat(fd)
        if f"{stat.st_mtime_ns}-{stat.st_size}" != self.version:
            raise SourceChangedError(
                f"{self.url} changed while it was being read (it was version {self.version} "
                "when opened). Open it again to read the new version."
            )
        out = []
        for offset, length in ranges:
            if offset < 0 or length < 0 or offset + length > self._size:
                raise ValueError(
                    f"range (offset={offset}, length={length}) is outside {self.url} "
                    f"({self._size} bytes)."
                )
            data = os.pread(fd, length, offset)
            while len(data) < length:  # pread may return less than asked
                more = os.pread(fd, length - len(data), offset + len(data))
                if not more:
                    raise OSError(f"{self.url} ended at byte {offset + len(data)}")
                data += more
            out.append(data)
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LocalSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalSource({self.url!r}, size={self._size})"
