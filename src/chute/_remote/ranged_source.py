"""``RangedByteSource``: a file read by byte ranges, and ``LocalRanges`` for local files.

Readers of file formats that know where their bytes lie (ArrayRecord's footer
gives every chunk's offset) only need the size of the file and a way to read
several ``(offset, length)`` ranges at once.  Object stores (S3, GCS, HTTP)
serve exactly that, concurrently; ``LocalRanges`` serves it from a local file
with ``os.pread``, so the same reader works on both.

>>> import tempfile, os
>>> with tempfile.TemporaryDirectory() as d:
...     path = os.path.join(d, "f")
...     with open(path, "wb") as f:
...         _ = f.write(b"0123456789")
...     src = LocalRanges(path)
...     src.size(), src.read_ranges([(0, 3), (7, 3)])
(10, [b'012', b'789'])
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol, runtime_checkable

from chute._core.errors import SourceChangedError

__all__ = ["LocalRanges", "RangedByteSource"]


@runtime_checkable
class RangedByteSource(Protocol):
    """An immutable sequence of bytes read by ranges.

    * ``size()`` is the number of bytes.
    * ``read_ranges(ranges)`` returns, for each ``(offset, length)`` pair, the
      bytes at ``[offset, offset + length)``, in the order given.  A range that
      runs past the end returns the bytes up to the end (callers check
      lengths).  Implementations may read the ranges concurrently and retry;
      they raise ``OSError`` for what retries cannot fix.
    * ``str(source)`` names the data (a path or URL) for error messages.
    * Picklable, so that readers built on it can go to worker processes.
    """

    def size(self) -> int: ...

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]: ...


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    """``length`` bytes at ``offset``, fewer at the end of the file; loops on short preads."""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _Handle:
    """An open file descriptor that closes when its last holder lets go of it.

    The ``LocalRanges`` that opened it holds it until ``close()``; each read holds
    it while it reads, so ``close()`` during a read never closes (and frees the
    number of) a descriptor that the read is still using.  ``refs`` is changed only
    under the owner's lock.
    """

    __slots__ = ("fd", "refs")

    def __init__(self, fd: int) -> None:
        self.fd, self.refs = fd, 1

    def release(self) -> None:
        """Drops one hold (call with the owner's lock held); the last one closes the fd."""
        self.refs -= 1
        if self.refs == 0:
            os.close(self.fd)


class LocalRanges:
    """A local file as a ``RangedByteSource``; the file opens lazily in each process.

    Ranges are read one after the other with ``os.pread`` (a local disk gains
    little from concurrency, and the calls release the GIL).  Its ``version``
    is the file's size and modification time when it opened; a read after the
    file changed raises ``SourceChangedError``, as an object store's does.
    ``close()`` while another thread reads lets that read finish on the file it
    began with (the descriptor closes when the read ends); a later read opens
    the file again.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"hello world"); f.flush()
    ...     with LocalRanges(f.name) as source:
    ...         source.read_ranges([(6, 5), (0, 5)])
    [b'world', b'hello']
    """

    retries = 0  # a local read is never retried (the object stores' sources count theirs)

    def __init__(self, path: str | os.PathLike[str], url: str | None = None) -> None:
        self._path = os.fspath(path)
        if not isinstance(self._path, str):
            raise TypeError(f"LocalRanges: path must be a str or os.PathLike (got {path!r}).")
        self.url = url or self._path
        self._handle: _Handle | None = None
        self._size: int | None = None
        self._version = ""
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return self._path

    def _open(self, hold: bool = False) -> tuple[_Handle, int]:
        """The open file and its size (opened now if closed); with ``hold``, held for a
        read until ``_let_go``."""
        with self._lock:
            if self._handle is None or self._size is None:
                fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
                self._handle = _Handle(fd)
                st = os.fstat(fd)
                self._size, self._version = st.st_size, f"{st.st_mtime_ns}-{st.st_size}"
            if hold:
                self._handle.refs += 1
            return self._handle, self._size

    def _let_go(self, handle: _Handle) -> None:
        with self._lock:
            handle.release()

    @property
    def version(self) -> str:
        """The file's modification time and size when it opened."""
        self._open()
        return self._version

    def size(self) -> int:
        return self._open()[1]

    def read_all(self) -> bytes:
        return self.read_ranges([(0, self.size())])[0]

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        handle, size = self._open(hold=True)
        try:
            st = os.fstat(handle.fd)
            if f"{st.st_mtime_ns}-{st.st_size}" != self._version:
                raise SourceChangedError(
                    f"{self.url} changed while it was being read (it was version "
                    f"{self._version} when opened). Open it again to read the new version."
                )
            out = []
            for offset, length in ranges:
                if offset < 0 or length < 0 or offset + length > size:
                    raise ValueError(
                        f"{self}: range (offset={offset}, length={length}) is outside the "
                        f"file ({size} bytes)."
                    )
                out.append(_pread_all(handle.fd, length, offset))
            return out
        finally:
            self._let_go(handle)

    def __enter__(self) -> LocalRanges:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Lets go of the file; it closes now, or when the reads under way end."""
        with self._lock:
            if self._handle is not None:
                handle, self._handle = self._handle, None
                handle.release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self._path, "url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        LocalRanges.__init__(self, state["path"], state.get("url"))

    def __repr__(self) -> str:
        return f"LocalRanges({self._path!r})"

    def __str__(self) -> str:
        return self._path
