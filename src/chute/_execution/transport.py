"""Worker-to-parent transport: NumPy arrays in shared memory, the rest pickled.

A worker's ``RingWriter.encode(tree)`` pickles ``tree`` with protocol 5.
Every contiguous array of at least ``RING_MIN_BYTES`` bytes (the arrays that
pickle hands out of band: C- or Fortran-ordered, not of object dtype) is
copied into a shared-memory slot that the writer reuses message after
message; the message keeps only which slot.  Smaller arrays, object arrays,
strings and everything else stay in the message.  A batch can also be built
in a slot in place (``reserve``), so it is written once and never copied.

The parent's ``RingReader.decode(message)`` unpickles the tree with its
large arrays as views of the slots: nothing is copied.  A slot goes back to
the writer when the last array over it is gone.  While the arrays the
reader has lent this way add up to more than ``lend_limit`` bytes (the
program keeps many batches), it copies instead, which frees the slot at
once: shared memory stays bounded whatever the program holds on to.

Message: one native uint64 word, ``count`` of slot buffers, then ``count``
(slot, size) pairs, then the pickle.

Rules for callers:

* One ``RingReader`` per ``RingWriter``: make the reader in the parent, give
  its ``prefix`` to the worker, make the writer there.
* Messages may be decoded in any order, or dropped (their slots stay busy).
  An ``encode`` that raises (plain pickle cannot carry a lambda, say) takes
  back every slot it claimed, and turns the reserved slots into copies, so
  the caller can send the same tree with another pickler.  A reserved slot
  that the next ``encode`` does not carry becomes a copy too, which a later
  message carries.
* Neither side waits for the other: when no free slot fits, the writer makes
  a new one.  Limit how many messages are in flight (credits) to bound
  memory.  Once the reader is closed, ``encode`` raises ``BrokenPipeError``.
* The reader cleans up: ``close()`` (or garbage collection, or interpreter
  exit) unlinks every slot name, even those of a writer killed with SIGKILL;
  arrays it lent stay valid.  A writer whose reader went away calls
  ``sweep()``.

Arrays come back as pickle protocol 5 would give them: read-only only if the
worker's array was read-only.  Neither class is thread-safe (arrays may be
dropped in any thread).

>>> reader = RingReader()
>>> writer = RingWriter(reader.prefix)
>>> message = writer.encode({"image": np.ones((256, 256), np.uint8), "label": 3})
>>> len(message) < 1000
True
>>> tree = reader.decode(message)
>>> int(tree["image"].sum()), tree["label"]
(65536, 3)
>>> writer.close(); reader.close()
"""

from __future__ import annotations

import math
import operator
import os
import pickle
import secrets
import struct
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from chute._execution._ring import ReadSlots, WriteSlots

__all__ = ["RING_MIN_BYTES", "RingReader", "RingSlot", "RingWriter"]

RING_MIN_BYTES = 1 << 15  #: smaller arrays go inline: through a pipe, that costs less
LEND_LIMIT = 256 << 20  #: at most this many bytes lent as views at once, per reader
_HEAD = struct.Struct("=Q")
_NOTHING = _HEAD.pack(0)


