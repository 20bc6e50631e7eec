"""Under an error budget, batches are made of records that worked.

A ``MapDataset`` batch is random access: batch ``b`` is records
``b * size`` to ``(b + 1) * size``, so when one of them raises the whole batch
fails, and a budget around it would skip ``size`` records for one bad one.
An ``IterDataset`` batch instead keeps the records it pulled when one raises
and carries on filling from the next record, so a budget around it skips only
the bad record and the batch still comes out full.

``records_batched(ds)`` rebuilds a pipeline that an error budget runs so that
every ``m.batch(size).to_iter_dataset()`` it reads (with element-wise
``map`` stages allowed between the batch and ``to_iter_dataset``) becomes
``m.to_iter_dataset().batch(size)``.  Without errors both give the same
batches in the same order (a ``to_iter_dataset`` reads one epoch, and the
MapDataset batch keeps within an epoch too).  The nodes above are copied with
new parents, as ``chute._stages.slicing`` does.  Inside ``mp_prefetch``
the workers share out whole batches, so each worker's own pipeline is rebuilt
after its share is taken: ``m.batch(size)[w::n].to_iter_dataset()`` becomes
the records of those batches, read in order and batched again, so a bad record
there costs itself too and the worker's batch fills from its next batch.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from chute._core.dataset import IterDataset, MapDataset
from chute._core.registry import untimed_type
from chute._stages.batch import BatchIterDataset, BatchMapDataset
from chute._stages.capabilities import BatchesRecordsInWorkers
from chute._stages.map import MapIterDataset, MapMapDataset
from chute._stages.prefetch import PrefetchIterDataset
from chute._stages.slice import SliceMapDataset


def records_batched(ds: IterDataset[Any]) -> IterDataset[Any]:
    """``ds`` with its MapDataset batches made as IterDataset batches (see the module doc).

    >>> from chute import MapDataset
    >>> ds = records_batched(MapDataset.range(5).batch(2).to_iter_dataset())
    >>> type(ds).__name__, [b.tolist() for b in ds]
    ('BatchIterDataset', [[0, 1], [2, 3], [4]])
    """
    if isinstance(ds, PrefetchIterDataset):
        return _unbatched_read(ds)
    if isinstance(ds, BatchesRecordsInWorkers):  # mp_prefetch
        marked = copy.copy(ds)
        marked._records_batched = True  # each worker's share is rebuilt (mp_prefetch._workers)
        return marked
    if len(ds.parents) != 1:
        return ds
    parent = ds.parents[0]
    if not isinstance(parent, IterDataset):
        return ds
    if any(value is parent for key, value in vars(ds).items() if key != "_parents"):
        return ds  # the node holds its parent elsewhere too: a copy would not see a new one
    rebuilt = records_batched(parent)
    if rebuilt is parent:
        return ds
    return ds.with_parents(rebuilt)


def _unbatched_read(read: PrefetchIterDataset) -> IterDataset[Any]:
    """``m.batch(n).map(f)...to_iter_dataset()`` as ``m.to_iter_dataset().batch(n).map(f)...``."""
    maps: list[MapMapDataset] = []
    node: MapDataset[Any] = read._parent
    while isinstance(node, MapMapDataset) and untimed_type(node) is MapMapDataset:
        maps.append(node)
        node = node._parent
    picked = None
    if isinstance(node, SliceMapDataset) and untimed_type(node._parent) is BatchMapDataset:
        picked, node = node._positions, node._parent  # a worker's share of the batches
    if not isinstance(node, BatchMapDataset) or untimed_type(node) is not BatchMapDataset:
        return read
    records = node._parent if picked is None else _records_of(node, picked)
    rows: IterDataset[Any] = PrefetchIterDataset(
        records, read_options=read._read_options, allow_nones=read._allow_nones
    )
    out: IterDataset[Any] = BatchIterDataset(
        rows, node._batch_size, drop_remainder=node._drop, batch_fn=node._batch_fn
    )
    for stage in reversed(maps):
        mapped: MapIterDataset[Any] = MapIterDataset(out, stage._fn)
        mapped._label = stage._label  # errors name the user's function as before
        out = mapped
    return out


def _records_of(batches: BatchMapDataset, picked: Any) -> MapDataset[Any]:
    """The records of the batches at positions ``picked``, in order, as one MapDataset."""
    size, records = batches._batch_size, batches._parent
    n = len(records)
    starts = np.asarray(picked, dtype=np.int64) * size
    pieces = [np.arange(s, min(s + size, n), dtype=np.int64) for s in starts.tolist()]
    return records.slice(np.concatenate(pieces) if pieces else np.zeros(0, np.int64))
