"""``FirstFitPackIterDataset`` and ``BestFitPackIterDataset``: sequence packing.

Elements are dicts of variable-length arrays.  Each feature named in
``length_struct`` is packed into bins of that length; the outputs are the
bins, each a dict with the packed features, ``<feature>_segment_ids`` (1, 2,
... for the sequences of the bin, 0 for padding) and ``<feature>_positions``
(the index of each token within its sequence).  As in Grain:

* bins are filled round by round (see ``packing.py``); a round ends when an
  element fits no bin, or at the end of the data, and then all its used bins
  are handed out, shuffled with ``numpy.random.default_rng(seed + b)`` where
  ``b`` counts the bins handed out before the round;
* with ``shuffle_bins_group_by_feature``, a round's bins are ordered by the
  mean of the distinct nonzero values of that output feature (0 when none),
  and shuffled within equal means;
* ``meta_features`` named in ``length_struct`` are packed without segment ids
  and positions; the others become, per bin, the list of their values;
* a meta feature may be a dict of arrays (``length_struct={"row": 12,
  "meta": {"lang": 12}}``): each array is packed, and counts for the fit, as a
  feature of its own; a nested feature not in ``meta_features`` raises Grain's
  ``ValueError`` ("Perhaps it should be marked as a meta feature?") when the
  dataset is iterated;
* keys of the element named nowhere are dropped; each bin array takes the
  dtype of its first sequence; a sequence longer than its bin is an error.

Unlike Grain, bad arguments fail when the stage is built, bad elements raise
a ``ValueError``/``TypeError`` naming the stage and the element index, and a
bin never takes more than ``max_sequences_per_bin`` sequences (Grain's best
fit lets empty sequences into a bin that is already full).  Alignment and
padding structs may name only some features (the others: 1 and 0), and a
restore loses nothing.  The keys come in ``length_struct`` order, then the
listed meta features, then the ids, as Grain gives them when JAX is not
installed (with JAX, Grain sorts them; the dicts are equal either way).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.validate import check_int
from chute._stages.packing import Packer, as_sequence, check_max_per_bin
from chute._stages.packing_iter import PackIterator

Path = tuple[str, ...]  # a feature's keys, from the element down to its array


def _name(path: Path) -> str:
    """A feature's name in messages: ``'row'``, or ``nested['inner']`` for a nested one."""
    return path[0] + "".join(f"[{k!r}]" for k in path[1:])


def _keys(path: Path) -> str:
    """``path`` as subscripts: ``['nested']['inner']``."""
    return "".join(f"[{key!r}]" for key in path)


def _flatten(struct: Any, what: str, path: Path = ()) -> dict[Path, Any]:
    """The leaves of a dict of dicts, by path, in order (str keys at every level)."""
    leaves: dict[Path, Any] = {}
    for key, value in struct.items():
        if not isinstance(key, str):
            raise TypeError(f"{what} keys must be str (got {key!r}).")
        inner = (*path, key)
        if isinstance(value, Mapping):
            if not value:
                raise ValueError(f"{what}{_keys(inner)} is an empty dict.")
            leaves.update(_flatten(value, what, inner))
        else:
            leaves[inner] = value
    return leaves


def _check_struct(struct: Any, what: str, paths: Sequence[Path], check: Any) -> dict[Path, Any]:
    """Per feature path, the value ``struct`` gives it (a value may stand for a whole dict)."""
    if struct is None:
        return {}
    if not isinstance(struct, Mapping):
        raise TypeError(f"{what} must be a dict from feature name to value (got {struct!r}).")
    given = _flatten(struct, what)
    unknown = [_name(k) for k in given if not any(p[: len(k)] == k for p in paths)]
    if unknown:
        raise ValueError(
            f"{what} names {unknown}, which length_struct does not; its keys must be among "
            f"{[_name(p) for p in paths]}."
        )
    checked = {k: check(v, f"{what}{_keys(k)}") for k, v in given.items()}
    return {p: checked[p[:n]] for p in paths for n in range(len(p), 0, -1) if p[:n] in checked}


def _check_pad(value: Any, what: str) -> Any:
    if not isinstance(value, (int, float, bool, np.generic, str, bytes)):
        raise TypeError(f"{what} must be a scalar padding value (got {value!r}).")
    return value


def _check_lengths(length_struct: Any, where: str) -> dict[Path, int]:
    """The bin length of each feature, by path (a nested dict gives several features)."""
    if not isinstance(length_struct, Mapping) or not length_struct:
        raise TypeError(
            f"{where}: length_struct must be a non-empty dict from feature name to bin length, "
            f"e.g. {{'inputs': 2048}} (got {length_struct!r})."
        )
    return {
        path: check_int(v, f"{where}: length_struct{_keys(path)}", minimum=0)
        for path, v in _flatten(length_struct, f"{where}: length_struct").items()
    }


