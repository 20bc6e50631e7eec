"""``RebatchIterDataset``: batches of one size cut into batches of another.

The parent yields batches: PyTrees whose leaves are arrays sharing a leading
(batch) axis.  The rows of consecutive parent batches are cut and joined
(``numpy.concatenate``, leaf by leaf) into batches of ``batch_size`` rows; the
last, smaller batch is kept unless ``drop_remainder``.  As in Grain, every
output batch is made of whole rows in their original order.  Unlike Grain,
empty parent batches are skipped (Grain raises) and parent batches whose
structures or leading sizes disagree raise a ``ValueError`` (Grain goes on
with the first batch's structure).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from chute._core import tree
from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.errors import CheckpointError
from chute._core.state_check import check_pulls, count, fields, parent_state, pull_numbers, require
from chute._core.validate import check_positive_int


class RebatchIterDataset(IterDataset[Any]):
    """Re-cuts batched elements into batches of ``batch_size`` rows.

    Args:
        parent: An IterDataset of batches.
        batch_size: Rows per output batch (positive).
        drop_remainder: Drop the last, short batch.

    >>> from chute import MapDataset
    >>> ds = MapDataset.range(7).to_iter_dataset().batch(3)
    >>> [b.tolist() for b in RebatchIterDataset(ds, 2)]
    [[0, 1], [2, 3], [4, 5], [6]]
    """

    def __init__(
        self, parent: IterDataset[Any], batch_size: int, drop_remainder: bool = False
    ) -> None:
        super().__init__(parent)
        self._size = check_positive_int(
            batch_size, "RebatchIterDataset: batch_size", grains="batch_size must be positive."
        )
        if not isinstance(drop_remainder, (bool, np.bool_)):
            raise TypeError(
                f"RebatchIterDataset: drop_remainder must be a bool (got {drop_remainder!r})."
            )
        self._drop = bool(drop_remainder)

    def __iter__(self) -> DatasetIterator[Any]:
        return _RebatchIterator(iter(self._parent), self._size, self._drop)

    def _describe(self) -> str:
        return f"{self._parent!r}, batch_size={self._size}, drop_remainder={self._drop}"


class _Pulled(NamedTuple):
    before: dict[str, Any]  # the parent's state before this pull
    batch: Any  # None when the pull raised
    rows: int


def _rows(batch: Any) -> int:
    leaves: list[Any] = []
    tree.map_structure(leaves.append, batch)
    if not leaves:
        raise ValueError(f"RebatchIterDataset: got an element without leaves ({batch!r}).")
    sizes = set()
    for leaf in leaves:
        if np.ndim(leaf) == 0:
            raise TypeError(
                "RebatchIterDataset takes batches: every leaf needs a leading batch axis "
                f"(got a leaf {leaf!r} in {tree.describe(batch)}). Batch the elements first."
            )
        sizes.add(np.shape(leaf)[0])
    if len(sizes) != 1:
        raise ValueError(
            "RebatchIterDataset: the leaves of one batch have different leading sizes "
            f"{sorted(sizes)} ({tree.describe(batch)})."
        )
    return int(sizes.pop())


def _join(pieces: list[Any]) -> Any:
    if len(pieces) == 1:
        return pieces[0]
    first = tree.map_structure(lambda _: 0, pieces[0])
    for piece in pieces[1:]:
        if tree.map_structure(lambda _: 0, piece) != first:
            raise ValueError(
                "RebatchIterDataset cannot join batches of different structures: "
                f"{tree.describe(pieces[0])} and {tree.describe(piece)}."
            )
    return tree.map_structure(lambda *leaves: np.concatenate(leaves), *pieces)


class _RebatchIterator(DatasetIterator[Any]):
    """Keeps the parent batches whose rows are not all emitted yet.

    The state is the parent's state before the oldest such batch, the number
    of pulls since then (and which of them raised), and how many rows of the
    oldest batch were already emitted.  A restore replays those pulls, so a
    parent that raised part way through an output batch loses no rows.
    """

    _stage = "rebatch"
    _state_fields = fields(
        parent=parent_state,
        pulls=count(),
        failed=pull_numbers,
        skip=count(),
    )

    def __init__(self, parent: DatasetIterator[Any], size: int, drop: bool) -> None:
        super().__init__(parent)
        self._size, self._drop = size, drop
        self._held: list[_Pulled] = []
        self._skip = 0  # rows of self._held[0] already emitted
        self._buffered = 0  # rows held and not yet emitted

    def __next__(self) -> Any:
        while self._buffered < self._size and self._pull():
            pass
        count = min(self._buffered, self._size)
        if not count or (count < self._size and self._drop):
            self._held, self._skip, self._buffered = [], 0, 0
            raise StopIteration
        return _join(self._take(count))

    def _pull(self) -> bool:
        before = self._parent.get_state()
        try:
            batch = next(self._parent)
            rows = _rows(batch)
        except StopIteration:
            return False
        except Exception:
            self._held.append(_Pulled(before, None, 0))
            self._compact()
            raise
        self._held.append(_Pulled(before, batch, rows))
        self._buffered += rows
        self._compact()
        return True

    def _take(self, count: int) -> list[Any]:
        pieces = []
        while count:
            batch, rows = self._held[0].batch, self._held[0].rows
            n = min(rows - self._skip, count)
            if n == rows:
                pieces.append(batch)
            else:
                cut = slice(self._skip, self._skip + n)
                pieces.append(tree.map_structure(lambda leaf, cut=cut: leaf[cut], batch))
            self._skip += n
            self._buffered -= n
            count -= n
            self._compact()
        return pieces

    def _compact(self) -> None:
        """Drops the oldest held batches once all their rows are emitted."""
        held = self._held
        while held and held[0].rows == self._skip:
            held.pop(0)
            self._skip = 0

    def get_state(self) -> dict[str, Any]:
        if not self._held:
            return self._state(parent=self._parent.get_state(), pulls=0, failed=[], skip=0)
        failed = [k for k, p in enumerate(self._held) if p.batch is None]
        return self._state(
            parent=self._held[0].before, pulls=len(self._held), failed=failed, skip=self._skip
        )

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "pulls", "failed", "skip")
        self._parent.set_state(state["parent"])
        self._held, self._skip, self._buffered = [], 0, 0
        failed = set(state["failed"])
        for k in range(int(state["pulls"])):
            before = self._parent.get_state()
            if k in failed:
                try:
                    next(self._parent)
                except Exception:
                    pass
                self._held.append(_Pulled(before, None, 0))
            else:
                try:
                    batch = next(self._parent)
                except StopIteration:
                    raise CheckpointError(
                        "rebatch: the parent ended while replaying the pulls recorded in the "
                        "checkpoint: the pipeline or its data differ from the ones that saved it."
                    ) from None
                self._held.append(_Pulled(before, batch, _rows(batch)))
                self._buffered += self._held[-1].rows
        self._skip = int(state["skip"])
        self._buffered -= self._skip

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        check_pulls(self, state, where, kept_most=None)
        skip, pulls = state["skip"], state["pulls"]
        require(self, pulls or not skip, where, f"{skip} rows skipped of no batch")
