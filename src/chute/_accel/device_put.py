"""``device_put``: two-stage prefetch that moves each batch onto JAX devices.

One background thread keeps up to ``cpu_buffer_size`` batches read ahead on
the host and up to ``device_buffer_size`` batches already transferred (and
finished transferring) on the device, so the training step never waits for a
copy.  Transfers come first: whenever the device side has room the thread
moves the oldest host batch over, and only reads further ahead while the
device side is full.

One thread rather than one per buffer: each thread that wakes when the step
takes a batch competes with the training loop for the GIL, and two of them
stalled the loop by up to a few milliseconds at the moment it asked for its
batch (``benchmarks/bench_device.py``).

A checkpoint is the state after the last batch *returned*; ``close()``, a
``break`` out of the loop, an exception in its body or garbage collection stop
the thread.

JAX is imported only when ``device_put`` is called.  At interpreter exit the
thread is stopped and joined before JAX shuts down (``thread_prefetch.py``):
a daemon thread left inside a transfer aborts the process.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chute._core.dataset import DatasetIterator, IterDataset, MapDataset, as_iter_dataset
from chute._core.errors import annotate
from chute._core.state_check import count, fields
from chute._core.validate import check_int
from chute._stages.thread_prefetch import (
    _END,
    _ERROR,
    _FATAL,
    _VALUE,
    _Buffer,
    _ThreadPrefetchIterator,
)

if TYPE_CHECKING:
    import jax


def _import_jax() -> Any:
    try:
        import jax
    except ImportError as exc:
        raise ImportError(
            "chute.experimental.device_put needs JAX, which is not installed: "
            "pip install chute[jax]"
        ) from exc
    return jax


def device_put(
    ds: IterDataset[Any] | MapDataset[Any],
    device: jax.Device | jax.sharding.Sharding,
    *,
    cpu_buffer_size: int = 4,
    device_buffer_size: int = 2,
) -> IterDataset[Any]:
    """Moves every batch of ``ds`` onto ``device``, prefetching on host and device.

    Args:
      ds: the pipeline whose batches (PyTrees of arrays) to transfer; a
        MapDataset is read in order.
      device: a ``jax.Device``, or a ``jax.sharding.Sharding`` (for example a
        ``NamedSharding`` that splits the leading, batch axis over a mesh).
      cpu_buffer_size: batches read ahead and kept on the host.
      device_buffer_size: batches already transferred and kept on the device.

    Returns:
      An IterDataset of the same batches as ``jax.Array`` leaves on ``device``.

    Raises:
      ImportError: JAX is not installed.
      TypeError: ``device`` is neither a Device nor a Sharding.
      ValueError: a buffer size is negative; or, while iterating, a batch's
        leading dimension does not divide evenly over the shards of ``device``.

    >>> import jax
    >>> from chute import MapDataset
    >>> ds = device_put(MapDataset.range(3), jax.devices()[0])
    >>> [int(x) for x in ds]
    [0, 1, 2]
    """
    jax = _import_jax()
    if not isinstance(device, (jax.Device, jax.sharding.Sharding)):
        raise TypeError(
            "device_put: 'device' must be a jax.Device or a jax.sharding.Sharding "
            f"(got {device!r} that is a {type(device).__name__}); "
            "use jax.devices()[0] or a NamedSharding."
        )
    cpu = check_int(cpu_buffer_size, "device_put: cpu_buffer_size", minimum=0)
    on_device = check_int(device_buffer_size, "device_put: device_buffer_size", minimum=0)
    return _DevicePutIterDataset(ds, _Transfer(jax, device), cpu, on_device)


class _DevicePutIterDataset(IterDataset[Any]):
    """The batches of ``parent`` moved onto a device by ``transfer``, read ahead."""

    def __init__(
        self,
        parent: IterDataset[Any] | MapDataset[Any],
        transfer: _Transfer,
        cpu_buffer_size: int,
        device_buffer_size: int,
    ) -> None:
        parent = as_iter_dataset(parent, "device_put")
        super().__init__(parent)
        self._transfer = transfer
        self._cpu, self._device = cpu_buffer_size, device_buffer_size

    def __iter__(self) -> DatasetIterator[Any]:
        return _DevicePutIterator(iter(self._parent), self._transfer, self._cpu, self._device)

    def _describe(self) -> str:
        return (
            f"{self._parent!r}, {self._transfer!r}, cpu_buffer_size={self._cpu}, "
            f"device_buffer_size={self._device}"
        )


class _DevicePutIterator(_ThreadPrefetchIterator):
    """A thread-prefetch iterator whose thread also transfers what it read.

    Its buffer holds the transferred batches (``device_buffer_size`` of them);
    the thread's own queue holds the host batches read ahead.  With no device
    buffer the buffer holds host batches and ``next()`` transfers each one.
    """

    _stage = "device_put"

    def __init__(
        self, parent: DatasetIterator[Any], transfer: _Transfer, cpu: int, on_device: int
    ) -> None:
        super().__init__(parent, on_device or cpu)
        self._transfer = transfer
        self._cpu, self._on_device = cpu, on_device
        self._moved = 0

    def __next__(self) -> Any:
        batch = super().__next__()
        self._moved += 1
        if self._on_device:
            return batch
        return self._transfer.move(batch, self._moved - 1)

    _state_fields = fields(**_ThreadPrefetchIterator._state_fields, moved=count())

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "moved": self._moved}

    def set_state(self, state: dict[str, Any]) -> None:
        moved = self._check_state(state, "parent", "moved")["moved"]
        super().set_state(state)
        self._moved = int(moved)

    def _producer(self) -> Callable[[DatasetIterator[Any], _Buffer], None]:
        if not self._on_device:
            return super()._producer()
        return functools.partial(_read_and_move, self._transfer, self._cpu, self._moved)


def _read_and_move(
    transfer: _Transfer, cpu: int, moved: int, parent: DatasetIterator[Any], buffer: _Buffer
) -> None:
    """The thread's loop: transfer whenever the device side has room, else read ahead."""
    ahead: collections.deque[tuple[str, Any, Any]] = collections.deque()
    ended = False
    try:
        while True:
            if not buffer.has_room():
                if len(ahead) < cpu and not ended:
                    ended = _read(parent, ahead)
                elif not buffer.wait_for_room():
                    return
                continue
            if not ahead:
                if ended:
                    return
                ended = _read(parent, ahead)
            kind, value, state = ahead.popleft()
            if kind == _VALUE:
                kind, value = _move(transfer, value, moved)
                moved += 1
            if not buffer.put((kind, value, state)) or kind == _END:
                return
    except BaseException as exc:  # not from the parent's next(): hand it over, then end
        buffer.put((_FATAL, exc, None))