def _check_names(names: Any, what: str) -> tuple[str, ...]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"{what} must be a list of feature names (got {names!r}).")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} must hold str feature names (got {name!r}).")
    return tuple(names)


class _DictLayout:
    """Reads dict elements and writes the bins as dicts, in Grain's key order.

    A feature may sit in a nested dict (``length_struct={"meta": {"lang": 8}}``):
    its path names it.  As in Grain, only a meta feature may be nested (it gets
    no segment ids and positions), and keys of the element that
    ``length_struct`` does not name are dropped, at any level.
    """

    def __init__(self, name: str, lengths: dict[Path, int], meta: tuple[str, ...]) -> None:
        self.name = name
        self.paths = tuple(lengths)
        self.features = tuple(_name(p) for p in self.paths)
        self.lengths = tuple(lengths.values())
        self.ids = tuple(p[0] not in meta for p in self.paths)
        self.tops = tuple(dict.fromkeys(p[0] for p in self.paths))  # the element's keys
        self.meta = tuple(m for m in meta if m not in self.tops)
        self._flat = all(len(p) == 1 for p in self.paths)
        self.pads: tuple[Any, ...] = (0,) * len(self.paths)
        self.seed: int | None = None
        self.group: str | None = None
        self.grain_packer = "PackedBatch"  # Grain's name in its message: see _too_long

    def unmarked_nested(self) -> list[str]:
        """The nested features not in ``meta_features``: they cannot get segment ids."""
        nested = (p[0] for p, ids in zip(self.paths, self.ids) if ids and len(p) > 1)
        return list(dict.fromkeys(nested))

    def parse(self, element: Any, index: int) -> tuple[list[Any], list[int], tuple[Any, ...]]:
        try:
            if self._flat:
                arrays = [element[f] for f in self.tops]
            else:
                arrays = [_at(element, p) for p in self.paths]
            meta = tuple([element[m] for m in self.meta]) if self.meta else ()
        except Exception:
            raise self._bad_element(element, index) from None
        sizes = []
        lengths = self.lengths
        for k, a in enumerate(arrays):
            if type(a) is not np.ndarray or not a.ndim:
                try:
                    a = arrays[k] = as_sequence(a)
                except TypeError as exc:
                    raise TypeError(
                        f"{self.name}: element {index}, feature {self.features[k]!r}: {exc}"
                    ) from None
            sizes.append(a.shape[0])
        if any(n > length for n, length in zip(sizes, lengths)):
            raise self._too_long(index, sizes)
        return arrays, sizes, meta

    def _too_long(self, index: int, sizes: list[int]) -> ValueError:
        """Grain's sentence for sequences longer than their bins, then chute's advice."""
        over = [k for k, (n, length) in enumerate(zip(sizes, self.lengths)) if n > length]
        details = [(self.paths[k], sizes[k], self.lengths[k]) for k in over]
        k = over[0]
        feature, length, path = self.features[k], self.lengths[k], self.paths[k]
        if len(path) == 1:
            fix = f"ds.map(lambda x: {{**x, {feature!r}: x[{feature!r}][:{length}]}})"
        else:
            at = _keys(path)
            fix = f"a map that sets x{at} to x{at}[:{length}]"
        return ValueError(
            f"Inputs to {self.grain_packer} must be truncated to max length. Exceeds: "
            f"(feature_path, feature_length, max_length) = {details} chute: {self.name}: "
            f"element {index} has feature {feature!r} of length {sizes[k]}, longer than its "
            f"bins ({length}). Truncate it first, e.g. {fix}."
        )

    def _bad_element(self, element: Any, index: int) -> Exception:
        wanted = [*self.features, *self.meta]
        if not isinstance(element, Mapping):
            return TypeError(
                f"{self.name}: element {index} is a {type(element).__name__}; packing takes "
                f"dicts with the features {wanted}."
            )
        missing = [_name(p) for p in self.paths if not _has(element, p)]
        missing += [m for m in self.meta if m not in element]
        return ValueError(
            f"{self.name}: element {index} lacks the features {missing} (it has "
            f"{list(element)}). Every element needs each feature of length_struct and "
            "meta_features."
        )

    def outputs(self, packer: Packer, bins_before: int) -> list[dict[str, Any]]:
        built = packer.build(self.pads, self.ids)
        keys: list[str] = []
        columns: list[Any] = []
        if self._flat:
            keys += self.tops
            columns += [list(values) for values in built.values]
        else:  # each nested feature's bins become dicts
            keys += self.tops
            columns += [_nested(built, self.paths, top) for top in self.tops]
        for m, name in enumerate(self.meta):
            keys.append(name)
            columns.append(built.meta[m])
        for f, path in enumerate(self.paths):
            if self.ids[f]:
                keys += [f"{path[0]}_segment_ids", f"{path[0]}_positions"]
                columns += [list(built.segment_ids[f]), list(built.positions[f])]  # type: ignore[arg-type]
        outs = [dict(zip(keys, row)) for row in zip(*columns)]
        if self.seed is None:
            return outs
        perm = np.random.default_rng(self.seed + bins_before).permutation(len(outs))
        if self.group is None:
            return [outs[i] for i in perm]
        try:
            means = np.array([_mean_of_nonzero(o[self.group]) for o in outs], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{self.name}: cannot order bins by shuffle_bins_group_by_feature="
                f"{self.group!r}: the mean of its values is undefined ({exc})."
            ) from exc
        return [outs[i] for i in np.lexsort((perm, means))]


