"""What ``MapDataset`` and ``IterDataset`` share: parents, the seed mark, ``pipe`` and ``apply``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from chute._core.capabilities import BuildsDatasetStage
from chute._core.iterator import _as_tuple
from chute._core.registry import stages as _s
from chute._core.seeding import check_wide_seed, seed_label
from chute._core.transforms import (
    Batch,
    Filter,
    FlatMap,
    Map,
    MapWithIndex,
    RandomMap,
    TfRandomMap,
)

S = TypeVar("S")
N = TypeVar("N", bound="Node")


class Node:
    """What MapDataset and IterDataset share: parents, seed mark, piping."""

    _parents: tuple[Any, ...]
    _seed: int | None
    _label: str = ""  # the call that built the stage (``map(decode)``), for reprs and errors

    def __init__(self, parents: Any = ()) -> None:
        self._parents = _as_tuple(parents)
        self._seed = None

    @property
    def parents(self) -> tuple[Any, ...]:
        """The datasets this one reads from (empty for a source)."""
        return self._parents

    def with_parents(self: N, *parents: Any) -> N:
        """A shallow copy of this dataset that reads from ``parents`` instead.

        The way a rewrite (slicing a pipeline into workers' shares, timing it
        for statistics) rebuilds a stage over new parents; this one is unchanged.

        Args:
            *parents: The datasets the copy reads from, in this one's order.

        Returns:
            The copy, of this dataset's class, with every other setting kept.

        >>> from chute import MapDataset
        >>> doubled = MapDataset.range(3).map(lambda x: 2 * x)
        >>> list(doubled.with_parents(MapDataset.range(10, 13)))
        [20, 22, 24]
        """
        copied = copy.copy(self)
        copied._parents = tuple(parents)
        return copied

    @property
    def _parent(self) -> Any:
        if len(self._parents) != 1:
            raise AttributeError(f"{type(self).__name__} has {len(self._parents)} parents, not 1.")
        return self._parents[0]

    def seed(self: N, seed: int) -> N:
        """Marks this dataset with ``seed`` for the random stages after it.

        Random stages without their own seed (``shuffle``, ``random_map``, ...)
        derive one from the marks of their ancestors, exactly as Grain does, so
        one ``.seed()`` near the source makes the whole pipeline reproducible.

        Args:
            seed: An int >= 0 of any size, as in Grain.

        Returns:
            A copy of this dataset that carries the mark; this one is unchanged.

        Raises:
            TypeError, ValueError: ``seed`` is not an int >= 0.

        >>> from chute import MapDataset
        >>> list(MapDataset.range(5).seed(42).shuffle())
        [1, 3, 4, 2, 0]
        """
        marked = copy.copy(self)
        marked._seed = check_wide_seed(seed, f"{type(self).__name__}.seed(): seed")
        return marked

    @property
    def _element_spec(self) -> Any:
        """The element spec (see ``get_element_spec``); a subclass may override it."""
        return _s.spec_from_rules(self)

    def pipe(self, fn: Callable[..., S], *args: Any, **kwargs: Any) -> S:
        """Calls ``fn(self, *args, **kwargs)``, to chain your own stages fluently.

        Args:
            fn: A function that takes this dataset first and returns a new one.
            *args: More positional arguments for ``fn``.
            **kwargs: Keyword arguments for ``fn``.

        Returns:
            Whatever ``fn`` returns.

        >>> from chute import MapDataset
        >>> def evens(ds):
        ...     return ds.filter(lambda x: x % 2 == 0)
        >>> list(MapDataset.range(6).pipe(evens))
        [0, 2, 4]
        """
        return fn(self, *args, **kwargs)

    def apply(self, transformations: Any) -> Any:
        """Applies a transform, or a sequence of transforms in order.

        Args:
            transformations: A ``chute.transforms`` object (``Map``,
                ``RandomMap``, ``MapWithIndex``, ``Filter``, ``FlatMap``,
                ``Batch``) or a sequence of them.

        Returns:
            The dataset with every transform applied.

        Raises:
            TypeError: An item is not a ``chute.transforms`` object.

        >>> from chute import MapDataset, transforms
        >>> ds = MapDataset.range(4).apply([transforms.Map(lambda x: x * 10), transforms.Batch(2)])
        >>> [b.tolist() for b in ds]
        [[0, 10], [20, 30]]
        """
        if not isinstance(transformations, Sequence):
            transformations = [transformations]
        ds = self
        for t in transformations:
            ds = apply_one(ds, t)
        return ds

    def __repr__(self) -> str:
        """The stage, its parents, and the function and seed it runs with.

        >>> from chute import MapDataset
        >>> def decode(x):
        ...     return x
        >>> MapDataset.range(3).shuffle(seed=42).map(decode)  # doctest: +ELLIPSIS
        MapMapDataset(ShuffleMapDataset(RangeMapDataset(...), shuffle(seed=42)), map(decode))
        """
        return f"{type(self).__name__}({self._describe()})"

    def _describe(self) -> str:
        parts = [repr(p) for p in self._parents]
        step = self._repr_step()
        if step:
            parts.append(step)
        if self._seed is not None:
            parts.append(f"seed={self._seed}")
        return ", ".join(parts)

    def _repr_step(self) -> str:
        """This stage as the call that built it (``map(decode)``, ``shuffle(seed=42)``) or ''."""
        label = self._label
        for attribute, stage in _SEEDED_STAGES:
            seed = getattr(self, attribute, None)
            if seed is not None:
                seeded = seed_label(self, seed)  # a derived seed shows its .seed() marks
                return f"{label[:-1]}, {seeded})" if label else f"{stage}({seeded})"
        return label


#: The attributes where random stages keep the seed they resolved, and the stage they name.
_SEEDED_STAGES = (("_shuffle_seed", "shuffle"), ("_rng_seed", "random_map"))


def apply_one(ds: Any, t: Any) -> Any:
    if isinstance(t, BuildsDatasetStage):  # a transform that builds its own stage
        return t._dataset_stage(ds)
    if isinstance(t, Map):
        return ds.map(t)
    if isinstance(t, RandomMap):
        return ds.random_map(t)
    if isinstance(t, MapWithIndex):
        return ds.map_with_index(t)
    if isinstance(t, Filter):
        return ds.filter(t)
    if isinstance(t, FlatMap):  # MapDataset and IterDataset each build their own stage
        return ds._flat_map(t)
    if isinstance(t, Batch):
        return ds.batch(t.batch_size, drop_remainder=t.drop_remainder, batch_fn=t.batch_fn)
    if isinstance(t, TfRandomMap):
        raise NotImplementedError(
            f"Transformation type: {t} is not supported. chute: apply() does not take a "
            f"TfRandomMap ({t!r}): it is for the DataLoader's operations. Subclass "
            "chute.transforms.RandomMap (random_map(element, rng)) instead."
        )
    raise UnsupportedTransformError(
        f"Transformation type: {t} is not supported. chute: apply() takes chute.transforms "
        f"objects (Map, RandomMap, MapWithIndex, Filter, FlatMap, Batch); got {t!r} that is a "
        f"{type(t).__name__}. Wrap a plain function as chute.transforms.Map(fn)."
    )


class UnsupportedTransformError(TypeError, NotImplementedError):
    """``apply()`` got something that is not a transform.

    A ``TypeError``, and the ``NotImplementedError`` that Grain raises for it.
    """