def _read(parent: DatasetIterator[Any], ahead: collections.deque[Any]) -> bool:
    """Reads one entry from ``parent`` into ``ahead``; ``True`` at the end of the data."""
    try:
        value = next(parent)
    except StopIteration:
        ahead.append((_END, None, parent.get_state()))
        return True
    except Exception as exc:
        ahead.append((_ERROR, exc, parent.get_state()))
        return False
    ahead.append((_VALUE, value, parent.get_state()))
    return False


def _move(transfer: _Transfer, batch: Any, index: int) -> tuple[str, Any]:
    try:
        return _VALUE, transfer.move(batch, index)
    except Exception as exc:
        return _ERROR, exc


class _Transfer:
    """Checks a batch against the sharding, transfers it and waits until it is there."""

    def __init__(self, jax: Any, device: Any) -> None:
        self._jax = jax
        self._device = device
        self._is_sharding = isinstance(device, jax.sharding.Sharding)

    def move(self, batch: Any, index: int) -> Any:
        """Returns ``batch`` on the device; an error gets a note naming batch ``index``."""
        try:
            if self._is_sharding:
                for leaf in self._jax.tree.leaves(batch):
                    _check_divisible(self._device, getattr(leaf, "shape", ()))
            return self._jax.block_until_ready(self._jax.device_put(batch, self._device))
        except Exception as exc:
            annotate(exc, "device_put", index)
            raise

    def __repr__(self) -> str:
        return f"jax.device_put(device={self._device!r})"


def _leading_shards(sharding: Any, shape: tuple[int, ...]) -> int:
    """How many pieces ``sharding`` cuts the leading axis of an array of ``shape`` into.

    Args:
      sharding: a ``jax.sharding.Sharding``.
      shape: the array's shape; only its rank matters.

    Returns:
      The number of shards along axis 0 (``1`` when the axis is not split).
    """
    if not shape:
        return 1
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is not None and mesh is not None:
        axes = spec[0] if len(spec) else None
        if axes is None:
            return 1
        names = (axes,) if isinstance(axes, str) else tuple(axes)
        return math.prod(int(mesh.shape[name]) for name in names)
    # Any other Sharding: ask it to cut an axis every split divides evenly.
    count = len(sharding.device_set)
    try:
        piece = sharding.shard_shape((count, *shape[1:]))[0]
    except Exception:  # a sharding that does not fit this rank: JAX will say so
        return 1
    return max(1, count // max(1, int(piece)))


def _check_divisible(sharding: Any, shape: tuple[int, ...]) -> None:
    shards = _leading_shards(sharding, tuple(shape))
    if shards > 1 and shape[0] % shards:
        devices = len(sharding.device_set)
        raise ValueError(
            f"device_put: a batch of size {shape[0]} (leading dimension of an array "
            f"of shape {tuple(shape)}) cannot be split evenly into {shards} shards "
            f"over {devices} devices by {sharding!r}. Use a batch size divisible by "
            f"{shards} (e.g. batch(..., drop_remainder=True) with a multiple of {shards})."
        )
