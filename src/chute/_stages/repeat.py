"""``MapDataset.repeat`` and the experimental ``RepeatIterDataset``."""

from __future__ import annotations

import sys
from typing import Any, TypeVar

import numpy as np

from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.state_check import count, fields, parent_state
from chute._core.validate import check_int

T = TypeVar("T")


def _check_epochs(num_epochs: Any, where: str) -> int | None:
    if num_epochs is None:
        return None
    epochs = check_int(num_epochs, f"{where}: num_epochs")
    if epochs <= 0:
        raise ValueError(
            f"num_epochs must be positive, but got {epochs}. chute: {where}: num_epochs must be "
            ">= 1, or None to repeat forever."
        )
    return epochs


class RepeatMapDataset(MapDataset[T]):
    """The parent ``num_epochs`` times (``sys.maxsize`` elements if None).

    As in Grain, repeating an empty dataset gives an empty one (even forever),
    and repeating an infinite dataset raises a ``ValueError``.  With
    ``reseed_each_epoch`` (the default) index ``i`` reads the parent's epoch
    ``i // len(parent)`` (reshuffled, reseeded); without it every epoch reads
    the parent's first epoch again.
    """

    def __init__(
        self,
        parent: MapDataset[Any],
        num_epochs: int | None = None,
        *,
        reseed_each_epoch: bool = True,
    ) -> None:
        super().__init__(parent)
        self._epochs = _check_epochs(num_epochs, "MapDataset.repeat()")
        if len(parent) >= sys.maxsize:
            raise ValueError(
                f"Repeating already infinite dataset {parent!r} does nothing. chute: call "
                "repeat() once, or give the earlier repeat a finite num_epochs."
            )
        self._reseed = bool(reseed_each_epoch)

    def __len__(self) -> int:
        n = len(self._parent)
        if self._epochs is None:
            return sys.maxsize if n else 0
        return n * self._epochs

    def _getitems(self, indices: Indices) -> list[Any]:
        if self._reseed:
            return self._parent._getitems(indices)
        n = len(self._parent)
        return self._parent._getitems(np.asarray(indices, dtype=np.int64) % n)

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, index if self._reseed else index % len(self._parent)

    def _describe(self) -> str:
        return f"{self._parent!r}, num_epochs={self._epochs}"


class RepeatIterDataset(IterDataset[Any]):
    """Iterates the parent again and again (forever if ``num_epochs`` is None).

    Args:
        parent: The IterDataset to repeat.
        num_epochs: How many passes; None repeats forever.
    """

    def __init__(self, parent: IterDataset[Any], num_epochs: int | None = None) -> None:
        super().__init__(parent)
        self._epochs = _check_epochs(num_epochs, "RepeatIterDataset")

    def __iter__(self) -> DatasetIterator[Any]:
        return _RepeatIterator(self._parent, self._epochs)


class _RepeatIterator(DatasetIterator[Any]):
    _stage = "repeat"
    _state_fields = fields(
        parent=parent_state,
        epoch=count(lambda it: it._epochs, why="its number of epochs"),
    )

    def __init__(self, dataset: IterDataset[Any], epochs: int | None) -> None:
        super().__init__(iter(dataset))
        self._epochs, self._epoch = epochs, 0
        self._initial = self._parents[0].get_state()
        self._empty_epoch = True

    def __next__(self) -> Any:
        while True:
            try:
                x = next(self._parents[0])
            except StopIteration:
                if self._empty_epoch:
                    raise  # an epoch without elements: stop instead of spinning forever
                self._epoch += 1
                if self._epochs is not None and self._epoch >= self._epochs:
                    raise
                self._restart()
                continue
            self._empty_epoch = False
            return x

    def _restart(self) -> None:
        """Rewinds the parent iterator: worker processes and threads live on."""
        self._parents[0].set_state(self._initial)
        self._empty_epoch = True

    def get_state(self) -> dict[str, Any]:
        return self._state(parent=self._parents[0].get_state(), epoch=self._epoch)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "epoch")
        self._epoch = int(state["epoch"])
        self._parents[0].set_state(state["parent"])
        self._empty_epoch = False

    def _reach(self) -> int | None:
        reach = self._parent._reach()
        return None if reach is None or self._epochs is None else reach * self._epochs
