"""Where a failing element comes from: positions mapped back to the source.

Nothing here runs on the happy path.  When a stage annotates an exception it
asks ``locate(stage, index)``, which walks down the MapDataset parents: each
stage that maps indices one to one (map, filter, shuffle, slice, repeat,
mix, ...) has a small method ``_parent_index(index)`` that returns
``(k, j)``, "element ``index`` is element ``j`` of ``parents[k]``", and a
source returns an ``Origin`` (its index, and the file and record for file
sources that have ``_record_location``).  A stage without the method ends the
walk, and the note names only the position.

Iterator stages after ``to_iter_dataset()`` use ``locate_last(iterator)``:
the iterators that hand on the parent's last element unchanged in position
(map, filter) set ``_last_from_parent``; ``to_iter_dataset``'s iterator and
file iterators answer ``_last_origin()`` for the element they returned last.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from chute._core.errors import Origin
from chute._core.pipeline_walk import parents_of
from chute._core.transforms import _name
from chute._stages.capabilities import (
    HandsOnParentsElement,
    LocatesRecords,
    MapsToParentIndex,
    RemembersLastOrigin,
    WrapsFunction,
)

#: Stops a walk through a (malformed) cycle of stages.
_MAX_DEPTH = 1000


def locate(dataset: Any, index: int | None) -> Origin | None:
    """The origin of element ``index`` of ``dataset``, or None where unknown.

    Never raises: a stage that cannot answer ends the walk.

    >>> from chute import MapDataset
    >>> locate(MapDataset.range(10).shuffle(seed=7).map(str), 0)
    Origin(index=4, branch='', file=None, record=None, offset=None, position=None)
    """
    if index is None:
        return None
    branch = ""
    try:
        for _ in range(_MAX_DEPTH):
            if not isinstance(dataset, MapsToParentIndex):
                return None
            found = dataset._parent_index(int(index))
            if found is None or isinstance(found, Origin):
                return _with_branch(found, branch)
            k, index = found
            parents = parents_of(dataset)
            if len(parents) > 1:
                branch += f"[{k}]"
            dataset = parents[k]
    except Exception:  # the user's error matters, not ours: name less instead
        return None
    return None


def _with_branch(origin: Origin | None, branch: str) -> Origin | None:
    if origin is None or not branch:
        return origin
    return dataclasses.replace(origin, branch=branch + origin.branch)


def locate_last(iterator: Any) -> Origin | None:
    """The origin of the element that ``iterator`` (or its parent) handed on last."""
    node = iterator
    try:
        for _ in range(_MAX_DEPTH):
            if not (isinstance(node, HandsOnParentsElement) and node._last_from_parent):
                break
            node = parents_of(node)[0]
        return node._last_origin() if isinstance(node, RemembersLastOrigin) else None
    except Exception:
        return None


def source_origin(source: Any, index: int) -> Origin:
    """Index ``index`` of a user's source, with its file and record if it says."""
    if not isinstance(source, LocatesRecords):
        return Origin(index=index)
    file, record = source._record_location(index)
    return Origin(index=index, file=file, record=record)


def label(kind: str, transform: Any) -> str:
    """A stage's name in notes: ``map(decode)`` for ``Map(decode)``, ``map(MyMap)``.

    >>> from chute.transforms import Map
    >>> def decode(x): return x
    >>> label("map", Map(decode)), label("map", decode)
    ('map(decode)', 'map(decode)')
    """
    return f"{kind}({function_name(transform)})"


def function_name(transform: Any) -> str:
    """The user's function in ``transform``: a wrapped function's name, else the class's.

    Names are qualified by class (``Decoder.map``) but not by enclosing function.
    """
    fn = transform._fn if isinstance(transform, WrapsFunction) else None
    if fn is not None and fn is not transform:
        return function_name(fn)
    owner = getattr(transform, "__self__", None)  # a bound method: name its transform
    if owner is not None and isinstance(owner, WrapsFunction):
        return function_name(owner)
    inner = getattr(transform, "func", None)  # functools.partial
    if inner is not None and callable(inner):
        return function_name(inner)
    return _name(transform).rpartition("<locals>.")[2]  # a function made in a function
