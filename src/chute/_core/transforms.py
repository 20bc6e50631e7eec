"""Transformation base classes (``chute.transforms``).

Subclass one and implement its method, or pass a plain callable::

    class Normalise(chute.transforms.Map):
        def map(self, element):
            return element / 255

    chute.transforms.Map(lambda x: x / 255)     # the same, without a class
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chute._core.capabilities import HasParents


def _name(obj: object) -> str:
    """What errors and reprs call a transform: its function's name, or its class's."""
    fn = obj._fn if isinstance(obj, _Transform) else None
    if fn is not None:
        return _name(fn)
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


class _Transform:
    """Common base: holds an optional callable and checks one was given."""

    _method: str = ""
    _fn: Callable[..., Any] | None = None  # the user's function, when one was given

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        if fn is not None and not callable(fn):
            raise TypeError(
                f"{type(self).__name__} takes a callable (got {fn!r} that is a "
                f"{type(fn).__name__})."
            )
        if fn is None and getattr(type(self), self._method) is getattr(
            _BASES[self._method], self._method
        ):
            raise TypeError(
                f"{type(self).__name__} needs a function: pass one, e.g. "
                f"{type(self).__name__}(lambda x: ...), or subclass it and implement "
                f"{self._method}()."
            )
        self._fn = fn

    def _call(self, *args: Any) -> Any:
        fn = self._fn
        if fn is None:
            raise TypeError(f"{type(self).__name__}.{self._method}() is not implemented.")
        return fn(*args)

    def __repr__(self) -> str:
        fn = self._fn
        return (
            f"{type(self).__name__}({_name(fn)})" if fn is not None else f"{type(self).__name__}()"
        )


class Map(_Transform):
    """Applies ``map(element)`` to every element.

    Args:
        fn: The function to apply, ``fn(element)``; leave it out when you subclass and
            implement ``map()`` instead.

    >>> from chute import MapDataset
    >>> class Double(Map):
    ...     def map(self, element):
    ...         return element * 2
    >>> list(MapDataset.range(3).map(Double())), list(MapDataset.range(3).map(Map(str)))
    ([0, 2, 4], ['0', '1', '2'])
    """

    _method = "map"

    def map(self, element: Any) -> Any:
        """Transforms one element.

        Args:
            element: The input element.

        Returns:
            The transformed element.
        """
        return self._call(element)


class RandomMap(_Transform):
    """Applies ``random_map(element, rng)``; ``rng`` is a numpy Generator.

    Args:
        fn: The function to apply, ``fn(element, rng)``; leave it out when you subclass and
            implement ``random_map()`` instead.

    >>> from chute import MapDataset
    >>> noisy = RandomMap(lambda x, rng: x + int(rng.integers(0, 100)))
    >>> list(MapDataset.range(3).random_map(noisy, seed=7))
    [26, 70, 3]
    """

    _method = "random_map"

    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        """Transforms one element with randomness drawn from ``rng`` only.

        Args:
            element: The input element.
            rng: This element's own generator, reproducible from the seed and index.

        Returns:
            The transformed element.
        """
        return self._call(element, rng)


class TfRandomMap(_Transform):
    """Applies ``np_random_map(element, rng)``: a random map written for tf.data pipelines.

    In the DataLoader it runs like ``RandomMap`` (``rng`` is the record's
    Generator).  ``MapDataset.apply`` refuses it, as Grain does: use
    ``RandomMap`` there.

    Args:
        fn: The function to apply, ``fn(element, rng)``; leave it out when you subclass and
            implement ``np_random_map()`` instead.
    """

    _method = "np_random_map"

    def np_random_map(self, element: Any, rng: np.random.Generator) -> Any:
        """Transforms one element with randomness drawn from ``rng``.

        Args:
            element: The input element.
            rng: The record's NumPy Generator.

        Returns:
            The new element.
        """
        return self._call(element, rng)


class MapWithIndex(_Transform):
    """Applies ``map_with_index(index, element)``.

    Args:
        fn: The function to apply, ``fn(index, element)``; leave it out when you subclass and
            implement ``map_with_index()`` instead.

    >>> from chute import MapDataset
    >>> list(MapDataset.source("ab").map_with_index(MapWithIndex(lambda i, x: x * (i + 1))))
    ['a', 'bb']
    """

    _method = "map_with_index"

    def map_with_index(self, index: int, element: Any) -> Any:
        """Transforms one element, knowing its index.

        Args:
            index: The element's index (global for a MapDataset).
            element: The input element.

        Returns:
            The transformed element.
        """
        return self._call(index, element)


class Filter(_Transform):
    """Keeps the elements for which ``filter(element)`` is true.

    Args:
        fn: The function to apply, a predicate ``fn(element)``; leave it out when you subclass and
            implement ``filter()`` instead.

    >>> from chute import MapDataset
    >>> list(MapDataset.range(5).filter(Filter(lambda x: x % 2 == 1)))
    [1, 3]
    """

    _method = "filter"

    def filter(self, element: Any) -> bool:
        """Says whether to keep one element.

        Args:
            element: The input element.

        Returns:
            True to keep it.
        """
        return bool(self._call(element))


class FlatMap(_Transform):
    """Splits one element into at most ``max_fan_out`` elements.

    Use it with ``ds.apply(...)``, ``experimental.FlatMapMapDataset`` or
    ``experimental.FlatMapIterDataset``.

    Args:
        fn: The function ``fn(element)`` that returns an iterable of elements;
            leave it out when you subclass and implement ``flat_map()`` instead.
        max_fan_out: The most elements one element becomes (a MapDataset
            reserves this many indices per element).

    >>> from chute import MapDataset
    >>> split = FlatMap(lambda x: [x] * x, max_fan_out=3)
    >>> list(MapDataset.range(4).to_iter_dataset().apply(split))
    [1, 2, 2, 3, 3, 3]
    """

    _method = "flat_map"
    max_fan_out: int = 0

    def __init__(
        self, fn: Callable[[Any], Sequence[Any]] | None = None, *, max_fan_out: int | None = None
    ) -> None:
        super().__init__(fn)
        if max_fan_out is not None:
            self.max_fan_out = max_fan_out

    def flat_map(self, element: Any) -> Sequence[Any]:
        """Splits one element.

        Args:
            element: The input element.

        Returns:
            The elements it becomes, at most ``max_fan_out`` of them.
        """
        return self._call(element)


_BASES: dict[str, type] = {
    "map": Map,
    "random_map": RandomMap,
    "np_random_map": TfRandomMap,
    "map_with_index": MapWithIndex,
    "filter": Filter,
    "flat_map": FlatMap,
}


@dataclasses.dataclass(frozen=True)
class Batch:
    """Batches ``batch_size`` consecutive elements (stacking their leaves).

    Args:
        batch_size: Elements per batch (positive).
        drop_remainder: Drop the last batch when it is short.
        batch_fn: Builds a batch from a list of elements instead of stacking.

    >>> from chute import MapDataset
    >>> [b.tolist() for b in MapDataset.range(5).apply(Batch(2, drop_remainder=True))]
    [[0, 1], [2, 3]]
    """

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[Any]], Any] | None = None

    def __post_init__(self) -> None:
        from chute._core.validate import check_positive_int

        what = f"{type(self).__name__}: batch_size"
        check_positive_int(self.batch_size, what, grains=self._grains_low_size())

    def _grains_low_size(self) -> str:
        # Grain's words for a batch_size < 1 (its batch stage raises them).
        return "batch_size must be positive."


TRANSFORM_TYPES = (Map, RandomMap, TfRandomMap, MapWithIndex, Filter, FlatMap, Batch)

# Grain's names for "any transformation" and "a sequence of them", for annotations.
Transformation = Batch | Map | RandomMap | TfRandomMap | Filter | FlatMap | MapWithIndex
Transformations = Sequence[Transformation]


def callable_of(transform: Any, kind: type, where: str) -> Callable[..., Any]:
    """The function to call for ``transform``: the method of a ``kind``, or a callable.

    A chute transform of another kind is refused: each goes to its own method.
    """
    if isinstance(transform, kind):
        return getattr(transform, kind._method)  # type: ignore[attr-defined]
    if not callable(transform) or isinstance(transform, TRANSFORM_TYPES):
        raise TypeError(
            f"{where} takes a chute.transforms.{kind.__name__} or a callable (got "
            f"{transform!r} that is a {type(transform).__name__}). Each chute transform "
            "goes to the method of its kind (map, random_map, map_with_index, filter), "
            "or to apply() for FlatMap and Batch."
        )
    return transform


def apply_transformations(ds: Any, transformations: Any) -> Any:
    """``ds.apply(transformations)``: one transform or a sequence of them, in order.

    Kept for code written against Grain's ``apply_transformations``; prefer
    ``ds.apply(...)``.

    Args:
        ds: A MapDataset or an IterDataset.
        transformations: A ``chute.transforms`` object or a sequence of them.

    Returns:
        The dataset with every transform applied.

    >>> from chute import MapDataset, transforms
    >>> steps = [transforms.Map(lambda x: x * 2), transforms.Batch(2)]
    >>> list(apply_transformations(MapDataset.range(5), steps))
    [array([0, 2]), array([4, 6]), array([8])]
    """
    apply = getattr(ds, "apply", None)
    if apply is None or not isinstance(ds, HasParents):
        raise TypeError(
            f"apply_transformations() takes a MapDataset or an IterDataset (got {ds!r} that is "
            f"a {type(ds).__name__})."
        )
    return apply(transformations)
