"""``WindowShuffleMapDataset`` and ``WindowShuffleIterDataset``: local shuffles.

Both cut the stream into windows of ``window_size`` consecutive elements and
permute each window with ``index_shuffle`` (4 rounds) seeded by ``seed + k``
for window ``k``, as Grain does:

* MapDataset: window ``k`` covers global indices ``[k*w, (k+1)*w)``; position
  ``p`` in it reads parent index ``k*w + index_shuffle(p, w - 1, seed + k)``.
  Grain lays this grid over all epochs at once, so when ``len % w != 0`` a
  window straddles the end of an epoch and an epoch repeats some elements and
  drops others.  chute cuts such a window at the epoch boundary and permutes
  each part within itself (same seed, the part's own length): every epoch is a
  true permutation, and every window that lies inside one epoch is Grain's.
* IterDataset: window ``k`` is the next ``w`` parent elements (fewer at the
  end); its ``t``-th output is element ``index_shuffle(L - 1 - t, L - 1,
  seed + k)`` of the ``L`` elements pulled.  Checkpoints store positions and
  refill the window from the parent on restore.

A seed outside ``[0, 2**32)`` raises ``SeedRangeError`` when the stage is built
(a ``TypeError``, as Grain raises on reading, and a ``ValueError``).
Seeds wrap modulo ``2**32`` (Grain raises once ``seed + k`` reaches it), and
a seed may also come from ``.seed()`` marks (Grain requires ``seed=``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.index_shuffle import index_shuffle_array
from chute._core.seeding import MAX_SEED, SeedRangeError, resolve_seed, seed_label
from chute._core.state_check import (
    REACH,
    check_pulls,
    count,
    fields,
    parent_state,
    parents_reach,
    pull_numbers,
    require,
)
from chute._core.validate import check_positive_int
from chute._stages._pull_log import PullLog


def window_permutation(length: int, seed: int) -> np.ndarray:
    """``index_shuffle(p, length - 1, seed, 4)`` for every ``p < length``.

    >>> window_permutation(4, 0).tolist()
    [0, 3, 1, 2]
    """
    return index_shuffle_array(np.arange(length), length - 1, seed)


def _check_window(window_size: Any, where: str) -> int:
    return check_positive_int(window_size, f"{where}: window_size")


class WindowShuffleMapDataset(MapDataset[Any]):
    """Shuffles within windows of ``window_size`` consecutive elements.

    Args:
        parent: The MapDataset to shuffle.
        window_size: Elements per window (positive).
        seed: The shuffle's seed; when None, derived from ``.seed()`` marks above.

    >>> from chute import MapDataset
    >>> list(WindowShuffleMapDataset(MapDataset.range(8), window_size=4, seed=0))
    [0, 3, 1, 2, 5, 6, 7, 4]
    """

    def __init__(
        self, parent: MapDataset[Any], *, window_size: int, seed: int | None = None
    ) -> None:
        super().__init__(parent)
        self._window = _check_window(window_size, "WindowShuffleMapDataset")
        self._shuffle_seed = resolve_seed(
            self, seed, "WindowShuffleMapDataset", out_of_range=SeedRangeError
        )

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        if len(self._parent) == 0:
            raise IndexError("cannot read from an empty dataset.")
        return self._parent._getitems(self._parent_indices(indices))

    def _parent_indices(self, indices: Indices) -> Indices:
        """The parent index each of ``indices`` reads."""
        n, w = len(self._parent), self._window
        if w == 1:
            return indices
        idx = np.asarray(indices, dtype=np.int64)
        window = idx // w
        epoch_start = idx - idx % n
        # The part of the window that lies in this index's epoch.
        start = np.maximum(window * w, epoch_start)
        length = np.minimum(window * w - start + w, epoch_start - start + n)
        pos = idx - start
        out = np.empty_like(idx)
        _, first, group = np.unique(start, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        for g, f in enumerate(first.tolist()):
            size, seed = int(length[f]), (self._shuffle_seed + int(window[f])) % MAX_SEED
            sel = group == g
            out[sel] = index_shuffle_array(pos[sel], size - 1, seed)
        return out + start

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, int(np.asarray(self._parent_indices([index]))[0])

    def _describe(self) -> str:
        return (
            f"{self._parent!r}, window_size={self._window}, {seed_label(self, self._shuffle_seed)}"
        )


class WindowShuffleIterDataset(IterDataset[Any]):
    """Pulls ``window_size`` elements at a time and yields them shuffled.

    Args:
        parent: The IterDataset to shuffle.
        window_size: Elements per window (positive).
        seed: The shuffle's seed; when None, derived from ``.seed()`` marks above.

    >>> from chute import MapDataset
    >>> ds = MapDataset.range(10).to_iter_dataset()
    >>> list(WindowShuffleIterDataset(ds, window_size=4, seed=0))
    [2, 1, 3, 0, 4, 7, 6, 5, 9, 8]
    """

    def __init__(
        self, parent: IterDataset[Any], *, window_size: int, seed: int | None = None
    ) -> None:
        super().__init__(parent)
        self._window = _check_window(window_size, "WindowShuffleIterDataset")
        self._shuffle_seed = resolve_seed(
            self, seed, "WindowShuffleIterDataset", out_of_range=SeedRangeError
        )

    def __iter__(self) -> DatasetIterator[Any]:
        return _WindowShuffleIterator(iter(self._parent), self._window, self._shuffle_seed)

    def _describe(self) -> str:
        return (
            f"{self._parent!r}, window_size={self._window}, {seed_label(self, self._shuffle_seed)}"
        )


class _WindowShuffleIterator(DatasetIterator[Any]):
    """Holds one window, pulled through a ``PullLog``.

    The state is the window's number, how many of its elements were yielded,
    and the log's positions (the parent's state before the window and the
    pulls made for it), so a restore refills the same window from the parent.
    """

    _stage = "window_shuffle"
    _state_fields = fields(
        parent=parent_state,
        window=count(parents_reach, why=REACH),
        emitted=count(lambda it: it._size, why="the window size"),
        pulls=count(),
        failed=pull_numbers,
    )

    def __init__(self, parent: DatasetIterator[Any], window: int, seed: int) -> None:
        super().__init__(parent)
        self._size, self._seed = window, seed
        self._log = PullLog(parent, self._stage)
        self._index = 0  # number of the current window
        self._order: list[int] | None = None  # output order, set once the window is full
        self._emitted = 0

    def __next__(self) -> Any:
        order = self._order if self._order is not None else self._shuffle()
        if self._emitted >= len(order):
            raise StopIteration
        x = self._log.items[order[self._emitted]]
        self._emitted += 1
        if self._emitted == len(order):
            self._index += 1
            self._next_window()
        return x

    def _shuffle(self) -> list[int]:
        self._log.fill(self._size)
        size = len(self._log.items)
        seed = (self._seed + self._index) % MAX_SEED
        self._order = window_permutation(size, seed)[::-1].tolist() if size else []
        return self._order

    def _next_window(self) -> None:
        self._log.clear()
        self._order, self._emitted = None, 0

    def get_state(self) -> dict[str, Any]:
        return self._state(window=self._index, emitted=self._emitted, **self._log.state())

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "window", "pulls", "failed", "emitted")
        self._next_window()
        self._log.restore(state)
        self._index = int(state["window"])
        self._emitted = int(state["emitted"])
        if self._emitted:
            self._shuffle()

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        check_pulls(self, state, where, kept_most=self._size)
        held, emitted = state["pulls"] - len(state["failed"]), state["emitted"]
        require(self, emitted < held or not emitted, where, f"{emitted} of {held} emitted")
