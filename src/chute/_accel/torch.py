"""PyTorch interop: batches as tensors, and chute datasets inside ``torch.utils.data``.

* ``to_torch(ds)`` is a chute ``IterDataset`` whose batches hold
  ``torch.Tensor`` leaves: numpy arrays are wrapped without a copy
  (``torch.from_numpy``; read-only, reversed or byte-swapped arrays are copied
  once), optionally pinned and moved to a device.  Its iterator is a chute
  iterator, so ``get_state()``/``set_state()`` and ``chute.checkpoint`` work.
* ``to_torch_dataset(ds)`` is a ``torch.utils.data.IterableDataset`` for
  ``torch.utils.data.DataLoader``.  With ``num_workers=0`` it checkpoints
  exactly: ``get_state()`` is the position of the batches the loader has
  returned, and ``set_state(state)`` makes the next ``iter(loader)`` resume
  there.  With ``num_workers > 0`` each torch worker reads an interleaved
  share of the elements (worker ``w`` of ``W`` takes ``w, w + W, ...``), but
  its position lives in that worker's process and cannot be saved; for
  parallel *and* checkpointable loading keep ``num_workers=0`` and put
  ``mp_prefetch()`` in the chute pipeline.

PyTorch is imported only when one of these is called (``pip install chute[torch]``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from chute._core.dataset import IterDataset, MapDataset
from chute._core.tree import map_structure

_TENSOR_KINDS = frozenset("biufc")  # bool, int, uint, float, complex


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "chute's PyTorch interop needs PyTorch: pip install chute[torch]"
        ) from exc
    return torch


def _check_dataset(ds: Any, what: str) -> IterDataset[Any] | MapDataset[Any]:
    if not isinstance(ds, (IterDataset, MapDataset)):
        raise TypeError(
            f"{what} takes a chute MapDataset or IterDataset (got {type(ds).__name__}); "
            "build the pipeline with chute.MapDataset.source(...)."
        )
    return ds


class _ToTorch:
    """The map function: numpy leaves to tensors, then pinned and moved as asked."""

    def __init__(self, torch: Any, device: Any, pin_memory: bool, non_blocking: bool) -> None:
        self._from_numpy = torch.from_numpy
        self._device = None if device.type == "cpu" else device
        self._pin, self._non_blocking = pin_memory, non_blocking

    def _leaf(self, leaf: Any) -> Any:
        if isinstance(leaf, np.generic):
            leaf = np.asarray(leaf)
        if not isinstance(leaf, np.ndarray) or leaf.dtype.kind not in _TENSOR_KINDS:
            return leaf
        if not leaf.flags.writeable or not leaf.dtype.isnative or any(s < 0 for s in leaf.strides):
            leaf = leaf.astype(leaf.dtype.newbyteorder("="), order="C")
        tensor = self._from_numpy(leaf)
        if self._pin:
            tensor = tensor.pin_memory()
        if self._device is not None:
            tensor = tensor.to(self._device, non_blocking=self._non_blocking)
        return tensor

    def __call__(self, batch: Any) -> Any:
        return map_structure(self._leaf, batch)

    def __repr__(self) -> str:
        return f"to_torch(device={self._device or 'cpu'}, pin_memory={self._pin})"


def to_torch(
    ds: IterDataset[Any] | MapDataset[Any],
    *,
    device: Any = "cpu",
    pin_memory: bool = False,
    non_blocking: bool = False,
) -> IterDataset[Any]:
    """The batches of ``ds`` with ``torch.Tensor`` leaves, for a PyTorch training loop.

    Args:
      ds: the pipeline (a MapDataset is read in order).
      device: where the tensors go (``"cpu"``, ``"cuda"``, a ``torch.device``).
      pin_memory: copy each tensor into page-locked memory first, for fast
        (and, with ``non_blocking``, asynchronous) copies to a GPU.
      non_blocking: pass ``non_blocking=True`` to ``Tensor.to(device)``.

    Returns:
      An IterDataset; its iterators checkpoint like any chute iterator.
      Leaves that are not numeric numpy arrays (strings, Python objects) pass
      through unchanged.

    Raises:
      ImportError: PyTorch is not installed.
      TypeError: ``ds`` is not a chute dataset.
      ValueError: ``device`` is not a device, or ``pin_memory`` without CUDA.

    >>> from chute import MapDataset
    >>> [t.tolist() for t in to_torch(MapDataset.range(5).batch(2))]
    [[0, 1], [2, 3], [4]]
    """
    torch = _import_torch()
    _check_dataset(ds, "to_torch()")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"to_torch(): {device!r} is not a torch device ({exc}).") from None
    if pin_memory and not torch.cuda.is_available():
        raise ValueError(
            "to_torch(pin_memory=True) needs a CUDA build of PyTorch with a GPU, and "
            "torch.cuda.is_available() is False; leave pin_memory=False on this machine."
        )
    it_ds = ds.to_iter_dataset() if isinstance(ds, MapDataset) else ds
    return it_ds.map(_ToTorch(torch, dev, bool(pin_memory), bool(non_blocking)))


def to_torch_dataset(ds: IterDataset[Any] | MapDataset[Any]) -> Any:
    """``ds`` as a ``torch.utils.data.IterableDataset`` with chute's checkpoints.

    Give the DataLoader ``batch_size=None`` when the chute pipeline batches.
    See the module docstring for how worker processes share the data.

    Args:
        ds: A chute MapDataset or IterDataset.

    >>> import torch
    >>> from chute import MapDataset
    >>> data = to_torch_dataset(MapDataset.range(4).batch(2))
    >>> loader = torch.utils.data.DataLoader(data, batch_size=None)
    >>> [b.tolist() for b in loader]
    [[0, 1], [2, 3]]
    """
    _import_torch()
    return _dataset_class()(_check_dataset(ds, "to_torch_dataset()"))


def _iterate(ds: IterDataset[Any] | MapDataset[Any], torch: Any) -> Any:
    """An iterator over ``ds``, or over this torch worker's share of it."""
    info = torch.utils.data.get_worker_info()
    if info is not None:
        from chute._execution import tuning

        tuning.in_worker_process()  # the torch workers share the cores: no threads unless I/O
    if info is None or info.num_workers == 1:
        return iter(ds)
    if isinstance(ds, MapDataset):
        return iter(ds[info.id :: info.num_workers])
    from chute._stages.slicing import share

    try:
        return iter(share(ds, info.id, info.num_workers, sequential=False))
    except ValueError as exc:
        raise ValueError(
            f"to_torch_dataset(): cannot share this pipeline among {info.num_workers} torch "
            f"workers ({exc}). Use num_workers=0, and mp_prefetch() in the chute pipeline "
            "for parallelism."
        ) from None


