"""``LimitIterDataset``: at most ``count`` elements of the parent."""

from __future__ import annotations

from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.state_check import count, fields, parent_state
from chute._core.validate import check_int
from chute._stages.next_index import set_next_index


class LimitIterDataset(IterDataset[Any]):
    """The first ``count`` elements of the parent.

    Args:
        parent: The IterDataset to read.
        count: How many elements to yield (positive).

    >>> from chute import MapDataset
    >>> list(LimitIterDataset(MapDataset.range(10).to_iter_dataset(), 3))
    [0, 1, 2]
    """

    def __init__(self, parent: IterDataset[Any], count: int) -> None:
        super().__init__(parent)
        self._count = check_int(count, "LimitIterDataset: count")
        if self._count <= 0:
            raise ValueError(
                f"Count must be a non-negative integer. Got {self._count}. chute: "
                "LimitIterDataset needs a count >= 1."
            )

    def __iter__(self) -> DatasetIterator[Any]:
        return _LimitIterator(iter(self._parent), self._count)

    def _describe(self) -> str:
        return f"{self._parent!r}, count={self._count}"


class _LimitIterator(DatasetIterator[Any]):
    _stage = "limit"
    _state_fields = fields(
        parent=parent_state,
        read=count(lambda it: it._count, why="the limit's count"),
    )

    def __init__(self, parent: DatasetIterator[Any], count: int) -> None:
        super().__init__(parent)
        self._count, self._read = count, 0

    def __next__(self) -> Any:
        if self._read >= self._count:
            raise StopIteration
        self._read += 1
        try:
            return next(self._parent)
        except StopIteration:
            self._read -= 1
            raise

    def get_state(self) -> dict[str, Any]:
        return self._state(parent=self._parent.get_state(), read=self._read)

    def _get_next_index(self) -> int:
        return self._read

    def _set_next_index(self, index: int) -> None:
        set_next_index(self._parent, index)
        self._read = index

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "read")
        self._parent.set_state(state["parent"])
        self._read = int(state["read"])

    def _reach(self) -> int | None:
        reach = self._parent._reach()
        return self._count if reach is None else min(reach, self._count)
