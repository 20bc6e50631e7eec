"""``MapDataset.shuffle``: a global shuffle, reshuffled every epoch."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

from chute._core.dataset import Indices, MapDataset
from chute._core.index_shuffle import index_shuffle_array
from chute._core.seeding import MAX_SEED, resolve_seed

T = TypeVar("T")


def shuffled_indices(indices: Indices, length: int, seed: int) -> np.ndarray:
    """Maps global indices through the per-epoch permutation of ``length`` items.

    Index ``i`` is in epoch ``i // length``; each epoch permutes with seed
    ``(seed + epoch) % 2**32`` and stays within its own block of indices.
    """
    idx = np.asarray(indices, dtype=np.int64)
    epochs, within = np.divmod(idx, length)
    first = int(epochs[0]) if idx.size else 0
    if idx.size and (epochs == first).all():
        perm = index_shuffle_array(within, length - 1, (seed + first) % MAX_SEED)
        return perm.astype(np.int64) + first * length
    out = np.empty_like(idx)
    for epoch in np.unique(epochs):
        sel = epochs == epoch
        perm = index_shuffle_array(within[sel], length - 1, (seed + int(epoch)) % MAX_SEED)
        out[sel] = perm.astype(np.int64) + int(epoch) * length
    return out


class ShuffleMapDataset(MapDataset[T]):
    """Element ``i`` of epoch ``e`` is parent element ``perm_e(i) + e * len``."""

    def __init__(self, parent: MapDataset[Any], *, seed: int | None = None) -> None:
        super().__init__(parent)
        self._shuffle_seed = resolve_seed(self, seed, "shuffle")

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        n = len(self._parent)
        if n == 0:
            raise IndexError("cannot read from an empty dataset.")
        return self._parent._getitems(shuffled_indices(indices, n, self._shuffle_seed))

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, int(shuffled_indices([index], len(self._parent), self._shuffle_seed)[0])
