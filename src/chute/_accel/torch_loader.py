"""``chute.torch.DataLoader``: PyTorch's DataLoader arguments on chute's workers.

The loader plans each epoch as a sequence of index batches (``_EpochBatches``):
batch ``k`` of epoch ``e`` is a pure function of the loader's arguments, the
epoch's seed and ``k``.  Sequential order and ``shuffle=True`` (chute's global
shuffle) are computed where they are read; an explicit ``sampler`` or
``batch_sampler`` is iterated once per epoch in this process, as PyTorch does,
and its list of batches travels to the workers.  Workers are chute's
(``mp_prefetch``): worker ``w`` of ``W`` fetches and collates batches
``w, w + W, ...``, the same assignment PyTorch makes, and the parent reads
them in turn.

The state is ``(seed, epoch, batches yielded, finished)`` plus what an explicit
sampler needs to repeat its epoch, so it is a few numbers, costs microseconds,
and restores into any number of workers: the resumed epoch is the same plan
read from batch ``yielded`` on.  A dataset with a state of its own (torchdata's
``Stateful``: ``state_dict()``/``load_state_dict()``) adds it: in process, the
dataset's; with workers, the one after the last batch of each worker's role
(batch ``k`` is role ``k % W``'s), which a resume at batch ``y`` hands to new
worker ``j`` as role ``(y + j) % W`` (then with the same ``num_workers``).

Iterable-style datasets run as PyTorch runs them: each worker iterates its own
copy (shard it with ``get_worker_info()``), batches its own elements, and the
parent takes the workers' batches in turn, skipping workers that ended.  Their
state is, per worker, the dataset's and its iterator's own states where they
have them, else how many batches the worker delivered, which a restore reads
again (the dataset must yield the same elements again); it needs the same
``num_workers``.

Big lists of plain records in a map-style dataset reach the workers packed
(``_PackedList``), so forked workers do not copy their pages by reading them.
One iterator at a time: a new ``iter()`` stops the previous one's workers.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import pickle
import queue
import random
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from chute._accel.torch import _import_torch
from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.errors import WorkerDiedError, add_note
from chute._core.options import MultiprocessingOptions, ReadOptions
from chute._core.sharding import ShardOptions, even_split
from chute._core.tree import map_structure
from chute._execution import processes, worker_seeds

__all__ = ["DataLoader", "GlobalShuffleSampler", "ShardByRank"]

_STATE_VERSION = 1
_STATE_KIND = "chute.torch.DataLoader"


def _derive(*parts: int | str) -> int:
    """A 63-bit seed from ``parts`` (stable across processes and Python versions)."""
    text = json.dumps(parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


# -- the plan of one epoch ---------------------------------------------------------------


class GlobalShuffleSampler:
    """``shuffle=True``'s sampler: chute's global shuffle of ``range(n)``, one order per epoch.

    A torch ``Sampler`` in all but its base class (``len``, ``iter``); the loader
    sets its ``seed`` at each epoch from the loader's ``generator``.  The order
    depends only on ``(n, seed, shard)``: the same on every machine and worker
    count.  ``seed=None`` reads in order; ``shard`` is ``(start, stop)``, the
    block of ``range(n)`` this rank reads (``shard_options``).

    >>> s = GlobalShuffleSampler(5, seed=3)
    >>> sorted(s) == [0, 1, 2, 3, 4], len(s), list(s) == list(GlobalShuffleSampler(5, seed=3))
    (True, 5, True)
    """

    def __init__(self, n: int, seed: int | None = 0, shard: tuple[int, int] | None = None) -> None:
        self.n, self.seed = int(n), None if seed is None else int(seed)
        self._start, self._stop = shard if shard is not None else (0, self.n)

    def order(self) -> MapDataset[int]:
        """The epoch's indices as a chute MapDataset (random access, nothing materialised)."""
        base = MapDataset.range(self._start, self._stop)
        return base.shuffle(seed=self.seed) if self.seed is not None else base

    def __len__(self) -> int:
        return self._stop - self._start

    def __iter__(self) -> Iterator[int]:
        order = self.order()
        step = 4096
        for start in range(0, len(order), step):
            yield from (
                int(i) for i in order._getitems(range(start, min(start + step, len(order))))
            )

    def __repr__(self) -> str:
        return f"GlobalShuffleSampler(n={self.n}, seed={self.seed})"


class ShardByRank(ShardOptions):
    """This process's shard by its ``torch.distributed`` rank (``shard_options=`` of the loader).

    The rank and world size come from the initialised process group, else from
    the ``RANK`` and ``WORLD_SIZE`` environment variables (``torchrun`` sets
    them), else this is shard 0 of 1.

    Args:
        drop_remainder: Give every rank the same number of elements, dropping the rest.

    >>> ShardByRank()  # a single process
    ShardByRank(shard_index=0, shard_count=1, drop_remainder=False)
    """

    def __init__(self, drop_remainder: bool = False) -> None:
        torch = _import_torch()
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            index, count = dist.get_rank(), dist.get_world_size()
        else:
            index = int(os.environ.get("RANK", "0"))
            count = int(os.environ.get("WORLD_SIZE", "1"))
        super().__init__(shard_index=index, shard_count=count, drop_remainder=drop_remainder)


class _EpochBatches(Sequence[Any]):
    """Batch ``k`` of an epoch: ``(k, indices)`` (``(k, index)`` without batching).

    ``order`` is a chute MapDataset of indices (sequential or shuffled), read
    ``batch_size`` at a time; or ``planned`` holds the batches an explicit
    sampler made.  Picklable: it travels to the workers.
    """

    def __init__(
        self,
        *,
        order: MapDataset[int] | None = None,
        batch_size: int | None = None,
        drop_last: bool = False,
        planned: list[Any] | None = None,
    ) -> None:
        self._order, self._planned = order, planned
        self._batch_size, self._drop_last = batch_size, drop_last
        if planned is not None:
            self._len = len(planned)
        else:
            assert order is not None
            n = len(order)
            if batch_size is None:
                self._len = n
            else:
                self._len = n // batch_size if drop_last else -(-n // batch_size)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, k: Any) -> Any:
        if not isinstance(k, (int, np.integer)):
            raise TypeError("_EpochBatches takes one int index")
        k = int(k)
        if not 0 <= k < self._len:
            raise IndexError(k)
        if self._planned is not None:
            return k, self._planned[k]
        order = self._order
        assert order is not None
        if self._batch_size is None:
            return k, int(order[k] or 0)
        start = k * self._batch_size
        stop = min(start + self._batch_size, len(order))
        return k, [int(i) for i in order._getitems(range(start, stop))]  # one batched read


