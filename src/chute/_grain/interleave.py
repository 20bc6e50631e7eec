"""Interleave states crossing between Grain and chute.

Grain's interleave state names, per place of the cycle, the dataset it reads
and that dataset's state, with an ``exhausted`` flag; a place whose dataset
ended is refilled from ``next_index_in_datasets`` when the cycle next reaches
it.  chute's keeps the same positions, and marks such a place ``"waiting"``
(filled from ``next_dataset`` when reached), so the two map one to one.
Datasets' own states cross through the same translation as whole pipelines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chute._core.errors import CheckpointError
from chute._core.iterator import STATE_VERSION
from chute._grain.need import need

Translate = Callable[[Any, Any], Any]
_KEYS = ("next_index_in_cycle", "next_index_in_datasets", "iterators_in_use_indices",
         "iterators_in_use_states", "exhausted")  # fmt: skip


def interleave_from_grain(it: Any, g: Any, from_grain: Translate) -> dict[str, Any]:
    """chute's interleave state at the position of Grain's ``g``."""
    need(g, it, *_KEYS)
    indices, states, exhausted = (
        g["iterators_in_use_indices"], g["iterators_in_use_states"], g["exhausted"]
    )  # fmt: skip
    cycle = len(it._places)
    if not len(indices) == len(states) == len(exhausted) == cycle:
        raise CheckpointError(
            f"Grain's interleave state reads {len(indices)} datasets at once, this interleave "
            f"{cycle}: build it with the same cycle_length."
        )
    turn, next_dataset = int(g["next_index_in_cycle"]), int(g["next_index_in_datasets"])
    places: list[Any] = [None] * cycle
    for k in _visiting_order(turn, cycle):
        if exhausted[k] or states[k] is None:
            # Grain refills such a place when it reaches it; chute has it filled already.
            next_dataset = _next_open(it, next_dataset)
            if next_dataset < it._count:
                places[k], next_dataset = [next_dataset, None], next_dataset + 1
            continue
        dataset = it._dataset_iterator(int(indices[k]))
        try:
            places[k] = [int(indices[k]), from_grain(dataset, states[k])]
        finally:
            dataset.close()
    return {
        "version": STATE_VERSION,
        "stage": "interleave",
        "turn": turn,
        "next_dataset": next_dataset,
        "places": places,
    }


def interleave_to_grain(it: Any, state: dict[str, Any], to_grain: Translate) -> dict[str, Any]:
    """Grain's interleave state for chute's ``state`` of ``it``."""
    cycle, turn = len(state["places"]), int(state["turn"])
    next_dataset = int(state["next_dataset"])
    indices, states, exhausted = [0] * cycle, [None] * cycle, [1] * cycle
    for k in _visiting_order(turn, cycle):
        place = state["places"][k]
        if place is None:
            continue  # nothing left to read there: exhausted in Grain's terms
        if not isinstance(place, list):  # waiting: chute fills it when reached, Grain has it open
            next_dataset = _next_open(it, next_dataset)
            if next_dataset >= it._count:
                continue
            place, next_dataset = [next_dataset, None], next_dataset + 1
        index, inner = int(place[0]), place[1]
        dataset = it._dataset_iterator(index)
        try:
            states[k] = to_grain(dataset, dataset.get_state() if inner is None else inner)
        finally:
            dataset.close()
        indices[k], exhausted[k] = index, 0
    return {
        "next_index_in_cycle": turn,
        "next_index_in_datasets": next_dataset,
        "iterators_in_use_indices": indices,
        "iterators_in_use_states": states,
        "exhausted": exhausted,
        "future_states": {},
    }


def _visiting_order(turn: int, cycle: int) -> list[int]:
    return [(turn + k) % cycle for k in range(cycle)]


def _next_open(it: Any, index: int) -> int:
    """The first dataset from ``index`` on that is not a hole (``None``)."""
    datasets = it._opener._datasets
    while index < it._count and datasets[index] is None:
        index += 1
    return index