def _at(element: Any, path: Path) -> Any:
    for key in path:
        element = element[key]
    return element


def _has(element: Any, path: Path) -> bool:
    try:
        _at(element, path)
    except Exception:
        return False
    return True


def _nested(built: Any, paths: Sequence[Path], top: str) -> list[Any]:
    """Feature ``top``'s value in each bin: its array, or a dict of its nested features."""
    mine = [(f, p) for f, p in enumerate(paths) if p[0] == top]
    if len(mine) == 1 and len(mine[0][1]) == 1:
        return list(built.values[mine[0][0]])
    rows: list[dict[str, Any]] = [{} for _ in range(built.bins)]
    for f, path in mine:
        for row, value in zip(rows, built.values[f]):
            for key in path[1:-1]:
                row = row.setdefault(key, {})
            row[path[-1]] = value
    return rows


def _mean_of_nonzero(value: Any) -> float:
    """The mean of the distinct nonzero values (0 when none): Grain's group key."""
    distinct = np.unique(np.asarray(value))
    count = np.count_nonzero(distinct)
    return float(np.nan_to_num(np.sum(distinct) / count, nan=0.0)) if count else 0.0


class _PackIterDataset(IterDataset[Any]):
    _best_fit = False

    def __init__(
        self,
        parent: IterDataset[Any],
        *,
        length_struct: Any,
        num_packing_bins: int,
        seed: int = 0,
        shuffle_bins: bool = True,
        shuffle_bins_group_by_feature: str | None = None,
        meta_features: Sequence[str] = (),
        pack_alignment_struct: Any = None,
        padding_struct: Any = None,
        max_sequences_per_bin: int | None = None,
    ) -> None:
        super().__init__(parent)
        where = type(self).__name__
        if not isinstance(parent, IterDataset):
            raise TypeError(
                f"{where} takes an IterDataset (got {type(parent).__name__}); call "
                ".to_iter_dataset() on a MapDataset first."
            )
        self._bins = check_int(num_packing_bins, f"{where}: num_packing_bins", minimum=1)
        if not isinstance(shuffle_bins, (bool, np.bool_)):
            raise TypeError(f"{where}: shuffle_bins must be a bool (got {shuffle_bins!r}).")
        seed = check_int(seed, f"{where}: seed", minimum=0)
        layout = _DictLayout(
            where,
            _check_lengths(length_struct, where),
            _check_names(meta_features, f"{where}: meta_features"),
        )
        if self._best_fit:
            layout.grain_packer = "packer"
        self._aligns = self._check_structs(layout, pack_alignment_struct, padding_struct)
        self._max = check_max_per_bin(max_sequences_per_bin, where)
        if shuffle_bins:
            layout.seed = seed
            layout.group = self._check_group(shuffle_bins_group_by_feature, layout, where)
        self._layout = layout

    @staticmethod
    def _check_structs(layout: _DictLayout, aligns: Any, pads: Any) -> tuple[int, ...]:
        """The alignment of each feature; sets the layout's padding values."""
        where, paths = layout.name, layout.paths
        align = _check_struct(
            aligns,
            f"{where}: pack_alignment_struct",
            paths,
            lambda v, w: check_int(v, w, minimum=1),
        )
        pad = _check_struct(pads, f"{where}: padding_struct", paths, _check_pad)
        layout.pads = tuple(pad.get(p, 0) for p in paths)
        return tuple(align.get(p, 1) for p in paths)

    @staticmethod
    def _check_group(group: Any, layout: _DictLayout, where: str) -> str | None:
        if group is None:
            return None
        names = [*layout.tops, *layout.meta]
        names += [f"{p[0]}_{s}" for p, i in zip(layout.paths, layout.ids) if i for s in _IDS]
        if group not in names:
            raise ValueError(
                f"{where}: shuffle_bins_group_by_feature={group!r} is not a feature of the "
                f"packed outputs; pick one of {names} (a meta feature must be in meta_features)."
            )
        return str(group)

    def __iter__(self) -> DatasetIterator[Any]:
        layout = self._layout
        unmarked = layout.unmarked_nested()
        if unmarked:  # raised on iterating, as in Grain
            key = unmarked[0]
            raise ValueError(
                f"Failed to extract segment ids for '{key}', which has type <class 'dict'> "
                "rather than np.ndarray. Perhaps it should be marked as a meta feature? chute: "
                f"{layout.name}: length_struct[{key!r}] is a dict of features; only flat "
                "features get segment ids and positions, so add "
                f"{key!r} to meta_features (its arrays are then packed without them)."
            )
        packer = Packer(
            layout.lengths,
            self._bins,
            best_fit=self._best_fit,
            aligns=self._aligns,
            max_per_bin=self._max,
        )
        stage = "best_fit_pack" if self._best_fit else "first_fit_pack"
        return PackIterator(iter(self._parent), packer, layout, stage)

    def _describe(self) -> str:
        lengths: dict[str, Any] = {}
        for path, length in zip(self._layout.paths, self._layout.lengths):
            node = lengths
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = length
        return f"{self._parent!r}, length_struct={lengths}, num_packing_bins={self._bins}"


