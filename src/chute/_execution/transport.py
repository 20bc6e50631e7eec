"""Worker-to-parent transport: NumPy arrays through a shared-memory ring, the rest pickled.

A worker's ``RingWriter.encode(tree)`` pickles ``tree`` with protocol 5.
Every contiguous array of at least ``RING_MIN_BYTES`` bytes (the arrays that
pickle hands out of band: C- or Fortran-ordered, not of object dtype) is
copied into the worker's ring, a shared-memory buffer reused message after
message; the message keeps only where it lies.  Smaller arrays, object
arrays, strings and everything else stay in the message.  The parent's
``RingReader.decode(message)`` copies the arrays out, so they own their
memory, frees their ring space for the writer, and unpickles the tree.

Message: three native uint64 words (``count`` of ring buffers, and the
generation and position up to which decoding it frees the ring), ``count``
(generation, position, size) triples, then the pickle.

Rules for callers:

* One ``RingReader`` per ``RingWriter``: make the reader in the parent, give
  its ``prefix`` to the worker, make the writer there.
* Decode messages in the order they were encoded (one pipe per worker does
  that).  Dropping messages is fine; decoding one after a later one raises
  ``ValueError``.
* Neither side waits for the other: when the ring is full, the writer starts a
  larger segment.  Limit how many messages are in flight (credits) to bound
  memory.  Once the reader is closed, ``encode`` raises ``BrokenPipeError``.
* The reader cleans up: ``close()`` (or garbage collection, or interpreter
  exit) unlinks every segment of its ring, even those of a writer killed
  with SIGKILL.  The writer never needs to clean up.

Arrays come back as pickle protocol 5 would give them: read-only only if the
worker's array was read-only.  Neither class is thread-safe.

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

from chute._execution._ring import ReadRings, WriteRing

__all__ = ["RING_MIN_BYTES", "RingReader", "RingSlot", "RingWriter"]

RING_MIN_BYTES = 1 << 15  #: smaller arrays go inline: through a pipe, that costs less
_HEAD = struct.Struct("=3Q")
_NOTHING = _HEAD.pack(0, 0, 0)


def _rebuild(buffer: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(buffer, dtype).reshape(shape)


class RingSlot:
    """Stands for an array reserved in the ring (``RingWriter.reserve``) in a tree.

    Pickles as that array, and only inside the next ``encode`` of its writer.
    """

    __slots__ = ("_buffer", "_location", "_view")

    def __init__(self, view: np.ndarray, location: tuple[int, int, int]) -> None:
        self._buffer: pickle.PickleBuffer | None = pickle.PickleBuffer(view)  # type: ignore[arg-type]
        self._view, self._location = view, location

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self._buffer is None:
            raise ValueError(
                "this RingSlot was already sent: a reserved slot goes into the next "
                "encode() only; call reserve() again for each message."
            )
        return _rebuild, (self._buffer, self._view.dtype, self._view.shape)


class RingWriter:
    """The worker's end: encodes trees into small messages, arrays into the ring.

    Args:
        prefix: ``RingReader.prefix`` of the reader in the parent.
        initial_size: Bytes of the first ring segment, made on first use;
            later ones double (or fit the array) when the ring is full.
    """

    def __init__(self, prefix: str, initial_size: int = 1 << 22) -> None:
        if not isinstance(prefix, str) or not prefix or "/" in prefix:
            raise ValueError(
                f"prefix must be RingReader.prefix, a str without '/' (got {prefix!r})."
            )
        if isinstance(initial_size, bool) or not isinstance(initial_size, int) or initial_size < 1:
            raise ValueError(
                f"initial_size must be a positive int of bytes (got {initial_size!r})."
            )
        try:
            self._ring: WriteRing | None = WriteRing(prefix, initial_size)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no RingReader with prefix {prefix!r}: it was closed, or the prefix is wrong; "
                "pass RingReader().prefix from the parent."
            ) from None
        self._table: list[int] = []
        self._slots: dict[int, RingSlot] = {}

    def encode(self, tree: Any) -> bytes:
        """Pickles ``tree`` into a message, its large arrays into the ring.

        Raises:
            BrokenPipeError: The reader was closed.
        """
        ring = self._open_ring()
        table: list[int] = []
        self._table = table
        try:
            payload = pickle.dumps(tree, protocol=5, buffer_callback=self._keep)
        finally:
            for slot in self._slots.values():
                slot._buffer = slot._view = None  # type: ignore[assignment]
            self._slots.clear()
        if not table:
            return _NOTHING + payload
        head = struct.pack(
            f"=3Q{len(table)}Q", len(table) // 3, ring.generation, ring.position, *table
        )
        return head + payload

    def reserve(self, shape: int | Sequence[int], dtype: Any) -> tuple[RingSlot, np.ndarray]:
        """Space for an array in the ring, to fill in place before ``encode``.

        Fill ``view`` (e.g. ``np.stack(rows, out=view)``), then put ``slot``
        (or ``view``) where the array belongs in the tree passed to the very
        next ``encode()``; the slot travels without another copy.  After that
        ``encode()``, the slot and the view are spent: do not touch them.

        >>> reader = RingReader(); writer = RingWriter(reader.prefix)
        >>> slot, view = writer.reserve((2, 3), np.int32)
        >>> _ = np.stack([np.arange(3), np.arange(3, 6)], out=view)
        >>> reader.decode(writer.encode({"batch": slot}))["batch"].tolist()
        [[0, 1, 2], [3, 4, 5]]
        >>> writer.close(); reader.close()
        """
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise TypeError(f"cannot reserve ring space for dtype {dt} (it holds objects).")
        shape = tuple(map(operator.index, shape if isinstance(shape, Sequence) else [shape]))
        if any(n < 0 for n in shape):
            raise ValueError(f"shape must not have negative sizes (got {shape}).")
        ring = self._open_ring()
        nbytes = math.prod(shape) * dt.itemsize
        start, space = ring.claim(nbytes)
        slot = RingSlot(space.view(dt).reshape(shape), (ring.generation, start, nbytes))
        self._slots[id(slot._buffer)] = slot
        return slot, slot._view

    def close(self) -> None:
        """Unmaps the ring here (arrays in flight stay readable by the reader)."""
        self._ring = None
        self._slots.clear()

    def __enter__(self) -> RingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open_ring(self) -> WriteRing:
        ring = self._ring
        if ring is None:
            raise ValueError("RingWriter is closed; make a new one.")
        if ring.reader_closed():
            raise BrokenPipeError("the RingReader was closed; stop encoding.")
        return ring

    def _keep(self, buffer: pickle.PickleBuffer) -> bool:
        """pickle's buffer callback: True keeps a buffer in the message."""
        if self._slots:
            slot = self._slots.get(id(buffer))
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
        ring: Any = self._ring
        start, space = ring.claim(nbytes)
        space[:] = raw
        self._table += (ring.generation, start, nbytes)
        return False


