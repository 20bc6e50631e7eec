"""``mix``, ``concatenate`` and ``select_from_datasets``: many datasets into one.

The mixing order is Grain's.  Weights become integer proportions: each weight
times ``100 / min(weights)``, truncated.  With ``T`` their sum, element ``i``
of the mix is element ``ceil(i * P0 / T)`` of dataset 0 when that count grows
at ``i + 1``; otherwise ``i - ceil(i * P0 / T)`` is looked up in the mix of the
remaining datasets (proportions ``P1..``) in the same way.  The pattern repeats
every ``T`` elements and carries on past ``len`` into the parents' later
epochs.  A MapDataset mix has ``min(int(len_k / (P_k / T)))`` elements; an
IterDataset mix (``chute._stages.mix_iter``) stops when the dataset whose
turn it is has run out.
"""

from __future__ import annotations

import abc
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chute._core import errors
from chute._core.dataset import Indices, MapDataset
from chute._core.indexing import numpy_index_type

_SCALE = 100  # the smallest weight becomes this integer proportion, as in Grain


class DatasetSelectionMap(abc.ABC):
    """Maps index ``i`` to ``(dataset index, index within that dataset)``.

    Subclass it for ``MapDataset.select_from_datasets``; it must be stateless
    and deterministic.  Indices past ``len`` (later epochs) are passed as is.

    >>> class Alternate(DatasetSelectionMap):
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, index):
    ...         return index % 2, index // 2
    >>> pair = [MapDataset.range(2), MapDataset.range(5, 7)]
    >>> list(MapDataset.select_from_datasets(pair, Alternate()))
    [0, 5, 1, 6]
    """

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of elements the selection yields in one epoch."""

    @abc.abstractmethod
    def __getitem__(self, index: int) -> tuple[int, int]:
        """The dataset index and the index in that dataset of element ``index``."""


def _check_parents(
    datasets: Any, kinds: tuple[type, ...], where: str, *, allow_empty: bool = False
) -> tuple[Any, ...]:
    if isinstance(datasets, (str, bytes, Mapping)) or not isinstance(datasets, Sequence):
        raise TypeError(
            f"{where} takes a list of datasets (got {type(datasets).__name__}); "
            "pass them as a list, e.g. [ds1, ds2]."
        )
    if not datasets and not allow_empty:
        raise ValueError(f"{where} needs at least one dataset (got an empty list).")
    for k, ds in enumerate(datasets):
        if not isinstance(ds, kinds):
            names = " or ".join(kind.__name__ for kind in kinds)
            raise TypeError(f"{where}: datasets[{k}] must be a {names} (got {type(ds).__name__}).")
    return tuple(datasets)


def _check_weights(weights: Any, n: int, where: str) -> list[float]:
    """Weights as floats: ``n`` finite, positive numbers (all 1 when None)."""
    if weights is None:
        return [1.0] * n
    if isinstance(weights, (str, bytes, Mapping)) or not isinstance(
        weights, (Sequence, np.ndarray)
    ):
        raise TypeError(
            f"{where}: weights must be a list of numbers (got {type(weights).__name__})."
        )
    if len(weights) != n:
        raise ValueError(
            f"{where}: got {len(weights)} weights for {n} datasets; give one weight per dataset."
        )
    out = []
    for k, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where}: weights[{k}] must be a number (got {w!r}).")
        if not (math.isfinite(w) and w > 0):
            raise ValueError(
                ("Must specify all non-zero proportions for mixing. chute: " if w == 0 else "")
                + f"{where}: weights must be finite and > 0 (weights[{k}] is {w!r})"
                + ("; leave a dataset out instead of giving it weight 0." if w == 0 else ".")
            )
        out.append(float(w))
    return out


def _proportions(weights: list[float], where: str) -> tuple[int, ...]:
    """Integer proportions: the smallest weight becomes 100, others scale (truncated)."""
    scale = _SCALE / min(weights)
    props = tuple(int(w * scale) for w in weights) if math.isfinite(max(weights) * scale) else ()
    if not props or sum(props) >= 2**62:
        raise ValueError(f"{where}: the weights {weights} span too wide a range to mix.")
    return props


def _select(props: Sequence[int], indices: Indices) -> tuple[np.ndarray, np.ndarray]:
    """Dataset index and index in that dataset for each mix index (see module doc)."""
    idx = np.asarray(indices, dtype=np.int64)
    total = sum(props)
    periods, rem = np.divmod(idx, total)
    if total * max(props) >= 2**62:  # products would overflow int64: use Python ints
        rem = rem.astype(object)
    ids = np.full(idx.shape, len(props) - 1, dtype=np.int64)
    local = rem.copy()
    undecided = np.ones(idx.shape, dtype=bool)
    left = total  # sum of the proportions not yet passed
    for k, p in enumerate(props[:-1]):
        taken = -((-rem * p) // left)  # ceil(rem * p / left)
        hit = undecided & (-((-(rem + 1) * p) // left) > taken)
        ids[hit], local[hit] = k, taken[hit]
        undecided &= ~hit
        rem = rem - taken
        left -= p
    local[undecided] = rem[undecided]
    return ids, local.astype(np.int64) + periods * np.asarray(props, dtype=np.int64)[ids]


def _gather(parents: Sequence[MapDataset[Any]], ids: np.ndarray, local: np.ndarray) -> list[Any]:
    """Reads ``parents[ids[j]][local[j]]`` for all j, one batched read per parent."""
    out: list[Any] = [None] * len(ids)
    for k in np.unique(ids).tolist():
        where = np.flatnonzero(ids == k)
        for pos, item in zip(where.tolist(), parents[k]._getitems(local[where])):
            out[pos] = item
    return out


class MixedMapDataset(MapDataset[Any]):
    """Interleaves datasets in proportion to their weights, in Grain's order.

    >>> ds = MapDataset.mix([MapDataset.range(5), MapDataset.range(10, 15)], [2, 1])
    >>> len(ds), list(ds)
    (7, [0, 1, 10, 2, 3, 11, 4])
    """

    def __init__(self, datasets: Sequence[MapDataset[Any]], weights: Any = None) -> None:
        where = "MapDataset.mix()"
        parents = _check_parents(datasets, (MapDataset,), where)
        super().__init__(parents)
        lengths = [len(ds) for ds in parents]
        if 0 in lengths:
            raise ValueError(_empty_message(parents, lengths, where))
        self._props = _proportions(_check_weights(weights, len(parents), where), where)
        total = sum(self._props)
        self._length = min(
            sys.maxsize, *(int(n / (p / total)) for n, p in zip(lengths, self._props))
        )

    def __len__(self) -> int:
        return self._length

    def _getitems(self, indices: Indices) -> list[Any]:
        return _gather(self._parents, *_select(self._props, indices))

    def _parent_index(self, index: int) -> tuple[int, int]:
        ids, local = _select(self._props, [index])
        return int(ids[0]), int(local[0])

    def _describe(self) -> str:  # Grain's repr
        lengths = [len(p) for p in self._parents]
        return (
            f"parent_lengths={lengths}, selection_map=SelectionWithProportionsMap("
            f"proportions={self._props}, length={self._length})"
        )


def _empty_message(parents: Sequence[MapDataset[Any]], lengths: list[int], where: str) -> str:
    """Grain's sentence naming every empty dataset, then chute's advice."""
    empty = [f"index {k} ({parents[k]})" for k, n in enumerate(lengths) if n == 0]
    return (
        "All datasets must have positive length for mixing, but dataset(s) at "
        f"{', '.join(empty)} have length 0. chute: {where}: datasets[{lengths.index(0)}] is "
        "empty; cannot mix it (leave it out of the list)."
    )


class ConcatenateMapDataset(MapDataset[Any]):
    """The datasets one after another; epoch ``e`` reads each parent's epoch ``e``.

    >>> list(MapDataset.concatenate([MapDataset.range(3), MapDataset.range(10, 12)]))
    [0, 1, 2, 10, 11]
    """

    def __init__(self, datasets: Sequence[MapDataset[Any]]) -> None:
        where = "MapDataset.concatenate()"
        super().__init__(_check_parents(datasets, (MapDataset,), where, allow_empty=True))
        lengths = [len(ds) for ds in self._parents]
        if sys.maxsize in lengths:
            k = lengths.index(sys.maxsize)
            raise ValueError(
                f"Cannot concatenate infinite datasets. {self._parents[k]} is infinite. chute: "
                f"{where}: datasets[{k}] is infinite; only finite datasets can be concatenated "
                "(repeat after concatenating)."
            )
        self._lengths = np.asarray(lengths, dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self._lengths)]).astype(np.int64)
        self._length = int(self._starts[-1])

    def __len__(self) -> int:
        return self._length

    def _getitems(self, indices: Indices) -> list[Any]:
        idx = np.asarray(indices, dtype=np.int64)
        if self._length == 0:
            if idx.size:
                raise IndexError("cannot read from an empty concatenation.")
            return []
        return _gather(self._parents, *self._parent_indices(idx))

    def _parent_indices(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        epochs, within = np.divmod(idx, self._length)
        ids = np.searchsorted(self._starts, within, side="right") - 1
        return ids, within - self._starts[ids] + epochs * self._lengths[ids]

    def _parent_index(self, index: int) -> tuple[int, int]:
        ids, local = self._parent_indices(np.asarray([index], dtype=np.int64))
        return int(ids[0]), int(local[0])


class SelectionMapDataset(MapDataset[Any]):
    """Element ``i`` is ``datasets[k][j]`` where ``(k, j) = selection_map[i]``.

    >>> ds = MapDataset.select_from_datasets(
    ...     [MapDataset.range(3), MapDataset.range(10, 13)], [(1, 0), (0, 2), (1, 1)])
    >>> list(ds)
    [10, 2, 11]
    """

    def __init__(self, datasets: Sequence[MapDataset[Any]], selection_map: Any) -> None:
        where = "MapDataset.select_from_datasets()"
        super().__init__(_check_parents(datasets, (MapDataset,), where))
        if not (hasattr(selection_map, "__len__") and hasattr(selection_map, "__getitem__")):
            raise TypeError(
                f"{where}: selection_map must have __len__ and __getitem__, like a "
                f"chute DatasetSelectionMap (got {type(selection_map).__name__})."
            )
        self._map = selection_map

    def __len__(self) -> int:
        return len(self._map)

    def _getitems(self, indices: Indices) -> list[Any]:
        pairs = []
        kind = numpy_index_type() or int  # the map gets the index's type, as in Grain
        for i in np.asarray(indices, dtype=np.int64).tolist():
            try:
                pairs.append(self._map[kind(i)])
            except Exception as exc:
                errors.annotate(exc, f"select_from_datasets({type(self._map).__name__})", i)
                raise
        try:
            table = np.asarray(pairs, dtype=np.int64).reshape(len(pairs), 2)
        except (TypeError, ValueError, OverflowError):
            raise TypeError(
                "select_from_datasets(): selection_map[i] must return a pair of ints "
                f"(dataset index, index in dataset); got {pairs[:3]!r}..."
            ) from None
        # An index in a dataset may be any int (negative: an earlier epoch), as in Grain.
        bad = (table[:, 0] < 0) | (table[:, 0] >= len(self._parents))
        if bad.any():
            raise IndexError(
                f"select_from_datasets(): selection_map gave {tuple(table[bad][0].tolist())}, "
                f"but there are {len(self._parents)} datasets: the first of the pair must be "
                f"in [0, {len(self._parents)})."
            )
        return _gather(self._parents, table[:, 0], table[:, 1])

    def _parent_index(self, index: int) -> tuple[int, int]:
        k, j = self._map[index]
        return int(k), int(j)
