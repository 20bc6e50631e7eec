"""``filter`` for both dataset kinds."""

from __future__ import annotations

from typing import Any

from chute._core import errors
from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.transforms import Filter, _name, callable_of


class FilterMapDataset(MapDataset[Any]):
    """Elements where the predicate is false read as ``None``.

    ``to_iter_dataset()`` skips them; ``batch`` refuses to follow a filter
    (batch after ``to_iter_dataset()`` instead).
    """

    def __init__(self, parent: MapDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._pred = callable_of(transform, Filter, "MapDataset.filter()")
        self._label = f"filter({_name(transform)})"

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        items = self._parent._getitems(indices)
        pred = self._pred
        out: list[Any] = []
        append = out.append
        try:
            for x in items:
                append(x if x is not None and pred(x) else None)
        except Exception as exc:
            errors.annotate(exc, self._label, int(indices[len(out)]))
            raise
        return out


class FilterIterDataset(IterDataset[Any]):
    """Keeps the elements where the predicate is true."""

    def __init__(self, parent: IterDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._pred = callable_of(transform, Filter, "IterDataset.filter()")
        self._label = f"filter({_name(transform)})"

    def __iter__(self) -> DatasetIterator[Any]:
        return _FilterIterator(iter(self._parent), self._pred, self._label)


class _FilterIterator(DatasetIterator[Any]):
    _stage = "filter"

    def __init__(self, parent: DatasetIterator[Any], pred: Any, label: str) -> None:
        super().__init__(parent)
        self._pred, self._label, self._index = pred, label, 0

    def __next__(self) -> Any:
        parent, pred = self._parent, self._pred
        while True:
            x = next(parent)
            self._index += 1
            try:
                if pred(x):
                    return x
            except Exception as exc:
                errors.annotate(exc, self._label, self._index - 1)
                raise

    def get_state(self) -> dict[str, Any]:
        return self._state(parent=self._parent.get_state(), index=self._index)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "index")
        self._parent.set_state(state["parent"])
        self._index = int(state["index"])
