"""``make_global_batch``: one global ``jax.Array`` from every process's local batch.

In multi-host training each JAX process reads its own shard of the data (for
example with ``ShardByJaxProcess``), so each holds only its part of the global
batch.  ``make_global_batch`` hands every leaf of that local batch to
``jax.make_array_from_process_local_data``, which puts the process's rows on
its own devices and stitches the parts of all processes into one global
``jax.Array``: with ``P`` processes each holding ``B`` rows and a sharding that
splits the leading axis over all of them, the global leading dimension is
``P * B``.

JAX is imported only when ``make_global_batch`` is called.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["make_global_batch"]


def _import_jax() -> Any:
    try:
        import jax
    except ImportError as exc:
        raise ImportError(
            "chute.experimental.make_global_batch needs JAX, which is not installed: "
            "pip install chute[jax]"
        ) from exc
    return jax


def _local_batch_shards(sharding: Any, ndim: int) -> int:
    """How many distinct pieces of the leading axis this process's devices hold.

    The sharding is probed with a global shape whose every dimension is the
    number of devices, which any partition of the mesh divides.
    """
    probe = (max(1, len(sharding.device_set)),) * ndim
    indices = sharding.addressable_devices_indices_map(probe).values()
    return len({(index[0].start, index[0].stop) for index in indices})


def _check_leaf(path: str, leaf: Any, sharding: Any) -> np.ndarray:
    """The leaf as an array whose leading dimension divides over the local shards."""
    array = np.asarray(leaf)
    if array.ndim == 0:
        raise ValueError(
            f"make_global_batch: the leaf at {path or 'the root'} is a scalar; every "
            "leaf needs a leading (batch) axis to split over the processes."
        )
    shards = _local_batch_shards(sharding, array.ndim)
    if array.shape[0] % shards:
        raise ValueError(
            f"make_global_batch: the leaf at {path or 'the root'} has shape "
            f"{array.shape}, whose leading dimension {array.shape[0]} does not divide "
            f"into the {shards} batch shards this process's devices hold under "
            f"{sharding}; use a per-process batch size that is a multiple of {shards} "
            "(e.g. Batch(..., drop_remainder=True) with such a size)."
        )
    return array


def make_global_batch(local_batch: Any, sharding: Any) -> Any:
    """Turns this process's part of a batch into global ``jax.Array`` leaves.

    Every process must call it with the same PyTree structure and the same
    ``sharding``, on batches whose leaves have the same shape on every process.

    Args:
      local_batch: a PyTree of numpy arrays (or array-likes); the leading axis
        of each leaf is this process's share of the global batch.
      sharding: a ``jax.sharding.Sharding`` over the devices of all processes,
        for example ``NamedSharding(mesh, PartitionSpec("data"))``.

    Returns:
      The same PyTree with each leaf a global ``jax.Array`` laid out by
      ``sharding``; its leading dimension is the sum over the processes that
      the leading axis is split over.

    Raises:
      ImportError: JAX is not installed.
      TypeError: ``sharding`` is not a ``jax.sharding.Sharding``.
      ValueError: a leaf is a scalar, or its leading dimension does not divide
        evenly over this process's shards of the leading axis, or JAX rejects
        the leaf (the message names the leaf).

    >>> import jax, numpy as np
    >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    >>> spec = jax.sharding.PartitionSpec("data")
    >>> batch = make_global_batch({"x": np.arange(4)}, jax.sharding.NamedSharding(mesh, spec))
    >>> batch["x"].shape
    (4,)
    """
    jax = _import_jax()
    if not isinstance(sharding, jax.sharding.Sharding):
        raise TypeError(
            "make_global_batch: 'sharding' must be a jax.sharding.Sharding (got "
            f"{sharding!r} that is a {type(sharding).__name__}); e.g. "
            "NamedSharding(Mesh(jax.devices(), ('data',)), PartitionSpec('data'))."
        )

    def to_global(key_path: Any, leaf: Any) -> Any:
        path = jax.tree_util.keystr(key_path)
        array = _check_leaf(path, leaf, sharding)
        try:
            return jax.make_array_from_process_local_data(sharding, array)
        except ValueError as exc:
            raise ValueError(
                f"make_global_batch: the leaf at {path or 'the root'} with shape "
                f"{array.shape} does not fit {sharding}: {exc}"
            ) from exc

    return jax.tree_util.tree_map_with_path(to_global, local_batch)
