"""Timing a stage's read methods from outside: the subclass each timed stage becomes.

``time_iterator(it, record)`` makes ``it`` an instance of a subclass of its class,
made for it with the same name, whose ``__next__`` and ``_next_many`` time each
call and add it to ``record``; ``chute._stats.instrument`` builds the timed copy
of a whole pipeline from the same pieces, and the collector times the iterator
handed to the user with them.

Self time: each thread keeps the record it is in and the time its callees
took, so a stage's time excludes its parents' when they run in the same
thread; each thread adds to its own counts of a record (see ``records``).
"""

from __future__ import annotations

import itertools
import operator
import threading
import time
from collections.abc import Callable
from typing import Any

from chute._core.capabilities import ReportsBufferFill
from chute._core.registry import UNTIMED
from chute._stages.capabilities import ReadsMany
from chute._stats.records import StageRecord

__all__ = ["time_iterator", "timed", "timed_class", "timed_getitem", "count_kept", "count_many"]

_LOCAL = threading.local()
_NONE = object()


def _frame() -> list[Any]:
    try:
        return _LOCAL.frame
    except AttributeError:
        frame = _LOCAL.frame = [None, 0]  # the record this thread is in, its callees' time
        return frame


def count_one(result: Any) -> int:
    return 1


def count_many(result: Any) -> int:
    return len(result)


def count_kept(result: Any) -> int:
    """A filter's chunk: None stands for each element it dropped.

    ``list.count`` is twice as fast as testing identities one by one, but
    compares with ``==``, which arrays answer element-wise: they take the slow way.
    """
    try:
        return len(result) - result.count(None)
    except (ValueError, TypeError):  # an array's ambiguous truth
        return len(result) - sum(map(operator.is_, result, itertools.repeat(None)))


def timed(
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


def timed_getitem(method: Any, record: StageRecord) -> Any:
    """A MapDataset's ``__getitem__`` that times reads of one element (a slice is a new dataset)."""
    one = timed(method, record, count_one)

    def __getitem__(self: Any, index: Any) -> Any:
        return method(self, index) if isinstance(index, slice) else one(self, index)

    return __getitem__


def timed_class(cls: type, record: StageRecord, extra: dict[str, Any]) -> type:
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
    fill = cls._buffer_fill if issubclass(cls, ReportsBufferFill) else None
    extra = {"__next__": timed(cls.__next__, record, count_one, fill)}
    if issubclass(cls, ReadsMany):
        extra["_next_many"] = timed(cls._next_many, record, count_many, fill)
    try:
        it.__class__ = timed_class(cls, record, extra)
    except TypeError:  # a layout the subclass cannot take: it goes untimed
        pass
    return it
