"""``get_element_spec``: the shapes and dtypes of a pipeline's elements, unread.

The spec is worked out from the pipeline's structure, without building an
iterator or reading data.  Where a stage makes it well defined:

* ``MapDataset.range`` gives int64 scalars; ``MapDataset.source`` over a numpy
  array gives its rows (chute's addition: Grain infers no source spec);
* stages that pass elements through (shuffle, slice, repeat, filter,
  prefetches, limit, window shuffle, options) keep their parent's spec; mixes
  and concatenations take their first parent's, zips a tuple of their parents';
* ``batch`` puts the batch size before every leaf's shape (``None`` unless
  ``drop_remainder``); ``RebatchIterDataset`` replaces the leading dimension
  with its ``batch_size``, as Grain does (its last batch may be shorter unless
  ``drop_remainder``);
* ``map``, ``random_map`` and ``map_with_index`` call their transform's
  ``output_spec(input_spec)``; without one they raise ``ValueError``.

Any dataset class can give its own spec with an ``_element_spec`` property,
which wins over the rules above; as in Grain, ``ds._element_spec`` reads the
spec of any dataset, so a custom stage can build on its parent's.  Otherwise
(a custom batch function, a flat map, a source other than an array, a stage
chute has no rule for) ``NotImplementedError`` says so: the spec can only be
known by reading.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from chute._core.dataset import IterDataset, MapDataset
from chute._core.element_spec import ShapeDtypeStruct, ShapeDtypeStructProtocol, with_leading_dim
from chute._core.transforms import _name, _Transform
from chute._core.tree import map_structure, stack
from chute._stages.batch import BatchIterDataset, BatchMapDataset
from chute._stages.cache import CacheIterDataset
from chute._stages.filter import FilterIterDataset, FilterMapDataset
from chute._stages.interleave import InterleaveIterDataset
from chute._stages.limit import LimitIterDataset
from chute._stages.map import (
    MapIterDataset,
    MapMapDataset,
    MapWithIndexIterDataset,
    MapWithIndexMapDataset,
    RandomMapIterDataset,
    RandomMapMapDataset,
)
from chute._stages.mix import ConcatenateMapDataset, MixedMapDataset, SelectionMapDataset
from chute._stages.mix_iter import MixedIterDataset
from chute._stages.mp_prefetch import MultiprocessPrefetchIterDataset
from chute._stages.multithread_prefetch import MultithreadPrefetchIterDataset
from chute._stages.prefetch import PrefetchIterDataset
from chute._stages.rebatch import RebatchIterDataset
from chute._stages.repeat import RepeatIterDataset, RepeatMapDataset
from chute._stages.shuffle import ShuffleMapDataset
from chute._stages.slice import SliceMapDataset
from chute._stages.source_dataset import RangeMapDataset, SourceMapDataset
from chute._stages.thread_prefetch import ThreadPrefetchIterDataset
from chute._stages.window_shuffle import WindowShuffleIterDataset, WindowShuffleMapDataset
from chute._stages.with_options import WithOptionsIterDataset
from chute._stages.zip import ZipIterDataset, ZipMapDataset

__all__ = ["get_element_spec", "spec_from_rules"]

_Rule = Callable[[Any], Any]
_BASE_HOOK = MapDataset._element_spec  # the property every dataset inherits


def get_element_spec(ds: MapDataset[Any] | IterDataset[Any]) -> Any:
    """The PyTree of ``ShapeDtypeStruct`` that describes each element of ``ds``.

    Args:
        ds: A MapDataset or an IterDataset.

    Raises:
        TypeError: ``ds`` is not a dataset.
        ValueError: a map's transform has no ``output_spec`` method.
        NotImplementedError: a stage's output cannot be known without reading.

    >>> from chute import MapDataset
    >>> get_element_spec(MapDataset.range(10).shuffle(seed=1).batch(4, drop_remainder=True))
    ShapeDtypeStruct(shape=(4,), dtype=int64)
    """
    if not isinstance(ds, (MapDataset, IterDataset)):
        raise TypeError(
            f"get_element_spec() takes a MapDataset or an IterDataset (got {ds!r} that is a "
            f"{type(ds).__name__})."
        )
    if type(ds)._element_spec is not _BASE_HOOK:
        return ds._element_spec  # the class gives its own spec
    return spec_from_rules(ds)


def spec_from_rules(ds: Any) -> Any:
    """The spec of ``ds`` from chute's rule for its stage (what ``ds._element_spec`` gives)."""
    for cls in type(ds).__mro__:
        rule = _RULES.get(cls)
        if rule is not None:
            return rule(ds)
    raise NotImplementedError(
        f"get_element_spec(): chute cannot tell the element spec of {type(ds).__name__} "
        "without reading data. Read an element instead, or give the class an "
        "_element_spec property."
    )


def _parent_spec(ds: Any) -> Any:
    return get_element_spec(ds._parents[0])


def _source_spec(ds: SourceMapDataset) -> Any:
    data = ds._source
    if isinstance(data, np.ndarray) and data.ndim >= 1:
        return ShapeDtypeStruct(data.shape[1:], data.dtype)
    raise NotImplementedError(
        f"get_element_spec(): chute cannot tell the element spec of a source of "
        f"{type(data).__name__} without reading it (only numpy array sources have one). "
        "Read an element instead."
    )


