"""Packing checkpoints cross between Grain and chute.

Grain's states and outputs are literals observed from Grain 0.2.18 for the
same pipelines (first fit and best fit, 2 bins a round, shuffled bins, seed 3).
"""

from __future__ import annotations

import numpy as np
import pytest

from chute import CheckpointError, MapDataset, experimental
from chute.checkpoint import to_grain_state

LENGTHS = (3, 2, 4, 5, 1, 3, 2, 4, 1, 1, 5)
ROWS = {
    "first": [[1, 2, 3, 4, 0], [1, 2, 3, 1, 2], [1, 1, 2, 3, 0], [1, 2, 3, 4, 5],
              [1, 2, 1, 1, 0], [1, 2, 3, 4, 0], [1, 2, 3, 4, 5]],
    "best": [[1, 2, 3, 4, 0], [1, 2, 3, 1, 2], [1, 1, 2, 3, 0], [1, 2, 3, 4, 5],
             [1, 2, 1, 0, 0], [1, 2, 3, 4, 1], [1, 2, 3, 4, 5]],
}  # fmt: skip
# Grain's state after each row (and before the first); the same for both kinds here.
STATES = [
    {"parent": {"next_index": start}, "next_row": row, "counter": counter}
    for start, row, counter in [
        (0, 0, 0),
        (0, 1, 1),
        (3, 0, 2),
        (3, 1, 3),
        (6, 0, 4),
        (6, 1, 5),
        (10, 0, 6),
        (11, 0, 7),
    ]
]


def _pipeline(kind: str) -> experimental.FirstFitPackIterDataset:
    rows = MapDataset.source([{"tokens": np.arange(1, n + 1)} for n in LENGTHS])
    cls = {
        "first": experimental.FirstFitPackIterDataset,
        "best": experimental.BestFitPackIterDataset,
    }
    return cls[kind](
        rows.to_iter_dataset(), length_struct={"tokens": 5}, num_packing_bins=2,
        shuffle_bins=True, seed=3,
    )  # fmt: skip


def _rows(it) -> list:  # type: ignore[no-untyped-def]
    return [x["tokens"].tolist() for x in it]


@pytest.mark.parametrize("kind", ["first", "best"])
def test_chute_packs_as_grain_does(kind: str) -> None:
    assert _rows(iter(_pipeline(kind))) == ROWS[kind]


@pytest.mark.parametrize("kind", ["first", "best"])
@pytest.mark.parametrize("taken", range(len(STATES)))
def test_a_grain_packing_state_resumes_with_grains_rows(kind: str, taken: int) -> None:
    it = iter(_pipeline(kind))
    it.set_state(STATES[taken])
    assert _rows(it) == ROWS[kind][taken:]


@pytest.mark.parametrize("kind", ["first", "best"])
@pytest.mark.parametrize("taken", range(len(STATES)))
def test_chute_writes_grains_packing_state(kind: str, taken: int) -> None:
    it = iter(_pipeline(kind))
    for _ in range(taken):
        next(it)
    assert to_grain_state(it) == STATES[taken]


def test_a_grain_state_past_the_rounds_rows_is_refused() -> None:
    it = iter(_pipeline("first"))
    with pytest.raises(CheckpointError, match="the data differs"):
        it.set_state({"parent": {"next_index": 10}, "next_row": 3, "counter": 9})


def test_writing_grains_state_leaves_the_iterator_where_it_was() -> None:
    it = iter(_pipeline("first"))
    taken = [next(it)["tokens"].tolist() for _ in range(3)]
    assert to_grain_state(it) == STATES[3]
    assert taken + _rows(it) == ROWS["first"]


def _fails_on_length_two(x: dict) -> dict:  # type: ignore[type-arg]
    if len(x["tokens"]) == 2:
        raise KeyError("bad element")
    return x


def test_a_round_with_a_failed_element_is_not_written_as_grains_state() -> None:
    rows = MapDataset.source([{"tokens": np.arange(1, n + 1)} for n in LENGTHS])
    ds = experimental.FirstFitPackIterDataset(
        rows.to_iter_dataset().map(_fails_on_length_two), length_struct={"tokens": 5},
        num_packing_bins=2, shuffle_bins=True, seed=3,
    )  # fmt: skip
    it = iter(ds)
    with pytest.raises(KeyError):
        next(it)  # element 1 of the first round
    with pytest.raises(CheckpointError, match="Grain's packing state cannot say so"):
        to_grain_state(it)  # Grain would read element 1 again into the round
    next(it), next(it)  # the round's two rows: the next round starts at element 3
    assert to_grain_state(it) == {"parent": {"next_index": 3}, "next_row": 0, "counter": 2}
