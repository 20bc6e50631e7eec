"""The shared-memory segments behind ``RingWriter`` and ``RingReader``.

A ring is a series of *generations*, POSIX shared-memory segments named
``f"{prefix}-{generation}"``.  Each is a 64-byte header of native uint64
words, then ``capacity`` bytes of data::

    word 0   read position: everything before it is consumed (the reader writes it)
    word 1   1 once the reader is closed (the reader writes it)

Positions count bytes since the generation began and never wrap: position
``p`` lives at data offset ``p % capacity``.  The writer alone knows its write
position; the bytes in ``[read position, write position)`` are in flight.

Ownership: the reader creates generation 0 (an empty header), so a writer
can tell whether its reader is alive; the writer creates the others.  Only
the reader registers segments with ``multiprocessing``'s resource tracker,
once each, and it unlinks (and unregisters) them: the ones below the newest
generation it has read from, and on close every generation from the lowest
it still holds up to the first name missing (generations are created in
order, so there are no gaps).  The writer never registers nor unlinks,
except a generation it just made after its reader closed.
"""

from __future__ import annotations

import errno
import mmap
import os
from multiprocessing import resource_tracker

import numpy as np

from chute._sources._segment import _unlink_name

try:
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

HEADER = 64
ALIGN = 64
READ, CLOSED = 0, 1


def segment_name(prefix: str, generation: int) -> str:
    """The name of one generation of a ring."""
    return f"{prefix}-{generation}"


def _shm_open(name: str, flags: int) -> int:
    if _posixshmem is None:  # pragma: no cover - Windows
        raise OSError("chute's ring transport needs POSIX shared memory (Linux or macOS).")
    return int(_posixshmem.shm_open("/" + name, flags, mode=0o600))


def create(name: str, capacity: int) -> mmap.mmap:
    """Creates a segment of ``capacity`` data bytes, mapped read-write and unregistered."""
    fd = _shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR)
    try:
        os.ftruncate(fd, HEADER + capacity)
        if hasattr(os, "posix_fallocate"):
            _allocate(fd, HEADER + capacity)
        return mmap.mmap(fd, HEADER + capacity)
    except BaseException:
        _unlink_name(name)
        raise
    finally:
        os.close(fd)


def _allocate(fd: int, size: int) -> None:
    """Claims the pages now: a full /dev/shm then fails here, not with SIGBUS on write."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OSError(
                errno.ENOSPC,
                f"no room in shared memory for a {size}-byte ring segment; give /dev/shm "
                "more room (e.g. docker run --shm-size=4g) or send smaller elements.",
            ) from None
        # other file systems may not support it: the pages come on first write


def open_existing(name: str) -> mmap.mmap | None:
    """Maps an existing segment read-write, unregistered; None while it is being created.

    Raises:
        FileNotFoundError: No segment has that name.
    """
    fd = _shm_open(name, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        return mmap.mmap(fd, size) if size >= HEADER else None
    finally:
        os.close(fd)


class Segment:
    """One process's mapping of a generation: its header words and its data bytes."""

    __slots__ = ("capacity", "data", "head", "name")

    def __init__(self, name: str, mapped: mmap.mmap) -> None:
        self.name = name
        self.capacity = len(mapped) - HEADER
        self.head = memoryview(mapped)[:HEADER].cast("Q")
        self.data = np.frombuffer(mapped, np.uint8, offset=HEADER)


