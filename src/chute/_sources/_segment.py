"""The shared-memory segment behind ``SharedMemoryDataSource``.

Layout (native uint64 integers)::

    header   magic, n (elements), m (out-of-band buffers), total size in bytes
    starts   n + 1 offsets: element i is pickled in bytes [starts[i], starts[i + 1])
    firsts   n + 1 counts: its buffers are entries firsts[i] .. firsts[i + 1] - 1 of
    buffers  m (offset, length) pairs
    data     the pickles back to back, then the buffers, each 64-byte aligned

Every process maps the segment read-only; only the creating process registers
it with ``multiprocessing``'s resource tracker (see ``shared_memory.py``).
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import struct
from collections.abc import Iterable, Mapping
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from chute._core.fork import ForkCheck
from chute._execution._ring import _unlink_name

try:
    import _posixshmem
except ImportError:  # pragma: no cover - Windows, where no resource tracker runs
    _posixshmem = None


_HEADER = struct.Struct("=8sQQQ")
_MAGIC = b"chuteSM1"
_ALIGN = 64
_WHAT = "SharedMemoryDataSource"


class _Segment:
    """This process's read-only mapping of a segment; the owner's also unlinks it."""

    def __init__(self, name: str, owner: SharedMemory | None = None) -> None:
        self.name, self._owner, self._made = name, owner, ForkCheck()
        self._views: list[memoryview] = []
        self._map: mmap.mmap | SharedMemory | None = None
        try:
            self._map = _map_readonly(name)
            self._parse(self._map if isinstance(self._map, mmap.mmap) else self._map.buf)
        except (ValueError, struct.error) as exc:
            self.close()
            raise ValueError(
                f"{_WHAT}: shared-memory segment {name!r} was not written by a "
                f"{_WHAT} ({exc}); check the name."
            ) from None
        except BaseException:
            self.close()
            raise

    def _parse(self, mapped: Any) -> None:
        buf = memoryview(mapped).toreadonly()
        magic, n, m, size = _HEADER.unpack_from(buf)
        if magic != _MAGIC or size > buf.nbytes:
            raise ValueError("unknown header")
        self.length, self.size, self._buf = n, size, buf
        a = _HEADER.size
        b, c = a + 8 * (n + 1), a + 16 * (n + 1)
        self._starts, self._firsts = buf[a:b].cast("Q"), buf[b:c].cast("Q")
        self._table = buf[c : c + 16 * m].cast("Q")
        self._views = [self._starts, self._firsts, self._table, buf]

    def read(self, i: int) -> Any:
        data = self._buf[self._starts[i] : self._starts[i + 1]]
        first, last = self._firsts[i], self._firsts[i + 1]
        if first == last:
            return pickle.loads(data)
        table, buf = self._table, self._buf
        buffers = [buf[table[2 * k] : table[2 * k] + table[2 * k + 1]] for k in range(first, last)]
        return pickle.loads(data, buffers=buffers)

    def close(self) -> None:
        for view in self._views:
            view.release()
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # arrays read from it still use it: unmapped when they go
                pass
        if self._owner is not None and not self._made.forked():
            self.unlink()  # a forked child never unlinks its parent's segment

    def unlink(self) -> None:
        owner, self._owner = self._owner, None
        if self._made.forked():
            owner = None  # a forked child unlinks as a stranger would
        try:
            if owner is not None:
                owner.unlink()  # also unregisters it from the resource tracker
            else:
                _unlink_name(self.name)
        except FileNotFoundError:
            if owner is not None:  # another process unlinked it: balance our registration
                resource_tracker.unregister("/" + self.name, "shared_memory")


def _map_readonly(name: str) -> mmap.mmap | SharedMemory:
    """Maps a segment read-only without registering it with the resource tracker."""
    if _posixshmem is None:  # pragma: no cover - Windows
        return SharedMemory(name)
    fd = _posixshmem.shm_open("/" + name, os.O_RDONLY, mode=0o600)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _attach(name: str) -> _Segment:
    try:
        return _Segment(name)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{_WHAT}: no shared-memory segment named {name!r}. The source that created it "
            "was closed or garbage-collected (keep it alive while others read), or the "
            "name is wrong."
        ) from None


def _check_elements(elements: Any) -> Iterable[Any]:
    if isinstance(elements, (str, bytes, bytearray, Mapping)) or not isinstance(elements, Iterable):
        raise TypeError(
            f"{_WHAT}: elements must be a sequence of elements such as a list (got a "
            f"{type(elements).__name__}); wrap a single element in a list."
        )
    return elements


def _pickle_all(elements: Iterable[Any]) -> tuple[io.BytesIO, list[int], list[int], list[Any]]:
    """Pickles the elements back to back; contiguous buffers are kept out of band."""
    blob, starts, firsts = io.BytesIO(), [0], [0]
    buffers: list[memoryview] = []

    def keep(buffer: pickle.PickleBuffer) -> bool:
        try:
            buffers.append(buffer.raw())
        except BufferError:  # not contiguous: leave it in the pickle
            return True
        return False

    for i, element in enumerate(elements):
        try:
            blob.write(pickle.dumps(element, protocol=5, buffer_callback=keep))
        except Exception as exc:
            raise TypeError(
                f"{_WHAT}: element {i} (a {type(element).__name__}) cannot be pickled: "
                f"{exc}. Store picklable elements, e.g. convert it to a dict of arrays."
            ) from exc
        starts.append(blob.tell())
        firsts.append(len(buffers))
    return blob, starts, firsts, buffers


def _write_segment(elements: Iterable[Any], name: str | None) -> SharedMemory:
    """Writes the elements into a new segment and returns it, still mapped."""
    blob, starts, firsts, buffers = _pickle_all(elements)
    n, m = len(starts) - 1, len(buffers)
    data = _HEADER.size + 16 * (n + 1 + m)
    offsets, end = [], data + blob.tell()
    for b in buffers:
        end = -(-end // _ALIGN) * _ALIGN
        offsets.append(end)
        end += b.nbytes
    table = np.empty(2 * (n + 1 + m), np.uint64)
    table[: n + 1] = np.asarray(starts, np.uint64) + np.uint64(data)
    table[n + 1 : 2 * n + 2] = firsts
    table[2 * n + 2 :: 2] = offsets
    table[2 * n + 3 :: 2] = [b.nbytes for b in buffers]
    try:
        shm = SharedMemory(name, create=True, size=end)
    except FileExistsError:
        raise FileExistsError(
            f"{_WHAT}: a shared-memory segment named {name!r} already exists; pass another "
            f"name, name=None for a fresh one, or only name={name!r} to attach to it."
        ) from None
    buf: Any = shm.buf
    try:
        _HEADER.pack_into(buf, 0, _MAGIC, n, m, end)
        buf[_HEADER.size : data] = table.view(np.uint8)
        with blob.getbuffer() as view:
            buf[data : data + view.nbytes] = view
        for offset, b in zip(offsets, buffers):
            buf[offset : offset + b.nbytes] = b
    except BaseException:
        shm.close()
        shm.unlink()
        raise
    return shm
