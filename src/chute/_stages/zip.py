"""``ZipMapDataset`` and ``ZipIterDataset``: tuples of elements of several datasets.

Both take a sequence of parents and yield ``(a_i, b_i, ...)``.  As in Grain,
the MapDataset version requires parents of the same length (a hole, ``None``,
in one parent stays a ``None`` inside the tuple), and the IterDataset version
is strict by default: one parent ending before another is a ``ValueError``,
like Python's ``zip(..., strict=True)``.  With ``strict=False`` it stops at the
shortest parent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.state_check import count, fields, parent_states
from chute._core.validate import grain_first


def _check_parents(parents: Any, kinds: tuple[type, ...], where: str) -> tuple[Any, ...]:
    if isinstance(parents, (MapDataset, IterDataset)):
        parents = (parents,)
    try:
        parents = tuple(parents)
    except TypeError:
        raise TypeError(
            f"{where} takes a sequence of datasets (got {parents!r} that is a "
            f"{type(parents).__name__})."
        ) from None
    if not parents:
        raise ValueError(
            grain_first(
                "At least one parent must be provided.",
                f"{where}: at least one parent must be provided (got none).",
            )
        )
    names = " or ".join(k.__name__ for k in kinds)
    for i, p in enumerate(parents):
        if not isinstance(p, kinds):
            raise TypeError(
                f"{where}: parent {i} must be a {names} (got {type(p).__name__}). "
                "Zip MapDatasets with ZipMapDataset and IterDatasets with ZipIterDataset."
            )
    return parents


class ZipMapDataset(MapDataset[Any]):
    """Element ``i`` is the tuple of element ``i`` of every parent.

    Args:
        parents: MapDatasets of the same length.

    >>> from chute import MapDataset
    >>> list(ZipMapDataset([MapDataset.range(3), MapDataset.range(10, 13)]))
    [(0, 10), (1, 11), (2, 12)]
    """

    def __init__(self, parents: Sequence[MapDataset[Any]]) -> None:
        parents = _check_parents(parents, (MapDataset,), "ZipMapDataset")
        lengths = [len(p) for p in parents]
        if len(set(lengths)) != 1:
            raise ValueError(
                grain_first(
                    "All parents must have the same length.",
                    f"ZipMapDataset: all parents must have the same length (got lengths "
                    f"{lengths}). Slice the longer ones first, e.g. ds[:{min(lengths)}].",
                )
            )
        super().__init__(parents)

    def __len__(self) -> int:
        return len(self._parents[0])

    def _getitems(self, indices: Indices) -> list[Any]:
        columns = [p._getitems(indices) for p in self._parents]
        return list(zip(*columns))


class ZipIterDataset(IterDataset[Any]):
    """Tuples of the next element of every parent.

    Args:
      parents: IterDatasets (or MapDatasets, iterated in order).
      strict: raise ``ValueError`` when the parents do not end together
        (the default, as in Grain); with ``False``, stop at the shortest.

    >>> from chute import MapDataset
    >>> a, b = MapDataset.range(3).to_iter_dataset(), MapDataset.range(5).to_iter_dataset()
    >>> list(ZipIterDataset([a, b], strict=False))
    [(0, 0), (1, 1), (2, 2)]
    """

    def __init__(self, parents: Sequence[IterDataset[Any]], *, strict: bool = True) -> None:
        parents = _check_parents(parents, (IterDataset, MapDataset), "ZipIterDataset")
        if not isinstance(strict, bool):
            raise TypeError(f"ZipIterDataset: strict must be a bool (got {strict!r}).")
        super().__init__(parents)
        self._strict = strict

    def __iter__(self) -> DatasetIterator[Any]:
        return _ZipIterator([iter(p) for p in self._parents], self._strict)

    def _describe(self) -> str:
        return f"{super()._describe()}, strict={self._strict}"


def _mismatch(i: int, why: str) -> ValueError:
    others = "argument 1" if i == 1 else f"arguments 1-{i}"
    ended = f"argument {i + 1} ended first" if why == "shorter" else f"{others} ended first"
    return ValueError(
        f"ZipIterDataset argument {i + 1} is {why} than {others}. chute: stage zip (strict): "
        f"{ended}; make the parents the same length, or pass strict=False to stop at the "
        "shortest."
    )


class _ZipIterator(DatasetIterator[Any]):
    """Pulls one element from each parent in turn.

    Elements already pulled for the current tuple are kept when a later parent
    raises, and the next call only pulls the parents still missing.  The state
    of a parent holding such an element is its state before that pull, with a
    flag, so a restore pulls the element again.
    """

    _stage = "zip"
    _state_fields = fields(
        parents=parent_states,
        held=count(lambda it: len(it._parents) - 1, why="its parents, less one"),
    )

    def __init__(self, parents: list[DatasetIterator[Any]], strict: bool) -> None:
        super().__init__(parents)
        self._strict = strict
        self._items: list[Any] = []
        self._before: list[dict[str, Any]] = []

    def __next__(self) -> tuple[Any, ...]:
        parents, items = self._parents, self._items
        last = len(parents) - 1
        while len(items) <= last:
            i = len(items)
            if i < last:
                self._before.append(parents[i].get_state())
            try:
                items.append(next(parents[i]))
            except StopIteration:
                if i < last:
                    self._before.pop()
                if self._strict:
                    self._check_all_ended(i)
                raise
            except BaseException:
                if i < last:
                    self._before.pop()
                raise
        out = tuple(items)
        self._items, self._before = [], []
        return out

    def _check_all_ended(self, i: int) -> None:
        if i > 0:
            raise _mismatch(i, "shorter")
        for j in range(1, len(self._parents)):
            try:
                next(self._parents[j])
            except StopIteration:
                continue
            raise _mismatch(j, "longer")

    def get_state(self) -> dict[str, Any]:
        held = len(self._items)
        states = self._before[:held] + [p.get_state() for p in self._parents[held:]]
        return self._state(parents=states, held=held)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parents", "held")
        states, held = state["parents"], int(state["held"])
        for parent, s in zip(self._parents, states):
            parent.set_state(s)
        self._items, self._before = [], []
        for parent, s in zip(self._parents[:held], states):
            self._before.append(s)
            self._items.append(next(parent))