class WriteRing:
    """The writer's side: hands out space, starting a larger generation when full."""

    def __init__(self, prefix: str, initial_size: int) -> None:
        self.prefix, self.initial_size = prefix, initial_size
        name = segment_name(prefix, 0)
        mapped = open_existing(name)  # made by the reader, so it exists unless the reader closed
        if mapped is None:
            raise FileNotFoundError(errno.ENOENT, "ring segment is incomplete", name)
        self.segment, self.generation, self.position = Segment(name, mapped), 0, 0

    def reader_closed(self) -> bool:
        return bool(self.segment.head[CLOSED])

    def claim(self, nbytes: int) -> tuple[int, np.ndarray]:
        """Claims ``nbytes`` of ring space: its position and its bytes."""
        start = self.allocate(nbytes)
        offset = start % self.segment.capacity
        return start, self.segment.data[offset : offset + nbytes]

    def allocate(self, nbytes: int) -> int:
        """Claims ``nbytes`` (64-byte aligned) in the current generation; returns the position."""
        size = -(-max(nbytes, 1) // ALIGN) * ALIGN
        segment = self.segment
        capacity = segment.capacity
        if size <= capacity:
            start = self.position
            offset = start % capacity
            if offset + size > capacity:  # no room before the end: wrap to the start
                start += capacity - offset
            if start + size - segment.head[READ] <= capacity:
                self.position = start + size
                return start
        self._grow(max(self.initial_size, 2 * capacity, size))
        self.position = size
        return 0

    def _grow(self, capacity: int) -> None:
        name = segment_name(self.prefix, self.generation + 1)
        try:
            mapped = create(name, -(-capacity // ALIGN) * ALIGN)
        except FileExistsError:
            raise FileExistsError(
                f"ring segment {name!r} already exists: two RingWriters share one prefix; "
                "give each writer the prefix of its own RingReader."
            ) from None
        if self.reader_closed():  # it may have swept before we created the segment
            _unlink_name(name)
            raise BrokenPipeError("the RingReader was closed; stop encoding.")
        self.segment, self.generation = Segment(name, mapped), self.generation + 1


class ReadRings:
    """The reader's side: maps generations lazily, releases consumed space, cleans up."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.low, self.pid, self.closed = prefix, 0, os.getpid(), False
        self.segments: dict[int, Segment] = {}
        self._adopt(0, create(segment_name(prefix, 0), 0))

    def take(self, table: tuple[int, ...], generation: int, position: int) -> list[np.ndarray]:
        """Copies of the ``(generation, position, size)`` buffers in ``table``, then frees them."""
        copies = []
        for i in range(0, len(table), 3):
            buffer_generation, start, nbytes = table[i : i + 3]
            segment = self.segments.get(buffer_generation) or self._attach(buffer_generation)
            if start < segment.head[READ]:
                raise _released(buffer_generation)
            offset = start % segment.capacity
            copies.append(segment.data[offset : offset + nbytes].copy())
        self.release(generation, position)
        return copies

    def release(self, generation: int, position: int) -> None:
        """Marks everything before ``position`` consumed; unlinks older generations."""
        segment = self.segments.get(generation) or self._attach(generation)
        segment.head[READ] = position
        while self.low < generation:
            self._unlink(self.low)
            self.low += 1

    def close(self) -> None:
        """Tells the writer, then unlinks every generation left (only in this process)."""
        if self.closed or self.pid != os.getpid():
            return  # a forked child leaves its parent's segments alone
        self.closed = True
        while self._close_one(self.low):
            self.low += 1
        self.segments.clear()

    def _close_one(self, generation: int) -> bool:
        segment = self.segments.get(generation)
        if segment is None:
            try:
                mapped = open_existing(segment_name(self.prefix, generation))
            except FileNotFoundError:
                return False
            segment = (
                None if mapped is None else Segment(segment_name(self.prefix, generation), mapped)
            )
        if segment is not None:
            segment.head[CLOSED] = 1  # before unlinking: see WriteRing._grow
        self._unlink(generation)
        return True

    def _attach(self, generation: int) -> Segment:
        if self.closed:
            raise ValueError("RingReader is closed; decode messages before close().")
        if generation < self.low:
            raise _released(generation)
        name = segment_name(self.prefix, generation)
        mapped = open_existing(name)
        if mapped is None:
            raise ValueError(f"ring segment {name!r} is incomplete; was the message cut short?")
        return self._adopt(generation, mapped)

    def _adopt(self, generation: int, mapped: mmap.mmap) -> Segment:
        segment = Segment(segment_name(self.prefix, generation), mapped)
        resource_tracker.register("/" + segment.name, "shared_memory")
        self.segments[generation] = segment
        return segment

    def _unlink(self, generation: int) -> None:
        name = segment_name(self.prefix, generation)
        _unlink_name(name)
        if self.segments.pop(generation, None) is not None:  # registered when adopted
            resource_tracker.unregister("/" + name, "shared_memory")


def _released(generation: int) -> ValueError:
    return ValueError(
        f"the message refers to ring space (generation {generation}) that a later message "
        "already released; decode messages in the order they were encoded."
    )
