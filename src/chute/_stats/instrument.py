"""Timing every stage of a pipeline from outside, only when tracking is on.

``iter(ds)`` asks ``wanted(ds)`` once; when statistics are wanted, it
iterates ``instrument(ds)`` instead: a copy of the dataset graph in which
every stage is an instance of a subclass made for it, with the same name,
whose read methods (``__next__``, ``_next_many``, ``_getitems``,
``__getitem__``) time the call and add it to the stage's ``StageRecord``.
The stages' own code is untouched, and a pipeline without tracking runs
exactly the classes it always did.

Self time is kept per thread (``timing``).  A stage whose parents run in
other threads (a prefetch) is timed for how long its consumer waited.  The
stages that a worker pool runs are not timed here: their copy is marked, and
each worker times its own copy and sends the figures to the parent
(``worker_loop``).
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable
from typing import Any

from chute._core import metrics
from chute._core.pipeline_walk import pipeline_nodes
from chute._stages.capabilities import CountsPerSource
from chute._stats.collector import Collector
from chute._stats.graph import post_order, stage_label
from chute._stats.records import StageRecord
from chute._stats.timing import (
    count_kept,
    count_many,
    time_iterator,
    timed,
    timed_class,
    timed_getitem,
)

__all__ = [
    "TRACK_MARK",
    "instrument",
    "marked",
    "picture_when_asked",
    "time_iterator",
    "wanted",
]

TRACK_MARK = "_chute_track_stages"  # set on the top dataset a worker runs: it times itself


def wanted(ds: Any) -> bool:
    """Whether iterating ``ds`` should collect statistics (config, options, or a worker's mark)."""
    if getattr(ds, "__dict__", {}).get(TRACK_MARK):
        return True
    from chute._core.config import config

    if config.py_debug_mode:
        return True
    from chute._core.dataset_options import ExecutionTrackingMode

    for node in pipeline_nodes(ds):
        options = getattr(node, "__dict__", {}).get("_options")
        mode = getattr(options, "execution_tracking_mode", None)
        if mode is ExecutionTrackingMode.STAGE_TIMING:
            return True
    return False


def marked(ds: Any) -> Any:
    """A copy of ``ds`` that times itself when it is iterated (in a worker process)."""
    copied = copy.copy(ds)
    setattr(copied, TRACK_MARK, True)
    return copied


def picture_when_asked(ds: Any) -> None:
    """Writes ``ds``'s picture if ``py_dataset_visualization_output_dir`` is set (as Grain does).

    A picture that cannot be written is logged, never raised: it must not stop training.
    """
    from chute._core.config import config

    directory = config.py_dataset_visualization_output_dir
    if directory is None:
        return
    from chute._stats.visualize import write_picture

    try:
        write_picture(ds, directory)
    except OSError as exc:
        logging.getLogger("chute").warning("chute: no pipeline picture written: %s", exc)


def _timed_dataset(node: Any, record: StageRecord, started: Callable[[Any], None] | None) -> Any:
    from chute._core.dataset import MapDataset

    cls = type(node)
    if isinstance(node, MapDataset):
        counted = count_kept if "Filter" in cls.__name__ else count_many
        extra = {
            "_getitems": timed(cls._getitems, record, counted),
            "__getitem__": timed_getitem(cls.__getitem__, record),
        }
    else:
        make = cls.__iter__

        def __iter__(self: Any) -> Any:
            it = time_iterator(make(self), record)
            if started is not None:
                started(it)
            # A mix's own iterator (not one a stage hands on unchanged): its sources' counts.
            if type(it).__dict__.get("_chute_record") is record and isinstance(it, CountsPerSource):
                record.add_mixer(it)
                metrics.add_mix_sources(it, stage_label(node))
                _counted_first(type(it))
            return it

        extra = {"__iter__": __iter__}
    copied = copy.copy(node)
    copied.__class__ = timed_class(cls, record, extra)
    return copied


def _counted_first(cls: type) -> None:
    """A timed mix iterator's class (made for it alone): its counts go into the metrics
    before a restore sets them back and before it closes."""
    for name in ("set_state", "close"):
        method = getattr(cls, name)

        def call(self: Any, *args: Any, _method: Any = method) -> Any:
            metrics.read_mix(self)
            return _method(self, *args)

        setattr(cls, name, call)


def instrument(ds: Any) -> tuple[Any, Collector]:
    """A timed copy of ``ds``'s graph, and the collector that reads its records."""
    from chute._stages.mp_prefetch import MultiprocessPrefetchIterDataset

    order = post_order(ds)
    records: list[StageRecord | None] = [StageRecord() for _ in order]
    copies: dict[int, Any] = {}
    pools: dict[int, list[int]] = {
        i: sorted(_subtree(order, node))
        for i, node in enumerate(order)
        if isinstance(node, MultiprocessPrefetchIterDataset)
    }
    in_workers = set().union(*pools.values())
    collector = Collector(ds, records, pools)
    for i, node in enumerate(order):
        if i in in_workers:
            records[i] = None
            continue
        started = functools.partial(collector.pool_started, i) if i in pools else None
        if isinstance(node, MultiprocessPrefetchIterDataset):
            top = copy.copy(node._parent)
            setattr(top, TRACK_MARK, True)
            parents: tuple[Any, ...] = (top,)
        else:
            parents = tuple(copies.get(id(p), p) for p in node.parents)
        copied = _timed_dataset(node.with_parents(*parents), records[i], started)  # type: ignore[arg-type]
        if isinstance(node, MultiprocessPrefetchIterDataset):
            copied._next_base_seed = node._next_base_seed  # each iterator is a new epoch of seeds
        copies[id(node)] = copied
    # A stage inside a pool that is also read outside it (one branch read twice) goes untimed.
    return copies[id(ds)], collector


def _subtree(order: list[Any], top: Any) -> set[int]:
    """The positions in ``order`` of every ancestor of ``top``."""
    position = {id(node): i for i, node in enumerate(order)}
    found: set[int] = set()
    stack = list(top.parents)
    while stack:
        node = stack.pop()
        i = position.get(id(node))
        if i is None or i in found:
            continue
        found.add(i)
        stack.extend(node.parents)
    return found
