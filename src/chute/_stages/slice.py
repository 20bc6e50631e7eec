"""``MapDataset.slice`` and ``ds[start:stop:step]``."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from chute._core.dataset import Indices, MapDataset
from chute._core.fingerprint import digest

T = TypeVar("T")


class SliceMapDataset(MapDataset[T]):
    """The parent's elements at a slice or at a sequence of indices.

    Past its length, index ``i`` reads epoch ``i // len`` of the parent, so a
    slice of a shuffled dataset is reshuffled in later epochs too.
    """

    def __init__(self, parent: MapDataset[Any], sl: slice | Sequence[int]) -> None:
        super().__init__(parent)
        n = len(parent)
        if isinstance(sl, builtins.slice):
            self._positions: builtins.range | np.ndarray = builtins.range(n)[sl]
        elif isinstance(sl, (Sequence, np.ndarray)) and not isinstance(sl, (str, bytes)):
            positions = np.asarray(sl)
            if positions.ndim != 1 or (
                positions.size and not np.issubdtype(positions.dtype, np.integer)
            ):
                raise ValueError(
                    f"sl is not a slice: {type(sl)}. chute: MapDataset.slice() takes a slice "
                    f"or a sequence of ints (got {sl!r})."
                )
            bad = positions[(positions < -n) | (positions >= n)]
            if bad.size:
                raise IndexError(
                    f"MapDataset.slice(): index {int(bad[0])} is out of range for a dataset "
                    f"of {n} elements."
                )
            self._positions = np.where(positions < 0, positions + n, positions).astype(np.int64)
        else:
            raise ValueError(  # Grain's type and first sentence
                f"sl is not a slice: {type(sl)}. chute: MapDataset.slice() takes a slice or a "
                f"sequence of ints (got {sl!r} that is a {type(sl).__name__})."
            )
        self._desc = (
            repr(sl) if isinstance(sl, builtins.slice) else f"{len(self._positions)} indices"
        )

    def __len__(self) -> int:
        return len(self._positions)

    def _getitems(self, indices: Indices) -> list[Any]:
        if len(self._positions) == 0:
            raise IndexError("cannot read from an empty slice.")
        return self._parent._getitems(self._parent_indices(indices))

    def _parent_indices(self, indices: Indices) -> np.ndarray:
        epochs, within = np.divmod(np.asarray(indices, dtype=np.int64), len(self._positions))
        positions = self._positions
        if isinstance(positions, builtins.range):
            picked = positions.start + positions.step * within
        else:
            picked = positions[within]
        return picked + epochs * len(self._parent)

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, int(self._parent_indices([index])[0])

    def _data_identity(self) -> str:
        """The positions picked, as a checkpoint's fingerprint records them."""
        positions = self._positions
        if isinstance(positions, builtins.range):
            return f"positions {positions.start}::{positions.step}"
        return f"{len(positions)} positions, sha256 {digest(positions.astype('<i8').tobytes())}"

    def _describe(self) -> str:
        return f"{self._parent!r}, {self._desc}"
