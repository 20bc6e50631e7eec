"""The pure packing steps behind ``ConcatThenSplitIterDataset``.

An element is a flat dict of arrays whose first axis is the sequence axis.  A
``Piece`` is an element still (partly) waiting in the packing buffer: the
element's arrays and, per feature, how many leading tokens earlier outputs
already took.  ``plan`` decides which pieces (and how much of the last one)
make up the next output; ``build`` writes that output into fresh, padded
arrays with numpy slicing, one slice per piece and feature.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from chute._core.validate import grain_first

STAGE = "ConcatThenSplitIterDataset"


@dataclasses.dataclass(frozen=True)
class PackConfig:
    """The validated arguments of a ``ConcatThenSplitIterDataset``."""

    lengths: dict[str, int]  # target length per feature, in output order
    meta: frozenset[str]
    split_full_length: bool
    bos_features: frozenset[str]  # empty when BOS handling is off
    bos_token_id: int | None


@dataclasses.dataclass
class Piece:
    """One buffered element; ``start[k]`` tokens of feature ``k`` are already out.

    Features in ``fixed`` (meta features, and scalars) are never used up: every
    part of a cut element gets them whole, so their ``start`` stays 0.
    """

    index: int  # the element's position in the parent's stream
    arrays: dict[str, np.ndarray]
    fixed: frozenset[str]
    start: dict[str, int]

    def remaining(self, feature: str) -> int:
        return len(self.arrays[feature]) - self.start[feature]


def _shape(value: Any) -> Any:
    try:
        return np.shape(value)
    except ValueError:  # ragged nested lists
        return type(value).__name__


def _grain_spec(value: Any) -> str:
    """A value as Grain's messages show it: its type (a dtype for arrays), then its shape."""
    if isinstance(value, np.ndarray):
        kind = str(value.dtype)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, type(value[0])) for v in value):
        kind = f"{type(value).__name__}<{type(value[0]).__name__ if value else ''}>"
    else:
        kind = type(value).__name__
    shape = _shape(value)
    return kind + (str(list(shape)) if isinstance(shape, tuple) else "[unknown shape]")


def _shapes(element: Mapping[Any, Any]) -> dict[Any, Any]:
    return {key: _shape(value) for key, value in element.items()}


def to_piece(element: Any, cfg: PackConfig, index: int) -> Piece:
    """The element's features as arrays of at least one dimension, in output order.

    A scalar counts as one token that, as in Grain, every part of a cut element
    repeats (a per-element value such as a document id stays with each part).
    """
    where = f"{STAGE}: parent element {index}"
    if not isinstance(element, Mapping):
        raise ValueError(
            grain_first(
                f"Parent elements must be unnested dictionaries but got {_grain_spec(element)}.",
                f"{where} is a {type(element).__name__}; it must be a flat dict of arrays "
                f"with the features {list(cfg.lengths)}.",
            )
        )
    if set(element) != set(cfg.lengths):
        spec = {key: _grain_spec(value) for key, value in element.items()}
        grains = (
            f"Parent element has structure {spec} but target sequence length is "
            f"{dict(cfg.lengths)}. There must be a sequence length for each feature."
        )
        raise ValueError(
            grain_first(
                grains,
                f"{where} has the features (with shapes) {_shapes(element)} but length_struct "
                f"is {cfg.lengths}: every feature needs a target length and every target "
                "length needs a feature. Drop the other features with .map() first.",
            )
        )
    arrays, fixed = {}, set(cfg.meta)
    for key, length in cfg.lengths.items():
        value = np.asarray(element[key])
        if value.ndim == 0:
            value = value.reshape(1)
            fixed.add(key)
        if key in cfg.meta and len(value) > length:
            raise ValueError(
                f"{where}: meta feature {key!r} has {len(value)} entries, more than its "
                f"target length {length}; meta features are never split. Raise "
                f"length_struct[{key!r}] or shorten the feature."
            )
        arrays[key] = value
    return Piece(index, arrays, frozenset(fixed), dict.fromkeys(arrays, 0))


def check_packable(first: Piece, piece: Piece) -> None:
    """Raises unless ``piece`` can be packed after ``first`` (same trailing shapes)."""
    for key, value in piece.arrays.items():
        if value.shape[1:] != first.arrays[key].shape[1:]:
            raise ValueError(
                f"{STAGE}: feature {key!r} of parent element {piece.index} has shape "
                f"{value.shape}, but parent element {first.index}, packed before it, has "
                f"{first.arrays[key].shape}; all dimensions but the first must agree."
            )


def is_full_length(arrays: dict[str, np.ndarray], cfg: PackConfig) -> bool:
    """Whether an element is emitted on its own (``split_full_length_features=False``)."""
    lens = [(len(arrays[k]), n) for k, n in cfg.lengths.items()]
    return all(m <= n for m, n in lens) and any(m == n for m, n in lens)


def overflows(totals: dict[str, int], cfg: PackConfig) -> bool:
    return any(totals[k] > n for k, n in cfg.lengths.items())


def plan(pieces: list[Piece], cfg: PackConfig) -> dict[str, int] | None:
    """How much of the last piece joins an overflowing buffer's output.

    Every other piece goes out whole.  Returns the tokens taken per feature,
    or ``None`` when the last piece waits whole for the next output: one of
    its meta features does not fit, or no other feature has room left.
    """
    last = pieces[-1]
    room = dict(cfg.lengths)
    for piece in pieces[:-1]:
        for k in room:
            room[k] -= piece.remaining(k)
    if any(len(last.arrays[k]) > room[k] for k in cfg.meta):
        return None
    take = {k: min(last.remaining(k), room[k]) for k in cfg.lengths if k not in cfg.meta}
    if not any(take.values()):
        return None
    take.update((k, len(last.arrays[k])) for k in cfg.meta)
    return take


def build(pieces: list[Piece], takes: list[dict[str, int]], cfg: PackConfig) -> dict[str, Any]:
    """One padded output from ``takes[i][k]`` tokens of each piece's feature ``k``."""
    out: dict[str, Any] = {}
    for key, length in cfg.lengths.items():
        lens = np.array([t[key] for t in takes], dtype=np.int64)
        out[key] = _concat(pieces, lens, key, length)
        if key in cfg.meta:
            continue
        ends = np.cumsum(lens)
        starts, used = ends - lens, int(ends[-1])
        if key in cfg.bos_features:  # as in Grain, an empty segment marks the next slot
            out[key][starts[starts < length]] = cfg.bos_token_id
        segment_ids = np.zeros(length, np.int32)
        segment_ids[:used] = np.repeat(np.arange(1, len(lens) + 1, dtype=np.int32), lens)
        positions = np.zeros(length, np.int32)
        positions[:used] = np.arange(used) - np.repeat(starts, lens)
        out[f"{key}_segment_ids"], out[f"{key}_positions"] = segment_ids, positions
    return out


def _concat(pieces: list[Piece], lens: np.ndarray, key: str, length: int) -> np.ndarray:
    """The pieces' slices of ``key`` one after another, zero-padded to ``length``.

    The output takes the dtype and trailing shape of the first piece.
    """
    first = pieces[0].arrays[key]
    out = np.zeros((length, *first.shape[1:]), dtype=first.dtype)
    at = 0
    for piece, n in zip(pieces, lens.tolist()):
        start = piece.start[key]
        out[at : at + n] = piece.arrays[key][start : start + n]
        at += n
    return out