_IDS = ("segment_ids", "positions")


class FirstFitPackIterDataset(_PackIterDataset):
    """Packs each sequence into the first bin with room for it.

    Args:
        parent: The IterDataset of unpacked elements (dicts of 1-D token arrays).
        length_struct: The bin length of each packed feature, in the elements' structure.
        num_packing_bins: Bins a round fills; when an element fits none, the round's used
            bins are handed out (see the module docstring).
        seed: Seeds the shuffle of each round's bins.
        shuffle_bins: Shuffle each round's bins before handing them out.
        shuffle_bins_group_by_feature: Order a round's bins by the mean of this output
            feature's distinct nonzero values, shuffling only within equal means.
        meta_features: Features packed without segment ids and positions (when in
            ``length_struct``) or kept per bin as the list of their values.
        pack_alignment_struct: Per feature, pad each packed sequence to a multiple of this.
        padding_struct: Per feature, the value that pads the rest of a bin (0 by default).
        max_sequences_per_bin: The most sequences in one bin; None for no limit.

    >>> from chute import MapDataset
    >>> rows = [{"tokens": np.arange(1, n + 1)} for n in (3, 2, 4)]
    >>> ds = FirstFitPackIterDataset(
    ...     MapDataset.source(rows).to_iter_dataset(),
    ...     length_struct={"tokens": 5}, num_packing_bins=2, shuffle_bins=False)
    >>> [(x["tokens"].tolist(), x["tokens_segment_ids"].tolist()) for x in ds]
    [([1, 2, 3, 1, 2], [1, 1, 1, 2, 2]), ([1, 2, 3, 4, 0], [1, 1, 1, 1, 0])]
    """


class BestFitPackIterDataset(_PackIterDataset):
    """Packs each sequence into the bin it leaves with the least room.

    Args:
        parent: The IterDataset of unpacked elements (dicts of 1-D token arrays).
        length_struct: The bin length of each packed feature, in the elements' structure.
        num_packing_bins: Bins a round fills; when an element fits none, the round's used
            bins are handed out (see the module docstring).
        seed: Seeds the shuffle of each round's bins.
        shuffle_bins: Shuffle each round's bins before handing them out.
        shuffle_bins_group_by_feature: Order a round's bins by the mean of this output
            feature's distinct nonzero values, shuffling only within equal means.
        meta_features: Features packed without segment ids and positions (when in
            ``length_struct``) or kept per bin as the list of their values.
        pack_alignment_struct: Per feature, pad each packed sequence to a multiple of this.
        padding_struct: Per feature, the value that pads the rest of a bin (0 by default).
        max_sequences_per_bin: The most sequences in one bin; None for no limit.

    >>> from chute import MapDataset
    >>> rows = [{"tokens": np.arange(1, n + 1)} for n in (2, 4, 1)]
    >>> ds = BestFitPackIterDataset(
    ...     MapDataset.source(rows).to_iter_dataset(),
    ...     length_struct={"tokens": 5}, num_packing_bins=2, shuffle_bins=False)
    >>> [x["tokens"].tolist() for x in ds]
    [[1, 2, 0, 0, 0], [1, 2, 3, 4, 1]]
    """

    _best_fit = True
