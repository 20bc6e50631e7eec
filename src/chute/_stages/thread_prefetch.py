"""``ThreadPrefetchIterDataset``: one background thread reads the parent ahead.

The thread fills a bounded buffer with the parent's elements, each with the
parent's state right after it, so a checkpoint is the parent's state after the
last element *returned*, never after the ones still buffered.  An exception the
parent raises travels through the buffer in its place and is raised, the very
same object, by the ``next()`` that reaches it; the following ``next()`` goes
on with the next element.

The thread stops on ``close()``, ``set_state()``, at the end of the data, when
the iterator is garbage collected (a ``break`` out of a ``for`` loop, an
exception in its body) and at interpreter exit.  It is a daemon thread and
never refers to the iterator, and a stop wakes it at once even when the buffer
is full; ``close()`` and ``set_state()`` then wait for the element it may be
reading to finish, so the parent iterator is never used by two threads.  At
interpreter exit every thread still running is stopped and joined before the
exit handlers of libraries imported earlier run (a thread left inside JAX or
Arrow while they shut down can abort the process).
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from chute._core import metrics
from chute._core.dataset import DatasetIterator, IterDataset, MapDataset, as_iter_dataset
from chute._core.errors import closed_error
from chute._core.state_check import fields, parent_state
from chute._core.validate import check_int
from chute._stages.next_index import get_next_index, set_next_index

logger = logging.getLogger("chute")

# How long close() waits for the reading thread to finish the element it is reading.
_CLOSE_WAIT_S = 1.0

# What the thread hands over with each entry: (kind, value, parent state after it).
_VALUE, _ERROR, _END, _FATAL = "value", "error", "end", "fatal"


class ThreadPrefetchIterDataset(IterDataset[Any]):
    """Reads ``parent`` ahead on a background thread into a bounded buffer.

    Args:
      parent: the IterDataset to read (a MapDataset is read in order through
        ``to_iter_dataset()``).
      prefetch_buffer_size: how many elements to read ahead; ``0`` reads
        inline, with no thread.

    >>> from chute import MapDataset
    >>> ds = MapDataset.range(5).map(lambda x: x * 2)
    >>> list(ThreadPrefetchIterDataset(ds, prefetch_buffer_size=2))
    [0, 2, 4, 6, 8]
    """

    def __init__(
        self, parent: IterDataset[Any] | MapDataset[Any], *, prefetch_buffer_size: int
    ) -> None:
        parent = as_iter_dataset(parent, "ThreadPrefetchIterDataset")
        super().__init__(parent)
        self._buffer_size = check_int(
            prefetch_buffer_size,
            "ThreadPrefetchIterDataset: prefetch_buffer_size",
            minimum=0,
            grains=(
                "`prefetch_buffer_size` must be greater than or equal to 0, got "
                f"{prefetch_buffer_size}."
            ),
        )

    def __iter__(self) -> DatasetIterator[Any]:
        return _ThreadPrefetchIterator(iter(self._parent), self._buffer_size)

    def _describe(self) -> str:
        return f"{self._parent!r}, prefetch_buffer_size={self._buffer_size}"


class _Buffer:
    """The bounded hand-over between one thread and the consumer.

    It holds no reference to the iterator, so the iterator can be garbage
    collected while its thread runs; ``stop()`` wakes both sides at once.

    Taking an entry that is there takes no lock: under the GIL a deque's
    ``append``/``popleft`` and the flags below are atomic.  A side that must
    wait says so in a flag, checks again, then blocks on a lock used as a
    signal, which the other side releases only when the flag is set.  A signal
    given while no one waits is harmless: the waiter wakes, checks and waits
    again.  Compared with a ``Condition``, a training step that takes a ready
    batch makes no system call unless the thread is waiting for room (a
    hand-off after the step went from ~60 to ~25 microseconds here).
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: collections.deque[tuple[str, Any, Any]] = collections.deque()
        self._stopped = False
        self._room_wanted = self._item_wanted = False
        self._room = _signal()
        self._item = _signal()

    def put(self, item: tuple[str, Any, Any]) -> bool:
        """Waits for room and appends ``item``; ``False`` once stopped."""
        if not self.wait_for_room():
            return False
        self._items.append(item)
        if self._item_wanted:
            _give(self._item)
        return True

    def wait_for_room(self) -> bool:
        """Waits until an entry fits; ``False`` once stopped."""
        while not self._stopped:
            if len(self._items) < self._size:
                return True
            self._room_wanted = True
            if len(self._items) >= self._size and not self._stopped:
                self._room.acquire()
            self._room_wanted = False
        return False

    def has_room(self) -> bool:
        return len(self._items) < self._size

    def get(self) -> tuple[str, Any, Any] | None:
        """Waits for the next entry; ``None`` once stopped."""
        while not self._stopped:
            if self._items:
                item = self._items.popleft()
                if self._room_wanted:
                    _give(self._room)
                return item
            self._item_wanted = True
            if not self._items and not self._stopped:
                self._item.acquire()
            self._item_wanted = False
        return None

    def stop(self) -> None:
        self._stopped = True
        self._items.clear()
        _give(self._room)
        _give(self._item)


