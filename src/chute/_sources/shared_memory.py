"""``SharedMemoryDataSource``: any picklable elements in one shared-memory segment.

The creating process pickles every element (protocol 5) into one segment;
other processes attach by name and unpickle only what they read.  Contiguous
NumPy arrays are stored out of band, so reading one gives a read-only view of
the segment, not a copy.  Segment layout (native uint64 integers)::

    header   magic, n (elements), m (out-of-band buffers), total size in bytes
    starts   n + 1 offsets: element i is pickled in bytes [starts[i], starts[i + 1])
    firsts   n + 1 counts: its buffers are entries firsts[i] .. firsts[i + 1] - 1 of
    buffers  m (offset, length) pairs
    data     the pickles back to back, then the buffers, each 64-byte aligned

The creating process owns the segment and unlinks it on ``close()``, garbage
collection or interpreter exit.  Every process maps it read-only, and those
that only attach never register it with ``multiprocessing``'s resource
tracker, so their exit can neither warn about nor remove the owner's segment.
(Registering then unregistering, the usual workaround before Python 3.13's
``track=False``, breaks the tracker that workers share with their parent.)
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from chute._core.validate import grain_first
from chute._execution import shutdown
from chute._execution._ring import _unlink_name
from chute._sources._segment import (
    _WHAT,
    _attach,
    _check_elements,
    _Segment,
    _write_segment,
)
from chute._sources.protocol import as_index, check_indices, out_of_range

__all__ = ["InMemoryDataSource", "SharedMemoryDataSource"]


class SharedMemoryDataSource:
    """Picklable elements in one shared-memory segment that worker processes share.

    Elements can be anything picklable (dicts, strings, NumPy arrays, ...),
    unlike Grain's, which stores only ``str``, ``bytes``, numbers and ``None``.
    Pickling the source sends only the segment's name, so workers attach in
    O(1) and read any element without copying the dataset.  Arrays come back
    as read-only views of the segment; copy one (``np.array(x)``) to change
    it.  Negative indices count from the end.

    The process that created the segment unlinks it on ``close()`` (also when
    the source is garbage-collected or the interpreter exits); keep the
    source alive while other processes read from it.  ``repr`` omits the
    random segment name so that DataLoader checkpoints validate across runs.

    Args:
        elements: The elements to store (any iterable but a str, bytes or mapping).
        name: Without ``elements``, the segment to attach to; with them, the
            name to give the new segment (a fresh random name by default).

    >>> import numpy as np
    >>> source = SharedMemoryDataSource([{"id": 1}, "text", np.arange(3)])
    >>> source, source[0], source[-2], source[2]
    (SharedMemoryDataSource(len=3), {'id': 1}, 'text', array([0, 1, 2]))
    >>> source.__getitems__([2, 0])[1], source[2].flags.writeable
    ({'id': 1}, False)
    >>> source.close()
    """

    _name: str
    _len: int
    _size: int
    _segment: _Segment | None
    _finalizer: weakref.finalize | None
    _closed: bool
    _lock: threading.Lock

    def __init__(self, elements: Iterable[Any] | None = None, *, name: str | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"{_WHAT}: name must be a non-empty str or None (got {name!r}).")
        if elements is None:
            if name is None:
                raise ValueError(
                    grain_first(
                        "Elements or name must be provided.",
                        f"{_WHAT} needs elements to store, or name= of an existing segment "
                        "to attach to (got neither); pass a list of elements.",
                    )
                )
            segment = _attach(name)
        else:
            shm = _write_segment(_check_elements(elements), name)
            try:
                segment = _Segment(shm.name, owner=shm)
            finally:
                shm.close()
        self.__setstate__({"name": segment.name, "len": segment.length, "size": segment.size})
        self._adopt(segment)

    @property
    def name(self) -> str:
        """The segment's name; ``SharedMemoryDataSource(name=...)`` attaches to it."""
        return self._name

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> Any:
        i = index if type(index) is int else as_index(index, _WHAT)
        if not -self._len <= i < self._len:
            raise out_of_range(i, self._len, _WHAT, negative=True)
        segment = self._segment
        if segment is None:
            segment = self._attach()
        return segment.read(i % self._len)

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """The elements at ``indices``, in order (negative ones count from the end)."""
        idx = check_indices(indices, self._len, _WHAT, negative=True)
        segment = self._segment
        if segment is None:
            segment = self._attach()
        read = segment.read
        return [read(i) for i in idx.tolist()]

    def close(self) -> None:
        """Unmaps the segment here; in the creating process, also unlinks it.

        Arrays already read stay valid (the mapping lives until they are
        gone).  Closing twice is harmless; reading after ``close`` raises.
        """
        with self._lock:
            self._closed, self._segment = True, None
            if self._finalizer is not None:
                self._finalizer()

    def unlink(self) -> None:
        """Destroys the segment now, from any process; mappings stay valid (Grain's ``unlink``)."""
        if self._segment is not None:
            self._segment.unlink()
        else:  # never attached here, or closed
            _unlink_name(self._name)

    def __enter__(self) -> SharedMemoryDataSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{_WHAT}(len={self._len})"

    def __str__(self) -> str:
        # Grain's text: its SharedMemoryDataSource prints as the InMemoryDataSource alias.
        return f"InMemoryDataSource(name={self._name}, len={self._len})"

    def __getstate__(self) -> dict[str, Any]:
        if self._closed:
            raise ValueError(f"{_WHAT}: cannot pickle a closed source; pickle it before close().")
        return {"name": self._name, "len": self._len, "size": self._size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._name, self._len, self._size = state["name"], state["len"], state["size"]
        self._segment = None
        self._finalizer = None
        self._closed = False
        self._lock = threading.Lock()

    def _attach(self) -> _Segment:
        """Maps the segment on first use in this process (after unpickling)."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{_WHAT} {self._name!r} was closed; create a new source.")
            if self._segment is None:
                segment = _attach(self._name)
                if (segment.length, segment.size) != (self._len, self._size):
                    segment.close()
                    raise ValueError(
                        f"{_WHAT}: segment {self._name!r} now holds {segment.length} elements, "
                        f"not {self._len}; it was replaced after this source was pickled."
                    )
                self._adopt(segment)
            return self._segment  # type: ignore[return-value]

    def _adopt(self, segment: _Segment) -> None:
        self._segment = segment
        self._finalizer = weakref.finalize(self, segment.close)
        shutdown.on_terminate(self._finalizer)  # a SIGTERM'd creator still removes its segment
        shutdown.install()


#: Grain's legacy name.
InMemoryDataSource = SharedMemoryDataSource
