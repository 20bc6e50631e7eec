"""The shared-memory slots behind ``RingWriter`` and ``RingReader``.

A worker's large arrays travel in *slots*: POSIX shared-memory segments
named ``f"{prefix}-{id}"``, each a 64-byte header of native uint64 words,
then ``capacity`` bytes of data.  Word 0 of a slot is its state::

    FREE      the writer may fill it (the reader wrote this)
    BUSY      filled, or lent to arrays the parent still holds (the writer wrote this)
    RETIRED   the writer let it go; the reader unmaps it (the writer wrote this)

Segment 0 is the control segment, made by the reader, a header only::

    word 1   1 once the reader is closed (the reader writes it)
    word 2   the next slot id (the writer writes it before creating the slot)

Life of a slot: the writer creates it (ids count up, never reused), marks
it BUSY and fills it.  The reader maps it when a message first names it and
unlinks its name at once: from then on the memory lives exactly as long as
a process maps it, and nothing is left in /dev/shm.  The reader marks it
FREE when the arrays it handed out over it are all gone (or after copying
them); the writer then reuses it, so its pages are never faulted in again.
A free slot that no claim has taken for a while (``_IDLE_CLAIMS``) is retired:
one made when the parent held its arrays a moment longer than usual does not
stay in the worker's memory for good.

Cleanup of slots never named in a decoded message: the reader's ``close()``
unlinks every id below the control segment's next id; a writer whose reader
went away does the same for its own (``sweep()``).  Unlinking a name that
is already gone is harmless.  Only the control segment is registered with
``multiprocessing``'s resource tracker, by the reader.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
import weakref
from multiprocessing import resource_tracker

import numpy as np

from chute._core.fork import ForkCheck

try:
    import _posixshmem
except ImportError:  # pragma: no cover - Windows
    _posixshmem = None

HEADER = 64
ALIGN = 64
STATE = 0
CLOSED, NEXT_ID = 1, 2  # words of the control segment
FREE, BUSY, RETIRED = 0, 1, 2
_SLOT_ROUNDING = 1 << 16  # slot sizes: the array plus an eighth, rounded up to 64 KiB
_FREE_BYTES = 64 << 20  # free slots a writer keeps, or four times the slot it makes, if more
# A free slot that no claim took in this many claims (or in four claims per slot, if more) is
# retired: a slot made while the parent held on to its arrays a moment longer than usual would
# otherwise stay in the worker's resident memory for good, one more such moment at a time.
_IDLE_CLAIMS = 64


def segment_name(prefix: str, slot: int) -> str:
    """The name of one slot (0: the control segment)."""
    return f"{prefix}-{slot}"


def _unlink_name(name: str) -> None:
    """Unlinks a segment without a word to the resource tracker (it is not ours)."""
    try:
        if _posixshmem is not None:
            _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def _shm_open(name: str, flags: int) -> int:
    if _posixshmem is None:  # pragma: no cover - Windows
        raise OSError("chute's worker transport needs POSIX shared memory (Linux or macOS).")
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
                f"no room in shared memory for a {size}-byte transport slot; give /dev/shm "
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
    """One process's mapping of a segment: its header words and its data bytes."""

    __slots__ = ("capacity", "data", "head", "mapped", "name")

    def __init__(self, name: str, mapped: mmap.mmap) -> None:
        self.name, self.mapped = name, mapped
        self.capacity = len(mapped) - HEADER
        self.head = memoryview(mapped)[:HEADER].cast("Q")
        self.data = np.frombuffer(mapped, np.uint8, offset=HEADER)

    def lend(self, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` as an array that every array made from it keeps alive.

        NumPy collapses a chain of views to the first base of another type, so
        the array is made over a memoryview: arrays built on it keep it, not
        ``data``, as their base, and its death means they are all gone.
        """
        return np.frombuffer(memoryview(self.mapped)[HEADER : HEADER + nbytes], np.uint8)


class WriteSlots:
    """The writer's side: hands out free slots, creating and retiring them as sizes need."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        mapped = open_existing(segment_name(prefix, 0))  # FileNotFoundError once the reader closed
        if mapped is None:
            raise FileNotFoundError(errno.ENOENT, "transport is incomplete", prefix)
        self.control = Segment(segment_name(prefix, 0), mapped)
        self.slots: dict[int, Segment] = {}
        self.claims = 0  # claims so far
        self.claimed_at: dict[int, int] = {}  # each slot's last claim (or its creation)

    def reader_closed(self) -> bool:
        return bool(self.control.head[CLOSED])

    def claim(self, nbytes: int) -> tuple[int, np.ndarray]:
        """A slot for ``nbytes``, marked BUSY: its id and its first ``nbytes`` bytes.

        Of the free slots that fit, the smallest (the oldest among equals) is taken, so
        a slot that is not needed stays idle, and is retired after ``_IDLE_CLAIMS``.
        """
        self.claims += 1
        idle_limit = max(_IDLE_CLAIMS, 4 * len(self.slots))
        best: tuple[int, Segment] | None = None
        idle: list[int] = []
        for slot, segment in self.slots.items():
            if segment.head[STATE] != FREE:
                continue
            if self.claims - self.claimed_at[slot] > idle_limit:
                idle.append(slot)
            elif nbytes <= segment.capacity and (
                best is None or segment.capacity < best[1].capacity
            ):
                best = (slot, segment)
        for slot in idle:
            self._retire(slot)
        if best is None:
            best = self._create(nbytes)
        slot, segment = best
        segment.head[STATE] = BUSY
        self.claimed_at[slot] = self.claims
        return slot, segment.data[:nbytes]

    def _retire(self, slot: int) -> None:
        """Lets a free slot go: the reader unmaps it, and its memory goes with the mappings."""
        self.slots.pop(slot).head[STATE] = RETIRED
        del self.claimed_at[slot]

    def release(self, slots: list[int]) -> None:
        """Marks ``slots`` FREE again: claimed, but named in no message (a failed encode)."""
        for slot in slots:
            segment = self.slots.get(slot)
            if segment is not None:
                segment.head[STATE] = FREE

    def _create(self, nbytes: int) -> tuple[int, Segment]:
        capacity = -(-(nbytes + nbytes // 8 + 1) // _SLOT_ROUNDING) * _SLOT_ROUNDING
        free = sorted(
            (seg.capacity, slot) for slot, seg in self.slots.items() if seg.head[STATE] == FREE
        )
        spare = sum(size for size, _ in free) + capacity
        for size, slot in free:  # too many bytes idle: the smallest go first
            if spare <= max(_FREE_BYTES, 4 * capacity):
                break
            self._retire(slot)
            spare -= size
        slot = int(self.control.head[NEXT_ID]) or 1
        self.control.head[NEXT_ID] = slot + 1  # before creating: the reader's sweep covers it
        name = segment_name(self.prefix, slot)
        try:
            mapped = create(name, capacity)
        except FileExistsError:
            raise FileExistsError(
                f"transport slot {name!r} already exists: two RingWriters share one prefix; "
                "give each writer the prefix of its own RingReader."
            ) from None
        if self.reader_closed():  # it may have swept before we created the slot
            _unlink_name(name)
            raise BrokenPipeError("the RingReader was closed; stop encoding.")
        segment = self.slots[slot] = Segment(name, mapped)
        self.claimed_at[slot] = self.claims
        return slot, segment

    def sweep(self) -> None:
        """Unlinks the names of this writer's slots (for when the reader is gone)."""
        for slot in self.slots:
            _unlink_name(segment_name(self.prefix, slot))


def _drop_pages(mapped: mmap.mmap) -> None:
    """Drops this process's page-table entries for a slot it no longer reads.

    The slot is shared, so its bytes stay in shared memory for the writer; only the
    reader's resident size shrinks (a reused slot would otherwise count in full, for
    as long as the reader lives).  A later read maps the pages in again.
    """
    with contextlib.suppress(OSError, ValueError):
        mapped.madvise(mmap.MADV_DONTNEED)


class _Lent:
    """Bytes the reader has lent to arrays still alive; shared with their finalizers."""

    __slots__ = ("bytes", "lock")

    def __init__(self) -> None:
        self.bytes = 0
        self.lock = threading.Lock()

    def returned(self, segment: Segment, nbytes: int) -> None:
        _drop_pages(segment.mapped)
        segment.head[STATE] = FREE
        with self.lock:
            self.bytes -= nbytes


class ReadSlots:
    """The reader's side: maps slots, lends or copies their bytes, frees them, cleans up."""

    def __init__(self, prefix: str, lend_limit: int) -> None:
        self.prefix, self.made, self.closed = prefix, ForkCheck(), False
        self.lend_limit = lend_limit
        self.lent = _Lent()
        self.slots: dict[int, Segment] = {}
        self.unlinked: set[int] = set()
        self.control = Segment(segment_name(prefix, 0), create(segment_name(prefix, 0), 0))
        resource_tracker.register("/" + self.control.name, "shared_memory")

    def take(self, table: tuple[int, ...]) -> list[np.ndarray]:
        """The ``(slot, size)`` buffers of ``table``: views while lending is allowed, or copies."""
        buffers = []
        for i in range(0, len(table), 2):
            slot, nbytes = table[i], table[i + 1]
            segment = self.slots.get(slot) or self._attach(slot)
            lent = self.lent
            with lent.lock:
                lend = lent.bytes + nbytes <= self.lend_limit
                if lend:
                    lent.bytes += nbytes
            if lend:
                view = segment.lend(nbytes)
                weakref.finalize(view, lent.returned, segment, nbytes)
                buffers.append(view)
            else:
                buffers.append(segment.data[:nbytes].copy())
                _drop_pages(segment.mapped)
                segment.head[STATE] = FREE
        return buffers

    def close(self) -> None:
        """Tells the writer, then unlinks every slot name left (only in this process)."""
        if self.closed or self.made.forked():
            return  # a forked child leaves its parent's segments alone
        self.closed = True
        self.control.head[CLOSED] = 1  # before unlinking: see WriteSlots._create
        for slot in range(1, int(self.control.head[NEXT_ID])):
            if slot not in self.unlinked:
                _unlink_name(segment_name(self.prefix, slot))
        _unlink_name(self.control.name)
        resource_tracker.unregister("/" + self.control.name, "shared_memory")
        self.slots.clear()  # mappings go when the last array over them does

    def _attach(self, slot: int) -> Segment:
        if self.closed:
            raise ValueError("RingReader is closed; decode messages before close().")
        name = segment_name(self.prefix, slot)
        if slot in self.unlinked:
            raise ValueError(f"transport slot {name!r} was retired; was the message decoded late?")
        mapped = open_existing(name)
        if mapped is None:
            raise ValueError(f"transport slot {name!r} is incomplete; was the message cut short?")
        _unlink_name(name)  # both sides map it now: the memory goes with the last mapping
        self.unlinked.add(slot)
        for old in [s for s, seg in self.slots.items() if seg.head[STATE] == RETIRED]:
            del self.slots[old]
        segment = self.slots[slot] = Segment(name, mapped)
        return segment