def _signal() -> threading.Lock:
    """A lock held from the start: ``acquire()`` waits until someone gives it."""
    lock = threading.Lock()
    lock.acquire()
    return lock


def _give(signal: threading.Lock) -> None:
    try:
        signal.release()
    except RuntimeError:  # given already and not yet taken
        pass


def _produce(parent: DatasetIterator[Any], buffer: _Buffer) -> None:
    """The thread's loop: reads ``parent`` into ``buffer`` until the end or a stop."""
    try:
        while _step(parent, buffer):
            pass
    except BaseException as exc:  # not from a parent's next(): hand it over, then end
        buffer.put((_FATAL, exc, None))


# Every thread started and its buffer, so that interpreter exit can stop them.
# A thread stays listed until it has ended completely (its parent iterator
# torn down too); finished ones are dropped when the next one starts.
_threads: dict[threading.Thread, _Buffer] = {}
_threads_lock = threading.Lock()


def _track(thread: threading.Thread, buffer: _Buffer) -> None:
    with _threads_lock:
        for ended in [t for t in _threads if t.ident is not None and not t.is_alive()]:
            del _threads[ended]
        _threads[thread] = buffer
    # atexit runs the last registered handler first: this one then runs before
    # the exit handlers of libraries imported earlier (JAX's, say).
    atexit.unregister(_stop_all)
    atexit.register(_stop_all)


def _stop_all() -> None:
    """At interpreter exit: stops every thread and waits for them (10 s at most in all).

    A thread still inside a native library (a JAX transfer, an Arrow reader's
    teardown) while the interpreter shuts down can abort the process.
    """
    with _threads_lock:
        started = list(_threads.items())
    for _, buffer in started:
        buffer.stop()
    deadline = time.monotonic() + 10  # together, not each: a stuck read must not hold exit
    for thread, _ in started:
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _step(parent: DatasetIterator[Any], buffer: _Buffer) -> bool:
    try:
        value = next(parent)
    except StopIteration:
        buffer.put((_END, None, parent.get_state()))
        return False
    except Exception as exc:  # ``exc`` is unbound on return: no cycle through this frame
        return buffer.put((_ERROR, exc, parent.get_state()))
    return buffer.put((_VALUE, value, parent.get_state()))