# -- what runs in the workers --------------------------------------------------------------


_PACK_AT_LEAST = 50_000  # elements: below this, copy-on-read costs little
_PACKABLE = (tuple, dict, list, str, bytes, int, float, bool, type(None))


def _packable(value: Any) -> bool:
    """A big list or tuple of plain elements (``pack_lists``)."""
    if type(value) not in (list, tuple) or len(value) < _PACK_AT_LEAST:
        return False
    return all(type(x) in _PACKABLE for x in value)


class _PackedList(Sequence[Any]):
    """A list's elements as pickles in one NumPy buffer: read-only, random access.

    Forked workers share its two arrays; reading an element unpickles a fresh
    copy and writes to no shared page (a list's objects, whose reference counts
    change on every read, would be copied page by page).
    """

    def __init__(self, items: Sequence[Any]) -> None:
        blobs = [pickle.dumps(x, protocol=5) for x in items]
        sizes = np.fromiter(map(len, blobs), np.int64, len(blobs))
        self._ends = np.cumsum(sizes)
        self._data = np.frombuffer(b"".join(blobs), np.uint8)
        self._kind = type(items)
        self._source_id, self._len = id(items), len(items)
        self._probe = items[len(items) // 2] if len(items) else None

    def holds(self, items: Any) -> bool:
        """Whether this still packs ``items`` (the same list, its length, a middle element)."""
        return (
            id(items) == self._source_id
            and len(items) == self._len
            and (not self._len or items[self._len // 2] == self._probe)
        )

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            picked = [self[j] for j in range(*i.indices(self._len))]
            return tuple(picked) if self._kind is tuple else picked
        i = int(i)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"list index {i} out of range (length {self._len})")
        start = int(self._ends[i - 1]) if i else 0
        return pickle.loads(self._data[start : int(self._ends[i])].data)

    def __repr__(self) -> str:
        return f"chute packed {self._kind.__name__} of {self._len} elements"


class _TensorData:
    """A CPU tensor on its way from a worker: its numpy view crosses in shared memory."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> Any:
        return _TensorData, (self.array,)


def _ship(batch: Any) -> Any:
    """Tensors to ``_TensorData`` (numpy views, no copy), for chute's shared-memory transport."""
    torch = _import_torch()

    def leaf(x: Any) -> Any:
        view = _numpy_view(x, torch) if isinstance(x, torch.Tensor) else None
        return x if view is None else _TensorData(view)  # others are pickled whole

    return map_structure(leaf, batch)


def _numpy_view(tensor: Any, torch: Any) -> np.ndarray | None:
    """The tensor's data as a NumPy array without a copy; None for a tensor that is not
    dense on the CPU, or of a dtype NumPy lacks (bfloat16)."""
    if tensor.device.type != "cpu" or tensor.layout != torch.strided:
        return None
    try:
        return np.asarray(tensor.detach().numpy())
    except (TypeError, RuntimeError):
        return None


def _unship(batch: Any, torch: Any, pin: bool) -> Any:
    def leaf(x: Any) -> Any:
        if isinstance(x, _TensorData):
            x = torch.from_numpy(x.array)
        if pin and isinstance(x, torch.Tensor):
            x = x.pin_memory()
        return x

    return map_structure(leaf, batch)


class _Fetch:
    """Index batch to collated batch, as PyTorch's map-style fetcher makes it."""

    def __init__(
        self,
        dataset: Any,
        collate_fn: Callable[[Any], Any],
        auto_collation: bool,
        ship: bool,
        base_seed: int,
        seed_each_batch: bool,
        with_state: bool = False,
    ) -> None:
        self.dataset, self._collate = dataset, collate_fn
        self._auto, self._ship = auto_collation, ship
        self._base_seed, self._seed_each = base_seed, seed_each_batch
        self._with_state = with_state  # (batch, the dataset's state_dict() after it)
        # PyTorch's default collate builds a worker's batch in torch's shared memory (a new
        # segment a batch); chute's transport copies it into its own anyway, so it collates
        # in ordinary memory, or (``stacked_by``) stacks tensors into the transport's slots.
        self._private_collate = ship and _is_default_collate(collate_fn)
        self._leaves_fn: Callable[[list[Any]], Any] | None = None

    def stacked_by(self, leaves_fn: Callable[[list[Any]], Any]) -> _Fetch:
        """This fetch, its default collate stacking large tensors with ``leaves_fn`` (in a
        worker: straight into the shared memory the batch crosses in, with no copy)."""
        if not self._private_collate or self._collate is not _default_collate():
            return self
        twin = copy.copy(self)
        twin._leaves_fn = leaves_fn
        return twin

    def __call__(self, item: tuple[int, Any]) -> Any:
        k, indices = item
        if self._seed_each:
            worker_seeds.seed_globals(_derive(self._base_seed, "batch", k))
        dataset = self.dataset
        try:
            if self._auto:
                getitems = getattr(dataset, "__getitems__", None)
                data = getitems(indices) if getitems else [dataset[i] for i in indices]
            else:
                data = dataset[indices]
        except Exception as exc:
            add_note(
                exc,
                f"chute.torch.DataLoader: raised by {type(dataset).__name__}.__getitem__ "
                f"for batch {k} of the epoch (dataset indices {_shown(indices)}).",
            )
            raise
        try:
            if self._leaves_fn is not None:
                batch = _collate_into(data, self._leaves_fn)
            elif self._private_collate:
                with _no_worker_info():
                    batch = self._collate(data)
            else:
                batch = self._collate(data)
        except Exception as exc:
            add_note(exc, f"chute.torch.DataLoader: raised by collate_fn for batch {k}.")
            raise
        batch = _ship(batch) if self._ship else batch
        return (batch, dataset.state_dict()) if self._with_state else batch

    def __repr__(self) -> str:
        return f"fetch({type(self.dataset).__name__})"


def _shown(indices: Any) -> str:
    if isinstance(indices, list) and len(indices) > 8:
        return f"[{', '.join(map(str, indices[:8]))}, ... {len(indices)} in all]"
    return repr(indices)


def _default_collate() -> Any:
    return _import_torch().utils.data._utils.collate.default_collate


def _collate_into(data: Any, leaves_fn: Callable[[list[Any]], Any]) -> Any:
    """PyTorch's ``default_collate`` of ``data``, but tensors of one shape and dtype that
    numpy can view are stacked by ``leaves_fn`` (into a transport slot) and come out as
    ``_TensorData``; the rest as ``default_collate`` makes them, in ordinary memory."""
    torch = _import_torch()
    collate = torch.utils.data._utils.collate

    def tensors(batch: list[Any], *, collate_fn_map: Any = None) -> Any:
        views = [_numpy_view(t, torch) for t in batch]
        arrays = [a for a in views if a is not None]
        if len(arrays) == len(batch) and all(
            a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays
        ):
            return _TensorData(leaves_fn(arrays))
        return collate.collate_tensor_fn(batch, collate_fn_map=collate_fn_map)

    table = dict(collate.default_collate_fn_map)
    table[torch.Tensor] = tensors
    with _no_worker_info():
        return collate.collate(data, collate_fn_map=table)


def _is_default_collate(fn: Any) -> bool:
    utils = _import_torch().utils.data._utils.collate
    return fn is utils.default_collate or fn is utils.default_convert


@contextlib.contextmanager
def _no_worker_info() -> Iterator[None]:
    """``get_worker_info()`` is None inside (PyTorch's collate then uses ordinary memory)."""
    from torch.utils.data._utils import worker as torch_worker

    info, torch_worker._worker_info = torch_worker._worker_info, None
    try:
        yield
    finally:
        torch_worker._worker_info = info


class _WorkerInit:
    """Sets up a worker as PyTorch does: one thread, seeds, ``get_worker_info()``, then
    the user's ``worker_init_fn(worker_id)``; then, where ``loads`` holds one, the state
    of its (Stateful) dataset."""

    def __init__(
        self,
        dataset: Any,
        base_seed: int,
        user_fn: Callable[[int], None] | None,
        loads: list[Any] | None = None,
        first_role: int = 0,
    ) -> None:
        self.dataset, self._base_seed, self._user_fn = dataset, base_seed, user_fn
        self._loads, self._first_role = loads, first_role

    def __call__(self, index: int, count: int) -> None:
        torch = _import_torch()
        from torch.utils.data._utils import worker as torch_worker

        torch.set_num_threads(1)
        # Seeded as PyTorch seeds worker ``role``: the one whose batches this worker takes
        # (itself, but after a resume at batch k, worker j takes role (k + j) % W's).
        role = (self._first_role + index) % count
        seed = self._base_seed + role
        random.seed(seed)
        torch.manual_seed(seed)
        np.random.seed(torch_worker._generate_state(self._base_seed, role))
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=index, num_workers=count, seed=seed, dataset=self.dataset
        )
        if self._user_fn is not None:
            self._user_fn(index)
        if self._loads is not None and self._loads[index] is not None:
            self.dataset.load_state_dict(self._loads[index])


def _stateful(obj: Any) -> bool:
    """torchdata's ``Stateful``: an object with ``state_dict()`` and ``load_state_dict()``."""
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


class _StreamBatches:
    """How an iterable-style dataset is batched: ``batch_size`` samples a batch, the last
    one short unless ``drop_last``, as PyTorch batches it.  Picklable (it goes to workers)."""

    def __init__(self, dataset: Any, collate_fn: Any, batch_size: int | None, drop_last: bool):
        self.dataset, self._collate = dataset, collate_fn
        self._batch_size, self._drop_last = batch_size, drop_last

    def open(self, saved: dict[str, Any] | None = None) -> _StreamReader:
        """A reader from the start, or from ``saved`` (a reader's ``state()``)."""
        return _StreamReader(self, saved)


class _StreamReader(Iterator[Any]):
    """The batches of one pass over an iterable-style dataset.

    Its state is the dataset's and its iterator's own ``state_dict()`` where
    they have one (restored in torchdata's order: the dataset's, then
    ``iter()``, then the iterator's), else the number of batches taken, which a
    restore reads again without collating them.
    """

    def __init__(self, stream: _StreamBatches, saved: dict[str, Any] | None) -> None:
        self._stream, dataset = stream, stream.dataset
        saved = saved or {}
        self.taken, self._ended = int(saved.get("taken", 0)), False
        if saved.get("dataset") is not None and _stateful(dataset):
            dataset.load_state_dict(saved["dataset"])
        self._samples = iter(dataset)
        if saved.get("iter") is not None and _stateful(self._samples):
            self._samples.load_state_dict(saved["iter"])
        if saved.get("dataset") is None and saved.get("iter") is None:
            for _ in range(self.taken):  # neither has a state: read them again
                self._read()

    def _read(self) -> Any:
        """The next batch's samples (StopIteration at the end)."""
        size = self._stream._batch_size
        if size is None:
            return next(self._samples)
        chunk = []
        for _ in range(size):  # next() each time: an iterator that is its own __iter__ rewinds
            try:
                chunk.append(next(self._samples))
            except StopIteration:
                break
        if not chunk or (self._stream._drop_last and len(chunk) < size):
            raise StopIteration
        return chunk

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        try:
            samples = self._read()
        except StopIteration:
            self._ended = True
            raise
        self.taken += 1
        return self._stream._collate(samples)

    def state(self) -> dict[str, Any]:
        samples, dataset = self._samples, self._stream.dataset
        return {
            "taken": self.taken,
            "iter": samples.state_dict() if _stateful(samples) else None,
            "dataset": (
                dataset.state_dict() if samples is not dataset and _stateful(dataset) else None
            ),
        }


def _global_rngs() -> tuple[Any, Any, Any]:
    torch = _import_torch()
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _set_global_rngs(states: tuple[Any, Any, Any]) -> None:
    torch = _import_torch()
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


class _StreamShares(IterDataset[Any]):
    """Worker ``w``'s stream of an iterable-style dataset: the parent is
    ``range(W)``'s IterDataset, of which ``mp_prefetch`` gives worker ``w`` element ``w``."""

    def __init__(self, parent: IterDataset[int], stream: _StreamBatches, ship: bool) -> None:
        super().__init__(parent)
        self._stream, self._ship = stream, ship

    def __iter__(self) -> DatasetIterator[Any]:
        return _StreamSharesIterator(iter(self._parent), self._stream, self._ship)


class _StreamSharesIterator(DatasetIterator[Any]):
    """A worker's pass over its copy of the dataset; its state is its reader's."""

    _stage = "torch_iterable"

    def __init__(self, parent: DatasetIterator[int], stream: _StreamBatches, ship: bool) -> None:
        super().__init__(parent)
        self._stream, self._ship = stream, ship
        self._reader: _StreamReader | None = None
        self._before = parent.get_state()
        # The global generators as the worker started: a restore puts them back before it
        # opens (and maybe reads again) the stream, which batches made ahead had moved on.
        self._fresh_rngs = _global_rngs()
        self._fresh_dataset = None
        if _stateful(stream.dataset):
            try:
                self._fresh_dataset = stream.dataset.state_dict()
            except Exception:  # its state exists only once iter() made it: nothing to put back
                pass

    def __next__(self) -> Any:
        while True:
            if self._reader is None:
                self._before = self._parent.get_state()
                next(self._parent)
                self._reader = self._stream.open()
            try:
                batch = next(self._reader)
            except StopIteration:
                self._reader = None
                continue
            return _ship(batch) if self._ship else batch

    def get_state(self) -> dict[str, Any]:
        if self._reader is None:
            return {"parent": self._parent.get_state(), "reader": None}
        return {"parent": self._before, "reader": self._reader.state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._reader = None
        _set_global_rngs(self._fresh_rngs)
        if self._fresh_dataset is not None:  # a dataset that is its own iterator moved too
            self._stream.dataset.load_state_dict(self._fresh_dataset)
        if state["reader"] is not None:
            self._before = self._parent.get_state()
            next(self._parent)
            self._reader = self._stream.open(state["reader"])


# -- the loader ------------------------------------------------------------------------------


def _check_dataset(dataset: Any, torch: Any) -> str:
    """``"map"`` or ``"iterable"``; TypeError for anything else."""
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return "iterable"
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        return "map"
    if isinstance(dataset, torch.utils.data.Dataset) and hasattr(dataset, "__getitem__"):
        return "map"
    if hasattr(dataset, "__iter__") and not isinstance(dataset, (str, bytes)):
        return "iterable"
    raise TypeError(
        f"DataLoader: dataset must be a map-style dataset (with __getitem__ and __len__) or "
        f"an iterable-style one (a torch.utils.data.IterableDataset); got "
        f"{type(dataset).__name__}."
    )


def _check_count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"DataLoader: {name} should be an int >= {minimum} (got {value!r}).")
    return int(value)


class DataLoader:
    """PyTorch's ``DataLoader`` (and torchdata's ``StatefulDataLoader``) on chute.

    Takes ``torch.utils.data.DataLoader``'s arguments and yields the same batches
    for the same sampler order (sequential, or an explicit ``sampler`` /
    ``batch_sampler``), with chute's worker processes; ``state_dict()`` and
    ``load_state_dict()`` mean what they mean for ``StatefulDataLoader``: the
    state after the batches yielded so far, loaded before ``iter()``.  A
    map-style dataset's state restores into any ``num_workers``.

    What differs from PyTorch, on purpose:

    * ``shuffle=True`` uses chute's global shuffle (``GlobalShuffleSampler``),
      seeded from ``generator`` (or torch's global generator) at the first
      ``iter()``; every later epoch's order and worker seeds derive from that
      seed and the epoch number, so a resumed run repeats them exactly.
      Epoch 0's worker seeds equal PyTorch's (``base_seed + worker_id``).
    * Batches always arrive in order (``in_order=False`` is accepted; chute
      never reorders, so the state stays exact).
    * ``persistent_workers`` and ``snapshot_every_n_steps`` are accepted and
      checked: chute starts the workers at every ``iter()`` (a fork, in tens of
      milliseconds), and its state costs nothing to take, so there is nothing
      to snapshot.
    * ``multiprocessing_context``: None forks the workers as PyTorch does on
      Linux, also beside other threads and CUDA (the workers must not use
      CUDA), unless a forked child would break (JAX's runtime is initialised,
      say: then chute's fork server starts them); ``"spawn"`` and
      ``"forkserver"`` start them from chute's fork server, a fresh
      interpreter, to which the dataset is pickled.
    * ``seed_each_batch=True`` (chute's addition) seeds ``random``, NumPy and
      torch before each batch from the epoch's seed and the batch's number:
      random augmentations then repeat exactly after a resume into any number
      of workers (by default workers are seeded once, as PyTorch seeds them).
    * ``shard_options`` (chute's addition, a ``chute.ShardOptions``) reads only
      this rank's contiguous block of a map-style dataset, shuffled within it:
      sharding by rank without a ``DistributedSampler``.
    * ``pack_lists=True`` (chute's addition): a map-style dataset that is, or
      holds in an attribute, a Python list or tuple of at least 50,000 tuples,
      dicts, lists, strings or numbers reaches the workers with that list
      packed into one NumPy buffer of pickles (made once per loader, in about
      0.4 s a million elements; made again when the list changes length or
      identity).  Forked workers then read shared pages without writing to
      them: their memory stays flat over an epoch, where PyTorch's grows as
      reference counts copy every page read (pytorch#13246).  Each read gives
      a fresh copy of the element, so a worker cannot change the list's
      elements in place (in PyTorch such a change stays in that worker
      anyway); ``pack_lists=False`` hands the dataset over as it is.

    >>> loader = DataLoader(list(range(10)), batch_size=4)
    >>> [b.tolist() for b in loader], len(loader)
    ([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], 3)
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        snapshot_every_n_steps: int | None = 1,
        seed_each_batch: bool = False,
        shard_options: ShardOptions | None = None,
        pack_lists: bool = True,
    ) -> None:
        torch = _import_torch()
        self._torch = torch
        self._kind = _check_dataset(dataset, torch)
        self.dataset = dataset
        self.num_workers = _check_count(num_workers, "num_workers", 0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(
                f"DataLoader: timeout option should be non-negative (got {timeout!r})."
            )
        if self.num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "DataLoader: prefetch_factor option could only be specified in "
                "multiprocessing; let num_workers > 0 to enable multiprocessing, otherwise "
                "set prefetch_factor to None."
            )
        if prefetch_factor is None:
            prefetch_factor = 2
        self.prefetch_factor = _check_count(prefetch_factor, "prefetch_factor", 1)
        if persistent_workers and self.num_workers == 0:
            raise ValueError("DataLoader: persistent_workers option needs num_workers > 0.")
        if snapshot_every_n_steps is not None:
            _check_count(snapshot_every_n_steps, "snapshot_every_n_steps", 0)
        if multiprocessing_context is not None and not (
            multiprocessing_context in ("fork", "spawn", "forkserver")
            or hasattr(multiprocessing_context, "Process")
        ):
            raise ValueError(
                "DataLoader: multiprocessing_context should be 'fork', 'spawn', 'forkserver' "
                f"or a multiprocessing context (got {multiprocessing_context!r})."
            )
        if multiprocessing_context is not None and self.num_workers == 0:
            raise ValueError(
                "DataLoader: multiprocessing_context can only be used with multi-process "
                "loading (num_workers > 0), but got num_workers=0."
            )
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(
                f"DataLoader: worker_init_fn must be callable (got {worker_init_fn!r})."
            )
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable (got {collate_fn!r}).")
        if shard_options is not None and not isinstance(shard_options, ShardOptions):
            raise TypeError(
                f"DataLoader: shard_options must be a chute.ShardOptions (got {shard_options!r})."
            )
        if self._kind == "iterable":
            if shuffle not in (None, False):
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}."
                )
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified sampler option, "
                    f"but got sampler={sampler}."
                )
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified batch_sampler "
                    f"option, but got batch_sampler={batch_sampler}."
                )
            if shard_options is not None:
                raise ValueError(
                    "DataLoader: shard_options reads a block of a map-style dataset; shard an "
                    "IterableDataset inside its __iter__ (torch.distributed's rank)."
                )
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle.")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                    "shuffle, sampler, and drop_last."
                )
            batch_size, drop_last = None, False
        elif batch_size is None:
            if drop_last:
                raise ValueError(
                    "DataLoader: batch_size=None option disables auto-batching and is "
                    "mutually exclusive with drop_last."
                )
        else:
            batch_size = _check_count(batch_size, "batch_size", 1)
        if shard_options is not None and (sampler is not None or batch_sampler is not None):
            raise ValueError(
                "DataLoader: shard_options is mutually exclusive with sampler and batch_sampler "
                "(a DistributedSampler shards by itself)."
            )
        self.batch_size, self.drop_last, self.shuffle = batch_size, bool(drop_last), shuffle
        self.timeout, self.worker_init_fn = float(timeout), worker_init_fn
        self.generator, self.in_order = generator, bool(in_order)
        self.persistent_workers = bool(persistent_workers)
        self.multiprocessing_context = multiprocessing_context
        self._start_policy = _start_policy(multiprocessing_context)
        self.snapshot_every_n_steps = snapshot_every_n_steps
        self.seed_each_batch = bool(seed_each_batch)
        self.pack_lists = bool(pack_lists)
        self._packed: dict[str, _PackedList] = {}  # by attribute name, reused while unchanged
        self.shard_options = shard_options
        self._auto_collation = batch_size is not None or batch_sampler is not None
        if collate_fn is None:
            utils = torch.utils.data._utils.collate
            collate_fn = utils.default_collate if self._auto_collation else utils.default_convert
        self.collate_fn = collate_fn
        self.pin_memory = bool(pin_memory)
        self.pin_memory_device = pin_memory_device
        if self._kind == "map":
            self._shard = (
                even_split(len(dataset), shard_options)
                if shard_options is not None
                else (0, len(dataset))
            )
            if sampler is None and batch_sampler is None:
                if shuffle or shard_options is not None:  # seeded at each epoch when shuffled
                    sampler = GlobalShuffleSampler(
                        len(dataset), 0 if shuffle else None, self._shard
                    )
                else:
                    sampler = torch.utils.data.SequentialSampler(range(*self._shard))
            self._own_sampler = batch_sampler is None and (
                isinstance(sampler, GlobalShuffleSampler)
                or (
                    type(sampler) is torch.utils.data.SequentialSampler
                    and _is_range(sampler.data_source, len(dataset))
                )
            )
            if batch_sampler is None and batch_size is not None:
                batch_sampler = torch.utils.data.BatchSampler(sampler, batch_size, bool(drop_last))
            _check_planned(batch_sampler if batch_sampler is not None else sampler)
        else:
            self._own_sampler, self._shard = False, (0, 0)
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._iterator: _LoaderIterator | None = None
        self._loaded: dict[str, Any] | None = None  # load_state_dict() before iter()
        self._root_seed: int | None = None  # drawn at the first iter()
        self._epoch = -1  # the epoch of the last iterator
        self._sampler_state: Any = None  # what the sampler needs to repeat this epoch

    # -- torch's conventions ----------------------------------------------------------

    def __len__(self) -> int:
        if self._kind == "map":
            return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)
        n = len(self.dataset)  # TypeError when the iterable has no len, as in PyTorch
        if self.batch_size is None:
            return int(n)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __repr__(self) -> str:
        return (
            f"chute.torch.DataLoader(dataset={type(self.dataset).__name__}, "
            f"batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"num_workers={self.num_workers})"
        )

    def __iter__(self) -> _LoaderIterator:
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
        loaded, self._loaded = self._loaded, None
        if loaded is not None:
            self._root_seed = loaded["seed"]
            epoch, start = loaded["epoch"], loaded["yielded"]
            if loaded["finished"] or loaded["epoch"] < 0:
                epoch, start, sampler_state = epoch + 1, 0, None
            else:
                sampler_state = loaded["sampler"]
        else:
            epoch, start, sampler_state = self._epoch + 1, 0, None
        self._draw_seed()
        assert self._root_seed is not None
        self._epoch = epoch
        base_seed = self._root_seed if epoch == 0 else _derive(self._root_seed, "epoch", epoch)
        positions = None
        if loaded is not None:
            positions = loaded["positions"]
            if epoch != loaded["epoch"]:  # a new epoch: only what the dataset itself holds
                kept = positions.get("dataset") or (positions.get("stream") or {}).get("dataset")
                positions = {"dataset": kept, "stream": {"taken": 0, "dataset": kept}}
        self._iterator = _LoaderIterator(self, epoch, start, base_seed, sampler_state, positions)
        return self._iterator

    # -- state -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state after the batches yielded so far: a restore resumes right after them.

        A few plain values (an explicit sampler's own state or generator state
        besides), taken in microseconds: call it every step if you like.
        """
        if self._loaded is not None:
            return dict(self._loaded)
        if self._iterator is not None:
            return self._iterator.state()
        self._draw_seed()  # a state taken before iter() pins the order that iter() reads
        positions = {"dataset": self.dataset.state_dict()} if _stateful(self.dataset) else {}
        return self._state(
            epoch=self._epoch, yielded=0, finished=True, sampler=None, positions=positions
        )

    def _draw_seed(self) -> None:
        """Draws the loader's seed, as PyTorch draws its base seed, unless it has one."""
        if self._root_seed is None:
            self._root_seed = int(
                self._torch.empty((), dtype=self._torch.int64)
                .random_(generator=self.generator)
                .item()
            )

    def _state(
        self,
        *,
        epoch: int,
        yielded: int,
        finished: bool,
        sampler: Any,
        positions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "positions": positions or {},
            "kind": _STATE_KIND,
            "version": _STATE_VERSION,
            "dataset": self._kind,
            "seed": self._root_seed,
            "epoch": epoch,
            "yielded": yielded,
            "finished": finished,
            "batches": self._len_or_none(),
            "num_workers": self.num_workers,
            "sampler": sampler,
        }

    def _len_or_none(self) -> int | None:
        try:
            return len(self)
        except TypeError:
            return None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resumes at ``state_dict`` (from ``state_dict()`` of a loader over the same data):
        the next ``iter()`` yields the batches that came after it."""
        if not isinstance(state_dict, dict) or state_dict.get("kind") != _STATE_KIND:
            what = sorted(state_dict)[:8] if isinstance(state_dict, dict) else state_dict
            raise ValueError(
                "DataLoader.load_state_dict: this is not a state of chute.torch.DataLoader "
                f"({what!r}); "
                "give it what state_dict() of a chute.torch.DataLoader returned."
            )
        if state_dict.get("version") != _STATE_VERSION:
            raise ValueError(
                f"DataLoader.load_state_dict: state version {state_dict.get('version')!r}; this "
                f"chute reads version {_STATE_VERSION}."
            )
        if state_dict["dataset"] != self._kind:
            raise ValueError(
                f"DataLoader.load_state_dict: the state is of a {state_dict['dataset']}-style "
                f"dataset's loader, this loader reads a {self._kind}-style one."
            )
        mine = self._len_or_none()
        if state_dict["batches"] != mine:
            raise ValueError(
                f"DataLoader.load_state_dict: the state's epoch has {state_dict['batches']} "
                f"batches, this loader's has {mine}: another dataset, batch_size, sampler or "
                "drop_last. Build the loader as the one that saved the state."
            )
        if (
            self._kind == "iterable"
            and not state_dict["finished"]
            and state_dict["num_workers"] != self.num_workers
        ):
            raise ValueError(
                "DataLoader.load_state_dict: an IterableDataset's state resumes only with "
                f"the num_workers that saved it ({state_dict['num_workers']}; this loader "
                f"has {self.num_workers}): each worker replays its own copy of the stream."
            )
        positions = state_dict.get("positions") or {}
        kept = positions.get("roles") is not None or positions.get("dataset") is not None
        if (
            self._kind == "map"
            and kept
            and not state_dict["finished"]
            and state_dict["num_workers"] != self.num_workers
        ):
            raise ValueError(
                "DataLoader.load_state_dict: the dataset keeps a state of its own "
                "(state_dict()/load_state_dict()), saved by each of the "
                f"{state_dict['num_workers']} workers; this loader has {self.num_workers}. "
                "Resume with the num_workers that saved it (a dataset without a state of its "
                "own resumes into any num_workers)."
            )
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
        self._loaded = dict(state_dict)

    def _with_packed_lists(self, dataset: Any) -> Any:
        """``dataset`` for the workers: itself, or a shallow copy of it whose big lists are
        ``_PackedList``s (see ``pack_lists``)."""
        if _packable(dataset):
            return self._pack("", dataset)
        try:
            attributes = vars(dataset)
        except TypeError:  # no __dict__ (slots): handed over as it is
            return dataset
        big = {k: v for k, v in attributes.items() if _packable(v)}
        if not big:
            return dataset
        twin = copy.copy(dataset)
        for name, items in big.items():
            setattr(twin, name, self._pack(name, items))
        return twin

    def _pack(self, name: str, items: Any) -> Any:
        packed = self._packed.get(name)
        if packed is None or not packed.holds(items):
            try:
                packed = _PackedList(items)
            except Exception:  # an element pickle cannot carry: the list goes as it is
                return items
            self._packed[name] = packed
        return packed

    # -- the epoch's plan ----------------------------------------------------------------

    def _plan(self, base_seed: int, sampler_state: Any) -> tuple[_EpochBatches, Any]:
        """The epoch's batches and what its sampler needs to repeat them."""
        if self._own_sampler:
            if isinstance(self.sampler, GlobalShuffleSampler):
                if self.shuffle:
                    self.sampler.seed = _derive(base_seed, "shuffle") % 2**32
                order = self.sampler.order()
            else:
                order = MapDataset.range(*self._shard)
            return (
                _EpochBatches(order=order, batch_size=self.batch_size, drop_last=self.drop_last),
                None,
            )
        source = self.batch_sampler if self.batch_sampler is not None else self.sampler
        state = _sampler_state(source, sampler_state, self._torch, base_seed)
        with self._torch.random.fork_rng(devices=[]):
            if state.get("torch_seed") is not None:  # an unseeded random sampler
                self._torch.manual_seed(state["torch_seed"])
            planned = [_plain(b) for b in source]
        return _EpochBatches(planned=planned), state


def _check_planned(source: Any) -> None:
    """An explicit sampler is read whole at each ``iter()``: it needs a length."""
    try:
        len(source)
    except TypeError:
        raise TypeError(
            f"DataLoader: the sampler {type(source).__name__} has no len(); chute plans each "
            "epoch from the sampler at iter(), so an endless sampler cannot be read. Give it a "
            "__len__ (one epoch's length), or use shuffle=True."
        ) from None


def _start_policy(context: Any) -> str:
    """How chute starts the workers for ``multiprocessing_context``: None forks as PyTorch
    does on Linux (beside threads and CUDA, unless the child would break); "spawn" and
    "forkserver" start them from chute's fork server, a fresh interpreter."""
    if context is None:
        return "as_pytorch"
    method = context if isinstance(context, str) else context.get_start_method()
    return "fork" if method == "fork" else "forkserver"


def _is_range(data_source: Any, n: int) -> bool:
    return isinstance(data_source, range) and data_source == range(n)


def _plain(batch: Any) -> Any:
    if isinstance(batch, (list, tuple)):
        return [int(i) if isinstance(i, (np.integer,)) else i for i in batch]
    return batch


def _generators(sampler: Any, torch: Any) -> list[Any]:
    """The torch generators a sampler (or a BatchSampler's sampler) draws from."""
    found = []
    for s in (sampler, getattr(sampler, "sampler", None)):
        g = getattr(s, "generator", None)
        if isinstance(g, torch.Generator):
            found.append(g)
    return found


def _unseeded(sampler: Any) -> bool:
    """Whether the sampler draws from torch's global generator (``generator=None``)."""
    return any(
        hasattr(s, "generator") and s.generator is None
        for s in (sampler, getattr(sampler, "sampler", None))
        if s is not None
    )


def _sampler_state(source: Any, saved: Any, torch: Any, base_seed: int) -> dict[str, Any]:
    """Puts an explicit sampler where ``saved`` says (None: a new epoch) and returns what
    repeats the epoch: the sampler's ``state_dict()`` when it has one, else its
    generators' states, else a seed for torch's global generator when it draws there."""
    stateful = hasattr(source, "state_dict") and hasattr(source, "load_state_dict")
    if saved is not None:
        if stateful and saved.get("sampler") is not None:
            source.load_state_dict(saved["sampler"])
        for g, s in zip(_generators(source, torch), saved.get("generators", [])):
            g.set_state(torch.tensor(list(s), dtype=torch.uint8))
        return dict(saved)
    return {
        "sampler": source.state_dict() if stateful else None,
        "generators": [bytes(g.get_state().tolist()) for g in _generators(source, torch)],
        "torch_seed": _derive(base_seed, "sampler") if _unseeded(source) else None,
    }


class _LoaderIterator:
    """One epoch of a ``chute.torch.DataLoader``.

    ``saved`` is the ``"positions"`` part of a loaded state: where the
    dataset's own state (``state_dict()`` of a torchdata ``Stateful``
    dataset or iterator) and an iterable's streams stood.
    """

    def __init__(
        self,
        loader: DataLoader,
        epoch: int,
        start: int,
        base_seed: int,
        sampler_state: Any,
        saved: dict[str, Any] | None,
    ) -> None:
        self._loader, self._epoch, self._yielded = loader, epoch, start
        self._finished, self._closed = False, False
        torch = loader._torch
        self._torch = torch
        self._pin = loader.pin_memory and torch.cuda.is_available()
        if loader.pin_memory and not self._pin:
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, then "
                "device pinned memory won't be used.",
                stacklevel=3,
            )
        workers = loader.num_workers
        saved = saved or {}
        self._sampler_state = None
        self._local: Iterator[Any] = iter(())
        self._stream: _StreamReader | None = None
        self._chute_it: Any = None
        self._timed: _TimedReader | None = None
        dataset = loader.dataset
        if loader._kind == "map" and workers > 0 and loader.pack_lists:
            dataset = loader._with_packed_lists(dataset)
        # A Stateful map-style dataset: its state after the last batch of each worker's role
        # (batch k is role k % W's), or, in process, the dataset's own.
        self._roles: list[Any] | None = None
        if loader._kind == "map":
            batches, self._sampler_state = loader._plan(base_seed, sampler_state)
            stateful = _stateful(dataset)
            fetch = _Fetch(
                dataset,
                loader.collate_fn,
                loader._auto_collation,
                ship=workers > 0,
                base_seed=base_seed,
                seed_each_batch=loader.seed_each_batch,
                with_state=stateful and workers > 0,
            )
            if workers == 0:
                if stateful and saved.get("dataset") is not None:
                    dataset.load_state_dict(saved["dataset"])
                self._local = _LocalBatches(fetch, batches, start)
            else:
                loads = None
                if stateful:
                    roles = saved.get("roles")
                    self._roles = list(roles) if roles is not None else [None] * workers
                    # New worker j takes batches start + j, start + j + W, ...: role
                    # (start + j) % W, whose dataset state it loads.
                    loads = [self._roles[(start + j) % workers] for j in range(workers)]
                source = MapDataset.source(batches)[start:].map(fetch)
                pipeline = source.to_iter_dataset(ReadOptions(num_threads=0)).mp_prefetch(
                    MultiprocessingOptions(workers, per_worker_buffer_size=loader.prefetch_factor),
                    worker_init_fn=_WorkerInit(
                        fetch.dataset, base_seed, loader.worker_init_fn, loads, start % workers
                    ),
                )
                self._chute_it = self._started(pipeline)
        else:
            stream = _StreamBatches(dataset, loader.collate_fn, loader.batch_size, loader.drop_last)
            if workers == 0:
                self._stream = stream.open(saved.get("stream"))
                self._local = self._stream
            else:
                shares = _StreamShares(
                    MapDataset.range(workers).to_iter_dataset(ReadOptions(num_threads=0)),
                    stream,
                    ship=True,
                )
                pipeline = shares.mp_prefetch(
                    MultiprocessingOptions(workers, per_worker_buffer_size=loader.prefetch_factor),
                    worker_init_fn=_WorkerInit(stream.dataset, base_seed, loader.worker_init_fn),
                )
                self._chute_it = self._started(pipeline, saved.get("pipeline"))
        if loader.timeout > 0 and self._chute_it is not None:
            self._timed = _TimedReader(self._chute_it, loader.timeout)

    def _started(self, pipeline: IterDataset[Any], state: Any = None) -> Any:
        """The workers' iterator, once every worker has started (at ``state``): an error in
        ``worker_init_fn`` or in loading the dataset is raised here, as itself."""
        with processes.starting(self._loader._start_policy):
            it = iter(pipeline)
        try:
            if state is not None:
                it.set_state(state)
            else:
                it.get_state()  # waits for every worker's first message
        except WorkerDiedError as exc:
            it.close()
            raise _as_pytorch_raises(exc) from None
        except BaseException:
            it.close()
            raise
        return it

    def __iter__(self) -> _LoaderIterator:
        return self

    def __len__(self) -> int:
        n = self._loader._len_or_none()
        if n is None:
            raise TypeError("len() of a DataLoader over an IterableDataset without __len__")
        return n

    def __next__(self) -> Any:
        if self._finished or self._closed:
            raise StopIteration
        try:
            if self._chute_it is None:
                batch = next(self._local)
                if self._pin:
                    batch = _unship(batch, self._torch, True)
            else:
                raw = self._timed.next() if self._timed is not None else next(self._chute_it)
                if self._roles is not None:
                    raw, self._roles[self._yielded % len(self._roles)] = raw
                batch = _unship(raw, self._torch, self._pin)
        except StopIteration:
            self._finished = True
            self.close()
            raise
        except WorkerDiedError as exc:
            self._yielded += 1
            raise _as_pytorch_raises(exc) from None
        except Exception:
            self._yielded += 1  # the failed batch is used up, as in PyTorch: next() goes on
            raise
        self._yielded += 1
        return batch

    def state(self) -> dict[str, Any]:
        positions: dict[str, Any] = {}
        if self._roles is not None:
            positions["roles"] = list(self._roles)
        elif self._loader._kind == "map" and _stateful(self._loader.dataset):
            positions["dataset"] = self._loader.dataset.state_dict()
        if self._stream is not None:
            positions["stream"] = self._stream.state()
        elif self._chute_it is not None and self._loader._kind == "iterable":
            positions["pipeline"] = self._chute_it.get_state()
        return self._loader._state(
            epoch=self._epoch,
            yielded=self._yielded,
            finished=self._finished,
            sampler=self._sampler_state,
            positions=positions,
        )

    def close(self) -> None:
        """Stops the workers of this epoch (also when the loop broke off early)."""
        if self._closed:
            return
        self._closed = True
        if self._timed is not None:
            self._timed.close()
        if self._chute_it is not None:
            self._chute_it.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _as_pytorch_raises(exc: WorkerDiedError) -> BaseException:
    """A worker that could not start raises its own error (``worker_init_fn``'s, say), as
    PyTorch's loader does; a worker that died stays a ``WorkerDiedError``."""
    inner = getattr(exc, "worker_exception", None)
    return inner if inner is not None else exc


