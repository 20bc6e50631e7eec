"""``FlatMapMapDataset`` and ``FlatMapIterDataset``: one element into many.

The transform is a ``chute.transforms.FlatMap``: ``flat_map(element)`` returns
a sequence (or any iterable) of output elements.  As in Grain, the MapDataset
version keeps random access by giving every parent element ``max_fan_out``
slots: its length is ``len(parent) * max_fan_out``, index ``i`` reads piece
``i % max_fan_out`` of parent element ``i // max_fan_out``, unused slots read
as ``None`` (skipped by ``to_iter_dataset()``), and an element that splits
into more than ``max_fan_out`` pieces raises ``ValueError``.  The IterDataset
version simply yields every piece in order and ignores ``max_fan_out``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chute._core import errors
from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.errors import CheckpointError
from chute._core.state_check import REACH, count, fields, parent_state, parents_reach, require
from chute._core.transforms import FlatMap, callable_of
from chute._stages._origin import label, locate, locate_last


def _fan_out(transform: Any) -> int:
    where = "FlatMapMapDataset"
    if not isinstance(transform, FlatMap):
        raise TypeError(
            f"{where} needs a chute.transforms.FlatMap with max_fan_out, the most pieces "
            f"one element splits into (got {transform!r} that is a "
            f"{type(transform).__name__}). Wrap it as chute.transforms.FlatMap(fn, "
            "max_fan_out=N), or use FlatMapIterDataset, which needs no bound."
        )
    fan_out = getattr(transform, "max_fan_out", None)
    how = "Set it as a class attribute or pass FlatMap(fn, max_fan_out=N)."
    if isinstance(fan_out, bool) or not isinstance(fan_out, (int, np.integer)):
        raise TypeError(f"{where}: max_fan_out must be an int (got {fan_out!r}). {how}")
    if fan_out < 1:
        raise ValueError(
            f"{where}: max_fan_out must be >= 1, the most pieces one element splits into "
            f"(got {fan_out}). {how}"
        )
    return int(fan_out)


def _pieces(split: Any) -> Sequence[Any]:
    if isinstance(split, (Sequence, np.ndarray)):
        return split  # type: ignore[return-value]
    return list(split)


class FlatMapMapDataset(MapDataset[Any]):
    """Every parent element split into ``max_fan_out`` slots (``None`` when unused).

    Args:
        parent: The MapDataset to split.
        transform: A ``chute.transforms.FlatMap`` with ``max_fan_out`` set.

    >>> from chute import MapDataset
    >>> from chute.transforms import FlatMap
    >>> ds = FlatMapMapDataset(MapDataset.range(3), FlatMap(lambda x: [x] * x, max_fan_out=2))
    >>> len(ds), [ds[i] for i in range(6)], list(ds)
    (6, [None, None, 1, None, 2, 2], [1, 2, 2])
    """

    def __init__(self, parent: MapDataset[Any], transform: FlatMap) -> None:
        super().__init__(parent)
        self._fan_out = _fan_out(transform)
        self._fn = callable_of(transform, FlatMap, "FlatMapMapDataset")
        self._label = label("flat_map", transform)

    def __len__(self) -> int:
        n = len(self._parent)
        return sys.maxsize if n > sys.maxsize // self._fan_out else n * self._fan_out

    def _getitems(self, indices: Indices) -> list[Any]:
        idx = np.asarray(indices, dtype=np.int64)
        sources, slots = np.divmod(idx, self._fan_out)
        wanted, where = np.unique(sources, return_inverse=True)
        splits = [self._split(int(s), x) for s, x in zip(wanted, self._parent._getitems(wanted))]
        out = []
        for k, slot in zip(where.tolist(), slots.tolist()):
            pieces = splits[k]
            out.append(pieces[slot] if slot < len(pieces) else None)
        return out

    def _split(self, source: int, element: Any) -> Sequence[Any]:
        if element is None:
            return ()
        try:
            pieces = _pieces(self._fn(element))
        except Exception as exc:
            errors.annotate(exc, self._label, source, locate(self._parent, source))
            raise
        if len(pieces) > self._fan_out:
            raise ValueError(
                f"{self._label}: parent element {source} split into {len(pieces)} pieces, "
                f"more than max_fan_out={self._fan_out}. Raise max_fan_out (every element "
                "takes that many slots), or use FlatMapIterDataset, which needs no bound."
            )
        return pieces

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, index // self._fan_out

    def _describe(self) -> str:
        return f"{self._parent!r}, {self._label}, max_fan_out={self._fan_out}"


class FlatMapIterDataset(IterDataset[Any]):
    """Every piece of every parent element, in order.

    Takes a ``chute.transforms.FlatMap`` or a plain function returning an
    iterable; ``max_fan_out`` is not needed here.

    Args:
        parent: The IterDataset to split.
        transform: A ``chute.transforms.FlatMap`` or a function returning an iterable.

    >>> from chute import MapDataset
    >>> list(FlatMapIterDataset(MapDataset.range(4).to_iter_dataset(), lambda x: [x] * x))
    [1, 2, 2, 3, 3, 3]
    """

    def __init__(self, parent: IterDataset[Any], transform: FlatMap | Callable[[Any], Any]) -> None:
        super().__init__(parent)
        self._fn = callable_of(transform, FlatMap, "FlatMapIterDataset")
        self._label = label("flat_map", transform)

    def __iter__(self) -> DatasetIterator[Any]:
        return _FlatMapIterator(iter(self._parent), self._fn, self._label)

    def _describe(self) -> str:
        return f"{self._parent!r}, {self._label}"


class _FlatMapIterator(DatasetIterator[Any]):
    """Holds the pieces of one parent element.

    The state is the parent's state before that element, how many parent
    elements were pulled, and how many pieces were already yielded; a restore
    pulls the element again and splits it again.
    """

    _stage = "flat_map"
    _state_fields = fields(
        parent=parent_state,
        pulled=count(parents_reach, why=REACH),
        next=count(),
    )

    def __init__(self, parent: DatasetIterator[Any], fn: Callable[[Any], Any], label: str) -> None:
        super().__init__(parent)
        self._fn, self._label = fn, label
        self._pieces: Sequence[Any] = ()
        self._next = 0  # next piece of self._pieces to yield
        self._before: dict[str, Any] | None = None  # parent state before the held element
        self._pulled = 0

    def __next__(self) -> Any:
        while self._next >= len(self._pieces):
            self._load_next()
        piece = self._pieces[self._next]
        self._next += 1
        return piece

    def _load_next(self) -> None:
        before = self._parent.get_state()
        element = next(self._parent)
        self._pieces, self._next, self._before = (), 0, None
        self._pulled += 1
        try:
            pieces = _pieces(self._fn(element))
        except Exception as exc:
            errors.annotate(exc, self._label, self._pulled - 1, locate_last(self._parent))
            raise
        self._pieces, self._before = pieces, before

    def get_state(self) -> dict[str, Any]:
        if self._next < len(self._pieces):
            return self._state(parent=self._before, pulled=self._pulled, next=self._next)
        return self._state(parent=self._parent.get_state(), pulled=self._pulled, next=0)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "pulled", "next")
        self._parent.set_state(state["parent"])
        self._pieces, self._next, self._before = (), 0, None
        self._pulled = int(state["pulled"])
        if state["next"]:
            self._pulled -= 1
            try:
                self._load_next()
            except StopIteration:
                raise CheckpointError(
                    "flat_map: the parent ended where the checkpoint holds an element part "
                    "way through: the pipeline or its data differ from the ones that saved it."
                ) from None
            self._next = int(state["next"])

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        next_piece, pulled = state["next"], state["pulled"]
        require(self, not next_piece or pulled, where, f"piece {next_piece} of no element")