class RingReader:
    """The parent's end of one worker's ring: decodes its messages, owns its segments.

    ``prefix`` names the ring; pass it to the worker's ``RingWriter``.
    """

    def __init__(self) -> None:
        self._rings = ReadRings(f"chute-{os.getpid()}-{secrets.token_hex(4)}")
        self._finalizer = weakref.finalize(self, self._rings.close)

    @property
    def prefix(self) -> str:
        """The ring's name prefix, for ``RingWriter(prefix)``."""
        return self._rings.prefix

    def decode(self, message: bytes) -> Any:
        """The tree a ``RingWriter.encode`` message describes, arrays copied out of the ring."""
        view = memoryview(message)
        count, generation, position = _HEAD.unpack_from(view)
        start = _HEAD.size + 24 * count
        if not count:
            return pickle.loads(view[start:])
        rings = self._rings
        if rings.closed:
            raise ValueError("RingReader is closed; decode messages before close().")
        table = struct.unpack_from(f"={3 * count}Q", view, _HEAD.size)
        return pickle.loads(view[start:], buffers=rings.take(table, generation, position))

    def close(self) -> None:
        """Unlinks every segment of the ring; the writer's next ``encode`` then fails.

        Arrays already decoded stay valid.  Closing twice is harmless.
        """
        self._finalizer()

    def __enter__(self) -> RingReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