def _default_lend_limit() -> int:
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return LEND_LIMIT
    return min(LEND_LIMIT, stats.f_bavail * stats.f_frsize // 8)


def _rebuild(buffer: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(buffer, dtype).reshape(shape)


class RingSlot:
    """Stands for an array reserved in a slot (``RingWriter.reserve``) in a tree.

    Pickles as that array, without a copy inside the next ``encode`` of its
    writer; if that ``encode`` fails or does not carry it, it holds a copy of the
    array from then on and pickles as that copy.
    """

    __slots__ = ("_buffer", "_location", "_view")

    def __init__(self, view: np.ndarray, location: tuple[int, int]) -> None:
        self._buffer: pickle.PickleBuffer | None = pickle.PickleBuffer(view)  # type: ignore[arg-type]
        self._view, self._location = view, location

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self._buffer is None:
            raise ValueError(
                "this RingSlot was already sent: a reserved slot goes into the next "
                "encode() only; call reserve() again for each message."
            )
        return _rebuild, (self._buffer, self._view.dtype, self._view.shape)

    @property
    def nbytes(self) -> int:
        """The bytes of the array it stands for (as ``ndarray.nbytes``)."""
        return int(self._view.nbytes)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of the array it stands for."""
        return self._view.dtype


class RingWriter:
    """The worker's end: encodes trees into small messages, arrays into shared-memory slots.

    Args:
        prefix: ``RingReader.prefix`` of the reader in the parent.
    """

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str) or not prefix or "/" in prefix:
            raise ValueError(
                f"prefix must be RingReader.prefix, a str without '/' (got {prefix!r})."
            )
        try:
            self._slots: WriteSlots | None = WriteSlots(prefix)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no RingReader with prefix {prefix!r}: it was closed, or the prefix is wrong; "
                "pass RingReader().prefix from the parent."
            ) from None
        self._table: list[int] = []
        self._reserved: dict[int, RingSlot] = {}

    def encode(self, tree: Any) -> bytes:
        """Pickles ``tree`` into a message, its large arrays into slots.

        Raises:
            BrokenPipeError: The reader was closed.
        """
        slots = self._open()
        table: list[int] = []
        self._table = table
        try:
            payload = pickle.dumps(tree, protocol=5, buffer_callback=self._keep)
        except BaseException:
            slots.release(table[::2])  # no message names them: the writer takes them back
            self._detach_reserved()
            raise
        finally:
            self._spend_reserved(set(table[::2]))
        if not table:
            return _NOTHING + payload
        return struct.pack(f"=Q{len(table)}Q", len(table) // 2, *table) + payload

    def reserve(self, shape: int | Sequence[int], dtype: Any) -> tuple[RingSlot, np.ndarray]:
        """Space for an array in a slot, to fill in place before ``encode``.

        Fill ``view`` (e.g. ``np.stack(rows, out=view)``), then put ``slot``
        where the array belongs in the tree passed to the very next
        ``encode()``; the slot travels without another copy.  After that
        ``encode()``, the view is spent: do not touch it.  A slot that the next
        ``encode()`` does not carry holds a copy of its array from then on, and
        a later ``encode()`` sends that copy.

        >>> reader = RingReader(); writer = RingWriter(reader.prefix)
        >>> slot, view = writer.reserve((2, 3), np.int32)
        >>> _ = np.stack([np.arange(3), np.arange(3, 6)], out=view)
        >>> reader.decode(writer.encode({"batch": slot}))["batch"].tolist()
        [[0, 1, 2], [3, 4, 5]]
        >>> writer.close(); reader.close()
        """
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise TypeError(f"cannot reserve shared memory for dtype {dt} (it holds objects).")
        shape = tuple(map(operator.index, shape if isinstance(shape, Sequence) else [shape]))
        if any(n < 0 for n in shape):
            raise ValueError(f"shape must not have negative sizes (got {shape}).")
        nbytes = math.prod(shape) * dt.itemsize
        slot_id, space = self._open().claim(nbytes)
        slot = RingSlot(space.view(dt).reshape(shape), (slot_id, nbytes))
        self._reserved[id(slot._buffer)] = slot
        return slot, slot._view

    def sweep(self) -> None:
        """Unlinks this writer's slots: for a worker whose parent went away."""
        if self._slots is not None:
            self._slots.sweep()

    def close(self) -> None:
        """Unmaps the slots here (arrays in flight stay readable by the reader)."""
        self._slots = None
        self._reserved.clear()

    def __enter__(self) -> RingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open(self) -> WriteSlots:
        slots = self._slots
        if slots is None:
            raise ValueError("RingWriter is closed; make a new one.")
        if slots.reader_closed():
            raise BrokenPipeError("the RingReader was closed; stop encoding.")
        return slots

    def _detach_reserved(self) -> None:
        """After a failed encode: each reserved slot becomes a copy that pickles inline.

        So a caller that falls back to another pickler (cloudpickle, for a
        lambda in the tree) still sends the arrays built in the slots.
        """
        reserved = list(self._reserved.values())
        self._reserved.clear()
        for slot in reserved:
            copied = slot._view.copy()
            slot._buffer, slot._view = pickle.PickleBuffer(copied), copied
        if self._slots is not None:
            self._slots.release([slot._location[0] for slot in reserved])

    def _spend_reserved(self, sent: set[int]) -> None:
        """Reserved slots are spent by ``encode``: the sent ones are the reader's now, and
        the others go back at once, each ``RingSlot`` keeping a copy of its array, which a
        later message carries as it carries any array (a worker may make several batches
        before it sends the first)."""
        unsent = [s for s in self._reserved.values() if s._location[0] not in sent]
        for slot in unsent:
            copied = slot._view.copy()
            slot._buffer, slot._view = pickle.PickleBuffer(copied), copied
        if unsent and self._slots is not None:
            self._slots.release([slot._location[0] for slot in unsent])
        for slot in self._reserved.values():
            if slot._location[0] in sent:
                slot._buffer = slot._view = None  # type: ignore[assignment]
        self._reserved.clear()

    def _keep(self, buffer: pickle.PickleBuffer) -> bool:
        """pickle's buffer callback: True keeps a buffer in the message."""
        if self._reserved:
            slot = self._reserved.get(id(buffer))
            if slot is not None:
                self._table.extend(slot._location)
                return False
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous
            return True
        nbytes = raw.nbytes
        if nbytes < RING_MIN_BYTES:
            return True
        slots: Any = self._slots
        slot_id, space = slots.claim(nbytes)
        space[:] = raw
        self._table += (slot_id, nbytes)
        return False


class RingReader:
    """The parent's end of one worker's transport: decodes its messages, owns its slots.

    ``prefix`` names the transport; pass it to the worker's ``RingWriter``.

    Args:
        lend_limit: Bytes of arrays lent as views of the slots at once; past
            it, arrays are copied.  0 always copies.  By default
            ``LEND_LIMIT``, or an eighth of the free space in /dev/shm if
            that is less (containers often give it only 64 MiB).
    """

    def __init__(self, lend_limit: int | None = None) -> None:
        if lend_limit is None:
            lend_limit = _default_lend_limit()
        if isinstance(lend_limit, bool) or not isinstance(lend_limit, int) or lend_limit < 0:
            raise ValueError(f"lend_limit must be an int >= 0 of bytes (got {lend_limit!r}).")
        self._slots = ReadSlots(f"chute-{os.getpid()}-{secrets.token_hex(4)}", lend_limit)
        self._finalizer = weakref.finalize(self, self._slots.close)

    @property
    def prefix(self) -> str:
        """The transport's name prefix, for ``RingWriter(prefix)``."""
        return self._slots.prefix

    @property
    def lent_bytes(self) -> int:
        """Bytes of decoded arrays that are views of the slots and still alive."""
        return self._slots.lent.bytes

    def decode(self, message: bytes) -> Any:
        """The tree a ``RingWriter.encode`` message describes, large arrays as views of slots."""
        view = memoryview(message)
        (count,) = _HEAD.unpack_from(view)
        start = _HEAD.size + 16 * count
        if not count:
            return pickle.loads(view[start:])
        table = struct.unpack_from(f"={2 * count}Q", view, _HEAD.size)
        return pickle.loads(view[start:], buffers=self._slots.take(table))

    def close(self) -> None:
        """Unlinks every slot; the writer's next ``encode`` then fails.

        Arrays already decoded stay valid.  Closing twice is harmless.
        """
        self._finalizer()

    def __enter__(self) -> RingReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
