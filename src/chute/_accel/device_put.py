"""``device_put``: two-stage prefetch that moves each batch onto JAX devices.

The pipeline is ``ThreadPrefetchIterDataset(ds, cpu_buffer_size)`` then
``map(jax.device_put)`` then ``ThreadPrefetchIterDataset(..., device_buffer_size)``:
one thread keeps ``cpu_buffer_size`` batches ready on the host, a second one
transfers them and keeps ``device_buffer_size`` batches already on the device,
so the training step never waits for a copy.

A checkpoint is the state after the last batch *returned*, as for any
``ThreadPrefetchIterDataset``; ``close()``, a ``break`` out of the loop, an
exception in its body or garbage collection stop both threads.

JAX is imported only when ``device_put`` is called.  At interpreter exit the
iterators still open are closed (their threads joined) before JAX shuts down:
a daemon thread killed inside a transfer aborts the process.
"""

from __future__ import annotations

import atexit
import math
import threading
import weakref
from typing import TYPE_CHECKING, Any

from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.validate import check_int
from chute._stages.thread_prefetch import ThreadPrefetchIterDataset

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
    host = ThreadPrefetchIterDataset(ds, prefetch_buffer_size=cpu)
    moved = host.map(_Transfer(jax, device))
    return _DevicePrefetchIterDataset(moved, prefetch_buffer_size=on_device)


_open: weakref.WeakSet[DatasetIterator[Any]] = weakref.WeakSet()


_transferring: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _close_open_iterators() -> None:
    """Closes live iterators, then waits for threads of collected ones to finish."""
    for iterator in list(_open):
        iterator.close()
    for thread in list(_transferring):
        if thread is not threading.current_thread():
            thread.join(timeout=10)


class _DevicePrefetchIterDataset(ThreadPrefetchIterDataset):
    """The device-side prefetch; its iterators are closed at interpreter exit."""

    def __iter__(self) -> DatasetIterator[Any]:
        if not _open:  # after JAX's import: atexit runs this first
            atexit.unregister(_close_open_iterators)
            atexit.register(_close_open_iterators)
        iterator = super().__iter__()
        _open.add(iterator)
        return iterator


class _Transfer:
    """The map function: checks a batch against the sharding, then transfers it."""

    def __init__(self, jax: Any, device: Any) -> None:
        self._jax = jax
        self._device = device
        self._is_sharding = isinstance(device, jax.sharding.Sharding)

    def __call__(self, batch: Any) -> Any:
        _transferring.add(threading.current_thread())
        if self._is_sharding:
            for leaf in self._jax.tree.leaves(batch):
                _check_divisible(self._device, getattr(leaf, "shape", ()))
        return self._jax.device_put(batch, self._device)

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
