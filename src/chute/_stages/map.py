"""``map``, ``random_map`` and ``map_with_index`` for both dataset kinds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from chute._core import errors
from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.indexing import converted, numpy_index_type
from chute._core.seeding import ElementRng, resolve_seed
from chute._core.state_check import REACH, count, fields, parent_state, parents_reach
from chute._core.transforms import Map, MapWithIndex, RandomMap, callable_of
from chute._stages._origin import label, locate, locate_last
from chute._stages.next_index import get_next_index, set_next_index

S = TypeVar("S")


class MapMapDataset(MapDataset[S]):
    """Applies a function to every element; ``None`` (filtered) stays ``None``."""

    def __init__(self, parent: MapDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._fn = callable_of(transform, Map, "MapDataset.map()")
        self._label = label("map", transform)

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        items = self._parent._getitems(indices)
        fn = self._fn
        out: list[Any] = []
        append = out.append
        try:
            for x in items:
                append(None if x is None else fn(x))
        except Exception as exc:
            i = int(indices[len(out)])
            errors.annotate(exc, self._label, i, locate(self, i))
            raise
        return out

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, index


class MapWithIndexMapDataset(MapDataset[S]):
    """Applies ``fn(index, element)``; the index is the global one asked for."""

    def __init__(self, parent: MapDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._fn = callable_of(transform, MapWithIndex, "MapDataset.map_with_index()")
        self._label = label("map_with_index", transform)

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        items = self._parent._getitems(indices)
        fn, kind = self._fn, numpy_index_type()
        index_of = int if kind is None else _typed(kind)  # Grain hands on the index's type
        out: list[Any] = []
        append = out.append
        try:
            for i, x in zip(indices, items):
                append(None if x is None else fn(index_of(i), x))
        except Exception as exc:
            i = int(indices[len(out)])
            errors.annotate(exc, self._label, i, locate(self, i))
            raise
        return out

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, index


class RandomMapMapDataset(MapDataset[S]):
    """Applies ``fn(element, rng)``; element ``i`` gets Philox(seed) at counter i."""

    def __init__(self, parent: MapDataset[Any], transform: Any, *, seed: int | None = None) -> None:
        super().__init__(parent)
        self._fn = callable_of(transform, RandomMap, "MapDataset.random_map()")
        self._label = label("random_map", transform)
        self._rng_seed = resolve_seed(self, seed, "random_map", wide=True)

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        items = self._parent._getitems(indices)
        fn, rng = self._fn, ElementRng(self._rng_seed)
        out: list[Any] = []
        append = out.append
        try:
            for i, x in zip(indices, items):
                append(None if x is None else fn(x, rng.at(int(i))))
        except Exception as exc:
            i = int(indices[len(out)])
            if i < 0:  # rng.at refused it before fn ran
                raise IndexError(_negative_draw(self._label, i)) from None
            errors.annotate(exc, self._label, i, locate(self, i))
            raise
        return out

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, index


def _typed(kind: type[np.integer]) -> Callable[[Any], Any]:
    """Index ``i`` as a ``kind``, or OverflowError where it does not fit (never wrapped)."""
    return lambda i: converted([int(i)], kind, "MapDataset.map_with_index()")[0]


def _negative_draw(label: str, index: int) -> str:
    return (
        f"{label}: element {index} has no random numbers: element i draws from Philox at "
        "counter [0, 0, 0, i], which exists for i >= 0 only (Grain raises OverflowError). "
        "A negative index reads an epoch before the first one, as in Grain; for the last "
        "element of the first epoch read ds[len(ds) - 1]."
    )


class MapIterDataset(IterDataset[S]):
    """Applies a function to every element of an IterDataset."""

    def __init__(self, parent: IterDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._fn = callable_of(transform, Map, "IterDataset.map()")
        self._label = label("map", transform)

    def __iter__(self) -> DatasetIterator[Any]:
        return _MapIterator(iter(self._parent), self._label, lambda i, x: self._fn(x))


class MapWithIndexIterDataset(IterDataset[S]):
    """Applies ``fn(index, element)``; the index counts the elements seen here."""

    def __init__(self, parent: IterDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._fn = callable_of(transform, MapWithIndex, "IterDataset.map_with_index()")
        self._label = label("map_with_index", transform)

    def __iter__(self) -> DatasetIterator[Any]:
        return _MapIterator(iter(self._parent), self._label, self._fn, own_index=True)


class RandomMapIterDataset(IterDataset[S]):
    """Applies ``fn(element, rng)``; the n-th element seen here gets counter n.

    In a worker's (or thread's) share of the pipeline, the n-th element gets
    the counter its share's ``_ordinals`` give it (see ``chute._stages.slicing``),
    so the draws are those of the pipeline without workers.
    """

    _ordinals: Any = None  # set on a worker's copy by chute._stages.slicing

    def __init__(
        self, parent: IterDataset[Any], transform: Any, *, seed: int | None = None
    ) -> None:
        super().__init__(parent)
        self._fn = callable_of(transform, RandomMap, "IterDataset.random_map()")
        self._label = label("random_map", transform)
        self._rng_seed = resolve_seed(self, seed, "random_map", wide=True)

    def __iter__(self) -> DatasetIterator[Any]:
        fn, rng, ordinals = self._fn, ElementRng(self._rng_seed), self._ordinals
        if ordinals is None:
            apply = lambda i, x: fn(x, rng.at(i))  # noqa: E731
        else:
            apply = lambda i, x: fn(x, rng.at(ordinals(i)))  # noqa: E731
        return _MapIterator(iter(self._parent), self._label, apply, own_index=True)


class _MapIterator(DatasetIterator[Any]):
    _stage = "map"
    _state_fields = fields(parent=parent_state, index=count(parents_reach, why=REACH))
    _last_from_parent = True  # element i here is the parent's last: see _origin.py

    def __init__(
        self,
        parent: DatasetIterator[Any],
        label: str,
        fn: Callable[[int, Any], Any],
        *,
        own_index: bool = False,
    ) -> None:
        super().__init__(parent)
        self._label, self._fn, self._index = label, fn, 0
        self._own_index = own_index  # map_with_index, random_map: their index is their count

    def __next__(self) -> Any:
        x = next(self._parent)
        i = self._index
        self._index = i + 1
        try:
            return self._fn(i, x)
        except Exception as exc:
            errors.annotate(exc, self._label, i, locate_last(self))
            raise

    def _repr_position(self) -> int:
        return self._index

    def _get_next_index(self) -> int:
        return self._index if self._own_index else get_next_index(self._parent)

    def _set_next_index(self, index: int) -> None:
        set_next_index(self._parent, index)
        self._index = index

    def get_state(self) -> dict[str, Any]:
        return self._state(parent=self._parent.get_state(), index=self._index)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "index")
        self._parent.set_state(state["parent"])
        self._index = int(state["index"])

    def _reach(self) -> int | None:
        return self._parent._reach()
