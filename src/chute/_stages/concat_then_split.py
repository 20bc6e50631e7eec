"""``ConcatThenSplitIterDataset``: ragged sequences packed into fixed lengths.

Parent elements are flat dicts of arrays whose first axis is the sequence
axis.  Elements are buffered in order until one feature holds more tokens
than its target length; then everything buffered goes into one output, the
last element cut per feature at the room left, and its tail (positions
restarting at 0) starts the next buffer.  Each output feature is zero-padded
to its target length, takes the dtype of its first element, and, unless it is
a meta feature, gets ``<feature>_segment_ids`` (1, 2, ... per element, empty
ones included; 0 on padding) and ``<feature>_positions`` (both int32).

Meta features are never cut: an element whose meta feature does not fit
waits for the next output, and both parts of a cut element carry them.  A
scalar counts as one token that every part of a cut element carries too.  An
element cut to no tokens at all waits whole.  With
``split_full_length_features=False``, elements that fill a feature exactly
(and overflow none) skip the buffer and come out alone after the next packed
output.  At the end of the parent, the rest of the buffer comes out padded,
then the elements still waiting to come out alone.

Outputs match Grain 0.2.18's wherever Grain produces them, except one bug:

* Grain repeats or drops tokens (and may never stop) when an element with
  several features to cut is cut a second time; chute emits every token once.

Where Grain raises, chute goes on: a BOS for an empty segment with no slot
left is dropped (Grain: ``IndexError``; with a slot left both write it there,
even into padding), and a scalar with no room left skips that part.  Arguments
that Grain ignores or accepts silently (a meta or BOS feature missing from
``length_struct``, a non-int ``bos_token_id``, BOS handling without
``bos_features``, lengths below 1) raise ``ValueError``/``TypeError`` at once.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.validate import check_int, check_positive_int, grain_first
from chute._stages._concat_iter import ConcatThenSplitIterator
from chute._stages._concat_pack import STAGE, PackConfig


class BOSHandling(enum.Enum):
    """What packing does with beginning-of-sequence tokens.

    ``REPLACE_FIRST_TOKEN_WITH_BOS`` overwrites the first token of every
    packed segment (a whole element, or a part of a cut one) in the
    ``bos_features`` with ``bos_token_id``.

    >>> BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS.value
    2
    """

    DO_NOTHING = 1
    REPLACE_FIRST_TOKEN_WITH_BOS = 2


def _names(value: Any, what: str) -> frozenset[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise TypeError(
            f"{STAGE}: {what} must be a collection of feature names such as ['tokens'] "
            f"(got {value!r} that is a {type(value).__name__})."
        )
    for name in value:
        if not isinstance(name, str):
            raise TypeError(f"{STAGE}: {what} must hold feature names (str), got {name!r}.")
    return frozenset(value)


def _lengths(length_struct: Any) -> dict[str, int]:
    if not isinstance(length_struct, Mapping) or not length_struct:
        raise TypeError(
            f"{STAGE}: length_struct must be a non-empty dict from feature name to target "
            f"length, e.g. {{'tokens': 1024}} (got {length_struct!r})."
        )
    lengths = {}
    for name, length in length_struct.items():
        if not isinstance(name, str):
            raise TypeError(f"{STAGE}: length_struct keys must be str, got {name!r}.")
        lengths[name] = check_positive_int(length, f"{STAGE}: length_struct[{name!r}]")
    derived = {f"{k}_{s}" for k in lengths for s in ("segment_ids", "positions")}
    if derived & set(lengths):
        raise ValueError(
            f"{STAGE}: length_struct has features {sorted(derived & set(lengths))} that would "
            "clash with the *_segment_ids/*_positions outputs. Rename them."
        )
    return lengths


def _unknown(names: frozenset[str], lengths: dict[str, int], what: str) -> None:
    missing = sorted(names - set(lengths))
    if missing:
        raise ValueError(
            f"{STAGE}: {what} {missing} are not in length_struct {lengths}; "
            "give them a target length or remove them."
        )


def _bos(
    handling: Any, features: Any, token_id: Any, lengths: dict[str, int], meta: Any
) -> tuple[frozenset[str], int | None]:
    if not isinstance(handling, BOSHandling):
        raise TypeError(f"{STAGE}: bos_handling must be a BOSHandling member (got {handling!r}).")
    names = _names(features, "bos_features")
    if token_id is not None:
        token_id = check_int(token_id, f"{STAGE}: bos_token_id")
    if handling is BOSHandling.DO_NOTHING:
        if names or token_id is not None:
            grains = (
                f"bos_handling={handling} indicates that BOS handling is not used. So "
                "bos_token_id and bos_features should not be set."
            )
            raise ValueError(
                grain_first(
                    grains,
                    f"{STAGE}: bos_features={sorted(names)} and bos_token_id={token_id!r} need "
                    "bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS; with DO_NOTHING "
                    "leave both unset.",
                )
            )
        return frozenset(), None
    if token_id is None or not names:
        advice = (
            f"{STAGE}: bos_handling={handling} needs both bos_token_id and bos_features "
            f"(got bos_token_id={token_id!r}, bos_features={sorted(names)})."
        )
        grains = f"bos_token_id must be set if bos_handling is {handling}."
        raise ValueError(advice if token_id is not None else grain_first(grains, advice))
    _unknown(names, lengths, "bos_features")
    overlap = names & _names(meta, "meta_features")
    if overlap:
        grains = (
            "bos_features and meta_features should not overlap. bos_features: "
            f"{features}, meta_features: {meta}"
        )
        raise ValueError(
            grain_first(
                grains,
                f"{STAGE}: bos_features and meta_features overlap on {sorted(overlap)}; "
                "meta features are never split, so they take no BOS token.",
            )
        )
    return names, token_id


class ConcatThenSplitIterDataset(IterDataset[dict[str, Any]]):
    """Packs ragged sequence features into elements of fixed lengths.

    See the module docstring for the rules.

    Args:
      parent: an IterDataset of flat dicts of arrays, with exactly the
        features of ``length_struct``.
      length_struct: target length of every feature, e.g. ``{"tokens": 1024}``.
      meta_features: features that are never cut (repeated instead) and get
        no segment ids or positions.
      split_full_length_features: whether elements that already fill a
        feature exactly are packed (and cut) like the others.
      bos_handling: what to do with beginning-of-sequence tokens.
      bos_features: the features ``bos_handling`` applies to.
      bos_token_id: the BOS token.

    >>> import numpy as np
    >>> from chute import MapDataset
    >>> docs = MapDataset.source([{"tokens": np.arange(1, n + 1)} for n in (3, 4, 2)])
    >>> ds = ConcatThenSplitIterDataset(docs.to_iter_dataset(), length_struct={"tokens": 5})
    >>> packed = list(ds)
    >>> [p["tokens"].tolist() for p in packed]
    [[1, 2, 3, 1, 2], [3, 4, 1, 2, 0]]
    >>> [p["tokens_segment_ids"].tolist() for p in packed]
    [[1, 1, 1, 2, 2], [1, 1, 2, 2, 0]]
    >>> [p["tokens_positions"].tolist() for p in packed]
    [[0, 1, 2, 0, 1], [0, 1, 0, 1, 0]]
    """

    def __init__(
        self,
        parent: IterDataset[Any],
        *,
        length_struct: Mapping[str, int],
        meta_features: Collection[str] = (),
        split_full_length_features: bool = True,
        bos_handling: BOSHandling = BOSHandling.DO_NOTHING,
        bos_features: Collection[str] = (),
        bos_token_id: int | None = None,
    ) -> None:
        super().__init__(parent)
        if not isinstance(parent, IterDataset):
            raise TypeError(
                f"{STAGE} takes an IterDataset (got a {type(parent).__name__}); "
                "call .to_iter_dataset() first."
            )
        lengths = _lengths(length_struct)
        meta = _names(meta_features, "meta_features")
        _unknown(meta, lengths, "meta_features")
        if not isinstance(split_full_length_features, (bool, np.bool_)):
            raise TypeError(
                f"{STAGE}: split_full_length_features must be a bool "
                f"(got {split_full_length_features!r})."
            )
        bos, token = _bos(bos_handling, bos_features, bos_token_id, lengths, meta_features)
        self._cfg = PackConfig(lengths, meta, bool(split_full_length_features), bos, token)

    def __iter__(self) -> DatasetIterator[dict[str, Any]]:
        return ConcatThenSplitIterator(iter(self._parent), self._cfg)

    def _describe(self) -> str:
        cfg = self._cfg
        return (
            f"{self._parent!r}, length_struct={cfg.lengths}, meta_features={sorted(cfg.meta)}, "
            f"split_full_length_features={cfg.split_full_length}, "
            f"bos_features={sorted(cfg.bos_features)}, bos_token_id={cfg.bos_token_id}"
        )