class _LocalBatches(Iterator[Any]):
    """Batches fetched in this process (``num_workers=0``); one that raises is used up and
    the next ``next()`` fetches the batch after it, as PyTorch's loader does."""

    def __init__(self, fetch: _Fetch, batches: _EpochBatches, start: int) -> None:
        self._fetch, self._batches, self._next = fetch, batches, start

    def __next__(self) -> Any:
        k = self._next
        if k >= len(self._batches):
            raise StopIteration
        self._next += 1
        return self._fetch(self._batches[k])


class _TimedReader:
    """``timeout``: a thread reads the workers' batches; the loop waits at most ``timeout``."""

    def __init__(self, it: Iterator[Any], timeout: float) -> None:
        self._it, self._timeout = it, timeout
        self._out: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
        self._want = threading.Semaphore(0)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="chute-torch-timeout", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._want.acquire()
            if self._stop:
                return
            try:
                self._out.put(("ok", next(self._it)))
            except BaseException as exc:  # StopIteration and errors go to the loop
                self._out.put(("error", exc))
                return

    def next(self) -> Any:
        self._want.release()
        try:
            kind, value = self._out.get(timeout=self._timeout)
        except queue.Empty:
            raise RuntimeError(
                f"DataLoader timed out after {self._timeout:g} seconds waiting for a batch "
                "from its workers (the timeout argument)."
            ) from None
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        self._stop = True
        self._want.release()