def _map_spec(ds: Any) -> Any:
    fn = ds._fn
    owner = fn.__self__ if isinstance(getattr(fn, "__self__", None), _Transform) else fn
    output_spec = getattr(owner, "output_spec", None)
    if output_spec is None:
        raise ValueError(
            f"Cannot infer element spec for transform {_name(owner)} because it does not "
            f"implement `output_spec` method. chute: {ds._label} cannot tell its output spec "
            f"without running. Give the transform {_name(owner)} an output_spec(input_spec) "
            "method that "
            "returns the output's PyTree of ShapeDtypeStruct (subclass chute.transforms.Map "
            "or its kin to add one)."
        )
    return output_spec(get_element_spec(ds._parents[0]))


def _batch_spec(ds: BatchMapDataset | BatchIterDataset) -> Any:
    size = ds._batch_size if ds._drop else None
    if ds._batch_fn is stack:  # the default batch function stacks the leaves
        return with_leading_dim(_parent_spec(ds), size, "batch")
    return _custom_batch_spec(ds._batch_fn, _parent_spec(ds), ds._batch_size, ds._drop)


def _custom_batch_spec(batch_fn: Any, rows: Any, size: int, drop: bool) -> Any:
    """A custom ``batch_fn``'s output spec, from running it on zeros of the rows' spec.

    Without ``drop_remainder`` the last batch may be shorter: a dimension that
    differs between a full batch and a batch of one is reported as ``None``.
    """

    def zeros(leaf: Any) -> np.ndarray:
        if not isinstance(leaf, ShapeDtypeStructProtocol) or None in leaf.shape:
            raise TypeError(f"the element spec leaf {leaf!r} has no fixed shape")
        shape: Any = leaf.shape
        return np.zeros(shape, leaf.dtype)

    try:
        row = map_structure(zeros, rows)
        full = map_structure(_spec_of, batch_fn([row] * size))
        if drop or size == 1:
            return full
        one = map_structure(_spec_of, batch_fn([row]))
        return map_structure(_either_size, full, one)  # raises if the structures differ
    except Exception as exc:
        raise NotImplementedError(
            "Element spec inference is not supported with custom batching functions. chute: "
            f"get_element_spec() ran the batch_fn on zero-filled rows to learn its output, and "
            f"that failed ({type(exc).__name__}: {exc}); read a batch instead."
        ) from exc


def _spec_of(leaf: Any) -> ShapeDtypeStruct:
    array = np.asarray(leaf)
    return ShapeDtypeStruct(array.shape, array.dtype)


def _either_size(full: ShapeDtypeStruct, one: ShapeDtypeStruct) -> ShapeDtypeStruct:
    if len(full.shape) != len(one.shape):
        return ShapeDtypeStruct((None,) * len(full.shape), full.dtype)
    shape = tuple(a if a == b else None for a, b in zip(full.shape, one.shape))
    return ShapeDtypeStruct(shape, full.dtype)


def _rebatch_spec(ds: RebatchIterDataset) -> Any:
    def unbatched(leaf: Any) -> ShapeDtypeStruct:
        if not isinstance(leaf, ShapeDtypeStructProtocol) or not leaf.shape:
            raise ValueError(
                f"get_element_spec(): RebatchIterDataset needs batches, but its input spec has "
                f"the leaf {leaf!r} without a leading dimension."
            )
        return ShapeDtypeStruct(leaf.shape[1:], leaf.dtype)

    rows = map_structure(unbatched, _parent_spec(ds))
    return with_leading_dim(rows, ds._size, "RebatchIterDataset")  # as Grain: the batch size


def _interleave_spec(ds: InterleaveIterDataset) -> Any:
    datasets = ds._parents[0]
    if isinstance(datasets, SourceMapDataset) and isinstance(datasets._source, list):
        return get_element_spec(datasets._source[0])
    raise NotImplementedError(
        "get_element_spec(): an InterleaveIterDataset over a MapDataset of datasets has no "
        "known spec (its datasets are made while reading); read an element instead, or "
        "give a list of datasets."
    )


_PASS_THROUGH = (
    CacheIterDataset,
    FilterIterDataset,
    FilterMapDataset,
    LimitIterDataset,
    ConcatenateMapDataset,
    MixedMapDataset,
    SelectionMapDataset,
    MixedIterDataset,
    MultiprocessPrefetchIterDataset,
    MultithreadPrefetchIterDataset,
    PrefetchIterDataset,
    RepeatIterDataset,
    RepeatMapDataset,
    ShuffleMapDataset,
    SliceMapDataset,
    ThreadPrefetchIterDataset,
    WindowShuffleIterDataset,
    WindowShuffleMapDataset,
    WithOptionsIterDataset,
)
_MAPS = (
    MapIterDataset,
    MapMapDataset,
    MapWithIndexIterDataset,
    MapWithIndexMapDataset,
    RandomMapIterDataset,
    RandomMapMapDataset,
)

_RULES: dict[type, _Rule] = {
    **dict.fromkeys(_PASS_THROUGH, _parent_spec),
    **dict.fromkeys(_MAPS, _map_spec),
    BatchIterDataset: _batch_spec,
    BatchMapDataset: _batch_spec,
    InterleaveIterDataset: _interleave_spec,
    RebatchIterDataset: _rebatch_spec,
    RangeMapDataset: lambda ds: ShapeDtypeStruct((), np.int64),
    SourceMapDataset: _source_spec,
    ZipIterDataset: lambda ds: tuple(get_element_spec(p) for p in ds._parents),
    ZipMapDataset: lambda ds: tuple(get_element_spec(p) for p in ds._parents),
}