@functools.cache
def _dataset_class() -> type:
    torch = _import_torch()
    base: Any = torch.utils.data.IterableDataset

    class ChuteIterableDataset(base):
        """A chute dataset for ``torch.utils.data.DataLoader``; see ``to_torch_dataset``."""

        def __init__(self, ds: IterDataset[Any] | MapDataset[Any]) -> None:
            super().__init__()
            self.dataset = ds
            self._iterator: Any = None
            self._pending: Any = None

        def __iter__(self) -> Any:
            if self._pending is not None and torch.utils.data.get_worker_info() is not None:
                raise ValueError(
                    "to_torch_dataset(): a state set with set_state() restores only a "
                    "DataLoader with num_workers=0."
                )
            iterator = _iterate(self.dataset, torch)
            if self._pending is not None:
                iterator.set_state(self._pending)
                self._pending = None
            self._iterator = iterator
            return iterator

        def get_state(self) -> Any:
            """The position of the latest iteration (``num_workers=0`` only)."""
            if self._iterator is None:
                raise ValueError(
                    "to_torch_dataset(): no iteration to save in this process; iterate "
                    "the DataLoader with num_workers=0 (torch workers keep their own "
                    "positions, which cannot be saved)."
                )
            return self._iterator.get_state()

        def set_state(self, state: Any) -> None:
            """Makes the next iteration (``iter(loader)``) start at ``state``."""
            self._pending = state

    ChuteIterableDataset.__module__ = __name__
    globals()["ChuteIterableDataset"] = ChuteIterableDataset
    return ChuteIterableDataset


def __getattr__(name: str) -> Any:
    # Lets pickle (spawned torch workers) find the lazily built class.
    if name == "ChuteIterableDataset":
        return _dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
