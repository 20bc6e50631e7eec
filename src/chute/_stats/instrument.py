"""Timing every stage of a pipeline from outside, only when tracking is on.

``iter(ds)`` asks ``wanted(ds)`` once; when statistics are wanted, it
iterates ``instrument(ds)`` instead: a copy of the dataset graph in which
every stage is an instance of a subclass made for it, with the same name,
whose read methods (``__next__``, ``_next_many``, ``_getitems``,
``__getitem__``) time the call and add it to the stage's ``StageRecord``.
The stages' own code is untouched, and a pipeline without tracking runs
exactly the classes it always did.

Self time: each thread keeps the record it is in and the time its callees
took, so a stage's time excludes its parents' when they run in the same
thread; each thread adds to its own counts of a record (see ``records``).
A stage whose parents run in other threads (a prefetch) is timed for how
long its consumer waited.  The stages that a worker pool runs are
not timed here: their copy is marked, and each worker times its own copy
and sends the figures to the parent (``worker_loop``).
"""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import operator
import threading
import time
from collections.abc import Callable
from typing import Any

from chute._core.pipeline_walk import pipeline_nodes
from chute._core.registry import UNTIMED
from chute._stats.collector import Collector
from chute._stats.graph import post_order
from chute._stats.records import StageRecord

__all__ = [
    "TRACK_MARK",
    "instrument",
    "marked",
    "picture_when_asked",
    "time_iterator",
    "wanted",
]

TRACK_MARK = "_chute_track_stages"  # set on the top dataset a worker runs: it times itself

_LOCAL = threading.local()
_NONE = object()


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


def _frame() -> list[Any]:
    try:
        return _LOCAL.frame
    except AttributeError:
        frame = _LOCAL.frame = [None, 0]  # the record this thread is in, its callees' time
        return frame


def _one(result: Any) -> int:
    return 1


def _many(result: Any) -> int:
    return len(result)


def _kept(result: Any) -> int:
    """A filter's chunk: None stands for each element it dropped.

    ``list.count`` is twice as fast as testing identities one by one, but
    compares with ``==``, which arrays answer element-wise: they take the slow way.
    """
    try:
        return len(result) - result.count(None)
    except (ValueError, TypeError):  # an array's ambiguous truth
        return len(result) - sum(map(operator.is_, result, itertools.repeat(None)))


def _timed(
    method: Any,
    record: StageRecord,
    counted: Callable[[Any], int],
    fill: Callable[[Any], tuple[int, int]] | None = None,
) -> Any:
    """``method`` (one argument or none) timed into ``record``.

    ``counted(result)`` tells how many elements a call gave; ``fill`` looks at
    the stage's buffer every 8th call.  Kept lean: it runs on every call of
    every stage while tracking is on.
    """
    clock = time.perf_counter_ns
    local = _LOCAL
    mine = record.local  # each thread adds to its own counts: no lock, exact totals
    new_counts = record.counts
    due = record.due

    def call(self: Any, arg: Any = _NONE) -> Any:
        try:
            frame = local.frame
        except AttributeError:
            frame = _frame()
        outer = frame[0]
        if outer is record:  # the stage calling itself (``_next_many`` -> ``next``)
            return method(self) if arg is _NONE else method(self, arg)
        try:
            counts = mine.counts
        except AttributeError:
            counts = new_counts()
        outer_callees = frame[1]
        frame[0] = record
        frame[1] = 0
        start = clock()
        try:
            result = method(self) if arg is _NONE else method(self, arg)
        except BaseException:
            end = clock()
            counts.add(end - start - frame[1], end - start, 0, None, end)
            frame[0] = outer
            frame[1] = outer_callees + end - start
            raise
        end = clock()
        elapsed = end - start
        counts.add(elapsed - frame[1], elapsed, counted(result), result, end)
        frame[0] = outer
        frame[1] = outer_callees + elapsed
        if end >= record.deadline_ns:
            due(end)
        if fill is not None and not counts.calls & 7:
            counts.fill(*fill(self))
        return result

    call.__name__ = getattr(method, "__name__", "call")
    call.__wrapped__ = method  # type: ignore[attr-defined]
    return call


def _item(method: Any, record: StageRecord) -> Any:
    timed = _timed(method, record, _one)

    def __getitem__(self: Any, index: Any) -> Any:
        return method(self, index) if isinstance(index, slice) else timed(self, index)

    return __getitem__


def _timed_class(cls: type, record: StageRecord, extra: dict[str, Any]) -> type:
    namespace: dict[str, Any] = {
        "__slots__": (),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        UNTIMED: cls,
        "_chute_record": record,
        **extra,
    }
    return type(cls)(cls.__name__, (cls,), namespace)


def time_iterator(it: Any, record: StageRecord, *, any_class: bool = False) -> Any:
    """Makes ``it`` (a stage's iterator) add its calls to ``record``; returns it.

    Only chute's ``DatasetIterator``s are timed, unless ``any_class``.
    """
    from chute._core.iterator import DatasetIterator

    cls = type(it)
    if not (any_class or isinstance(it, DatasetIterator)) or "_chute_record" in cls.__dict__:
        return it
    fill = getattr(cls, "_buffer_fill", None)
    extra = {"__next__": _timed(cls.__next__, record, _one, fill)}
    if hasattr(cls, "_next_many"):
        extra["_next_many"] = _timed(cls._next_many, record, _many, fill)
    try:
        it.__class__ = _timed_class(cls, record, extra)
    except TypeError:  # a layout the subclass cannot take: it goes untimed
        pass
    return it


def _timed_dataset(node: Any, record: StageRecord, started: Callable[[Any], None] | None) -> Any:
    from chute._core.dataset import MapDataset

    cls = type(node)
    if isinstance(node, MapDataset):
        counted = _kept if "Filter" in cls.__name__ else _many
        extra = {
            "_getitems": _timed(cls._getitems, record, counted),
            "__getitem__": _item(cls.__getitem__, record),
        }
    else:
        make = cls.__iter__

        def __iter__(self: Any) -> Any:
            it = time_iterator(make(self), record)
            if started is not None:
                started(it)
            return it

        extra = {"__iter__": __iter__}
    copied = copy.copy(node)
    copied.__class__ = _timed_class(cls, record, extra)
    return copied


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
        copied = _timed_dataset(node, records[i], started)  # type: ignore[arg-type]
        if isinstance(node, MultiprocessPrefetchIterDataset):
            top = copy.copy(node._parent)
            setattr(top, TRACK_MARK, True)
            copied._parents = (top,)
            copied._next_base_seed = node._next_base_seed  # each iterator is a new epoch of seeds
        else:
            copied._parents = tuple(copies.get(id(p), p) for p in node._parents)
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