class _ThreadPrefetchIterator(DatasetIterator[Any]):
    _stage = "thread_prefetch"
    _state_fields = fields(parent=parent_state)

    def __init__(self, parent: DatasetIterator[Any], buffer_size: int) -> None:
        super().__init__(parent)
        self._size = buffer_size
        self._parent_state: dict[str, Any] = parent.get_state()
        self._buffer: _Buffer | None = None
        self._thread: threading.Thread | None = None
        self._stop: weakref.finalize | None = None
        self._exhausted = False
        metrics.add_buffer(self)

    def __next__(self) -> Any:
        if self._closed:
            self._raise_closed()
        if not self._size:
            return next(self._parent)
        if self._exhausted:
            raise StopIteration
        buffer = self._buffer if self._buffer is not None else self._start_thread()
        item = buffer.get()
        if item is None:  # closed by another thread while this one waited
            raise closed_error(type(self).__name__)
        kind, value, state = item
        del item
        if kind == _FATAL:
            self._stop_thread()
            self._parent.set_state(self._parent_state)
        else:
            self._parent_state = state
            if kind == _VALUE:
                return value
            if kind == _END:
                self._exhausted = True
                self._stop_thread()
                raise StopIteration
        try:
            raise value
        finally:
            value = None  # no cycle exception -> traceback -> this frame -> exception

    def start_prefetch(self) -> None:
        """Starts the reading thread now, so elements are ready by the first ``next()``."""
        if self._closed:
            self._raise_closed()
        if self._size and self._buffer is None and not self._exhausted:
            self._start_thread()

    def _start_thread(self) -> _Buffer:
        buffer = self._buffer = _Buffer(self._size)
        self._stop = weakref.finalize(self, buffer.stop)
        self._thread = threading.Thread(
            target=self._producer(),
            args=(self._parent, buffer),
            name=f"chute-thread-prefetch-{id(self):x}",
            daemon=True,
        )
        _track(self._thread, buffer)
        self._thread.start()
        return buffer

    def _producer(self) -> Callable[[DatasetIterator[Any], _Buffer], None]:
        """The thread's loop; it must not refer to ``self`` (see the module docstring)."""
        return _produce

    def _warm_up(self) -> None:
        """Starts reading ahead now rather than at the first ``next()``."""
        if self._buffer is None and self._size and not self._exhausted and not self._closed:
            self._start_thread()

    def _signal_stop(self) -> None:
        """Tells the thread to stop, without waiting for it."""
        if self._stop is not None:
            self._stop()

    def _stop_thread(self, timeout: float | None = None) -> None:
        """Stops the thread and waits for it (``timeout`` seconds at most), freeing the parent."""
        thread = self._thread
        if thread is None:
            return
        self._signal_stop()
        if thread is not threading.current_thread():
            thread.join(timeout)
        if thread.is_alive() and thread is not threading.current_thread():
            logger.warning(
                "chute: the reading thread of a thread_prefetch stage did not stop within "
                "%.1f s of close() (the stage before it is stuck, e.g. a read that never "
                "returns); it is left behind as a daemon thread and will not block exit.",
                timeout,
            )
            with _threads_lock:  # nothing waits for it at exit either
                _threads.pop(thread, None)
        self._thread = self._buffer = self._stop = None

    def _buffer_fill(self) -> tuple[int, int]:
        """Elements waiting in the buffer, and its size (read by the statistics only)."""
        buffer = self._buffer
        return (len(buffer._items) if buffer is not None else 0), self._size

    def get_state(self) -> dict[str, Any]:
        parent = self._parent_state if self._size else self._parent.get_state()
        return self._state(parent=parent)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent")
        self._stop_thread()
        self._parent.set_state(state["parent"])
        self._parent_state = state["parent"]
        self._exhausted = False

    def _reach(self) -> int | None:
        return self._parent._reach()

    def _get_next_index(self) -> int:
        if self._size and self._buffer is not None:  # the parent ran ahead: bring it back
            self.set_state(self.get_state())
        return get_next_index(self._parent)

    def _set_next_index(self, index: int) -> None:
        self._stop_thread()
        set_next_index(self._parent, index)
        self._parent_state = self._parent.get_state()
        self._exhausted = False

    def close(self) -> None:
        if self._closed:
            return
        self._stop_thread(timeout=_CLOSE_WAIT_S)
        super().close()


class ThreadPrefetchDatasetIterator(_ThreadPrefetchIterator):
    """Reads an existing iterator ahead on a background thread (Grain's name).

    The iterator form of ``ThreadPrefetchIterDataset``: wraps ``parent``, a
    ``DatasetIterator`` (anything with ``get_state``/``set_state``), and keeps
    its checkpoints exact.

    Args:
      parent: the iterator to read ahead.
      prefetch_buffer_size: how many elements to read ahead; ``0`` reads inline.

    >>> from chute import MapDataset
    >>> it = ThreadPrefetchDatasetIterator(iter(MapDataset.range(4).to_iter_dataset()), 2)
    >>> next(it), it.get_state()["parent"]["next_index"]
    (0, 1)
    >>> list(it)
    [1, 2, 3]
    """

    def __init__(self, parent: DatasetIterator[Any], prefetch_buffer_size: int) -> None:
        if not (callable(getattr(parent, "get_state", None)) and hasattr(parent, "__next__")):
            raise TypeError(
                "ThreadPrefetchDatasetIterator takes an iterator with get_state() and "
                f"set_state(), e.g. iter(dataset) (got {parent!r} that is a "
                f"{type(parent).__name__})."
            )
        size = check_int(
            prefetch_buffer_size, "ThreadPrefetchDatasetIterator: prefetch_buffer_size", minimum=0
        )
        super().__init__(parent, size)
