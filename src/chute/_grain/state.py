"""Checkpoints that cross between Grain and chute.

Grain's iterator states are nested dicts without chute's ``"version"`` and
``"stage"`` keys: ``{"next_index": 12}`` for ``to_iter_dataset()``, and
stages that hold no position of their own (``map``, ``filter``, ``batch``,
thread prefetch) hand on their parent's state unchanged.  ``from_grain``
walks a chute iterator's stages alongside such a state and builds the chute
state of the same position; ``to_grain`` goes the other way.  A position
Grain cannot express (a batch stopped after an error, workers re-dealt to
another count) raises ``CheckpointError`` rather than drift to other data.

Counters that only number elements in chute's error notes (a plain map's or
filter's index, a batch's count) are rebuilt where the position says them
and start at 0 otherwise; counters that choose data (``random_map``,
``map_with_index``, ``limit``) come from Grain's state.

>>> from chute import MapDataset
>>> it = iter(MapDataset.range(10).to_iter_dataset().batch(2))
>>> it.set_state({"next_index": 4})  # as Grain's iterator saves it
>>> next(it).tolist(), to_grain(it, it.get_state())
([4, 5], {'next_index': 6})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chute._core.errors import CheckpointError
from chute._core.iterator import STATE_VERSION, DatasetIterator, looks_like_grain
from chute._grain.interleave import interleave_from_grain, interleave_to_grain
from chute._grain.need import need, short
from chute._grain.packing import pack_from_grain, pack_to_grain
from chute._grain.workers import mp_from_grain, mp_to_grain

__all__ = ["from_grain", "looks_like_grain", "to_grain"]

State = dict[str, Any]

# Stages that keep no position in Grain: its state is the parent's.
_PASS_THROUGH = ("filter", "thread_prefetch", "batch")
# Packing stages whose states have the same shape in Grain (see packing.py).
_PACKING = ("first_fit_pack", "best_fit_pack")


def _chute(it: DatasetIterator[Any], **fields: Any) -> State:
    return {"version": STATE_VERSION, "stage": it._stage_name(), **fields}


def _unsupported(it: DatasetIterator[Any], direction: str) -> CheckpointError:
    return CheckpointError(
        f"chute cannot translate a checkpoint {direction} for its "
        f"{it._stage_name()} stage (supported: to_iter_dataset, map, random_map, "
        "map_with_index, filter, batch, limit, thread prefetch, window shuffle, mix, "
        "mp_prefetch). Restore from a checkpoint saved by the same "
        "library, or restart the pipeline."
    )


def _map_kind(it: DatasetIterator[Any]) -> str:
    label = it._label
    if label.startswith("random_map("):
        return "index_for_rng"
    if label.startswith("map_with_index("):
        return "counter"
    return ""


def _produced(state: State) -> int:
    """Elements a chute stage state says were produced, where it says it; else 0."""
    if state.get("stage") == "to_iter_dataset":
        return int(state["next_index"])
    if state.get("stage") == "map":
        return int(state["index"])
    return 0


# -- Grain -> chute -------------------------------------------------------------------


def from_grain(it: DatasetIterator[Any], g: Any) -> State:
    """The chute state of ``it`` at the position of Grain's state ``g``.

    Args:
        it: An iterator of the pipeline Grain ran, built by chute.
        g: The dict Grain's iterator returned from ``get_state()``.

    Raises:
        CheckpointError: ``g`` does not fit the pipeline, or a stage has no translation.
    """
    handler = _FROM.get(it._stage_name())
    if handler is None:
        raise _unsupported(it, "from Grain")
    return handler(it, g)


def _from_source(it: DatasetIterator[Any], g: Any) -> State:
    next_index = need(g, it, "next_index")["next_index"]
    if not isinstance(next_index, int) or next_index < 0:
        raise CheckpointError(f"Grain state {short(g)}: next_index must be an int >= 0.")
    return _chute(it, next_index=next_index)


def _from_map(it: DatasetIterator[Any], g: Any) -> State:
    key = _map_kind(it)
    if not key:
        parent = from_grain(it._parent, g)
        return _chute(it, parent=parent, index=_produced(parent))
    g = need(g, it, "parent", key)
    return _chute(it, parent=from_grain(it._parent, g["parent"]), index=int(g[key]))


def _from_pass_through(it: DatasetIterator[Any], g: Any) -> State:
    parent = from_grain(it._parent, g)
    stage = it._stage_name()
    if stage == "filter":
        return _chute(it, parent=parent, index=_produced(parent), dropped=0)
    if stage == "batch":
        batches = _produced(parent) // max(1, int(getattr(it, "_size", 1)))
        return _chute(it, batches=batches, parent=parent, pulls=0, failed=[])
    return _chute(it, parent=parent)


def _from_limit(it: DatasetIterator[Any], g: Any) -> State:
    g = need(g, it, "parent", "count_elements_read")
    parent = from_grain(it._parent, g["parent"])
    return _chute(it, parent=parent, read=int(g["count_elements_read"]))


def _from_mix(it: DatasetIterator[Any], g: Any) -> State:
    g = need(g, it, "parents", "index", "stop")
    if not isinstance(g["parents"], list) or len(g["parents"]) != len(it._parents):
        raise CheckpointError(
            f"Grain's mix state holds {len(g['parents'])} dataset states but this mix "
            f"reads {len(it._parents)} datasets; build the mix Grain ran."
        )
    parents = [from_grain(p, s) for p, s in zip(it._parents, g["parents"])]
    return _chute(it, parents=parents, index=int(g["index"]), stop=bool(g["stop"]))


def _from_window_shuffle(it: Any, g: Any) -> State:
    """Grain numbers a window done before it moves on, so the window is read to tell."""
    g = need(g, it, "parent_window_start_state", "window_index", "pos_in_window")
    parent, size = it._parent, int(it._size)
    start = from_grain(parent, g["parent_window_start_state"])
    window, emitted = int(g["window_index"]), int(g["pos_in_window"])
    if not emitted:
        return _chute(it, window=window, emitted=0, parent=start, pulls=0, failed=[])
    parent.set_state(start)
    pulls = 0
    for _ in range(size):
        try:
            next(parent)
        except StopIteration:
            break
        pulls += 1
    if emitted >= pulls:  # that window is done: the next starts where it ended
        return _chute(it, window=window, emitted=0, parent=parent.get_state(), pulls=0, failed=[])
    return _chute(it, window=window, emitted=emitted, parent=start, pulls=pulls, failed=[])


# -- chute -> Grain -------------------------------------------------------------------


def to_grain(it: DatasetIterator[Any], state: State) -> Any:
    """Grain's state for the position of ``state``, a chute state of ``it``.

    Raises:
        CheckpointError: Grain has no state for this position, or a stage has no translation.
    """
    handler = _TO.get(it._stage_name())
    if handler is None:
        raise _unsupported(it, "to Grain")
    return handler(it, state)


def _to_map(it: DatasetIterator[Any], state: State) -> Any:
    parent = to_grain(it._parent, state["parent"])
    key = _map_kind(it)
    return {"parent": parent, key: int(state["index"])} if key else parent


def _to_pass_through(it: DatasetIterator[Any], state: State) -> Any:
    if state.get("pulls") or state.get("failed"):
        raise CheckpointError(
            f"the {it._stage_name()} stage stopped part way through an element (after an "
            "error in an earlier stage); Grain's checkpoints cannot say so. Save the "
            "Grain state after the next element."
        )
    return to_grain(it._parent, state["parent"])


def _to_window_shuffle(it: DatasetIterator[Any], state: State) -> Any:
    if state["failed"]:
        raise CheckpointError(
            "the window shuffle's window holds an element that failed; Grain's checkpoints "
            "cannot say so. Save the Grain state after the next window starts."
        )
    return {
        "parent_window_start_state": to_grain(it._parent, state["parent"]),
        "window_index": int(state["window"]),
        "pos_in_window": int(state["emitted"]),
    }


def _to_mix(it: DatasetIterator[Any], state: State) -> Any:
    if not isinstance(state["parents"], list):
        raise CheckpointError("Grain's mix reads its datasets by position, not by name.")
    extra = [key for key in ("weights", "exhausted", "credits") if state.get(key) is not None]
    if extra:  # chute's additions: set_mix_weights, on_exhausted="continue"
        raise CheckpointError(
            f"this mix's state holds {' and '.join(extra)} (weights set on the running mix, "
            "datasets that ran out under on_exhausted='continue', or the credits of weights "
            "that follow a function), which Grain's mix "
            "state cannot hold; restore it with chute."
        )
    parents = [to_grain(p, s) for p, s in zip(it._parents, state["parents"])]
    return {"parents": parents, "index": int(state["index"]), "stop": bool(state["stop"])}


_FROM: dict[str, Callable[[Any, Any], State]] = {
    "to_iter_dataset": _from_source,
    "map": _from_map,
    "limit": _from_limit,
    "mix": _from_mix,
    "window_shuffle": _from_window_shuffle,
    "mp_prefetch": lambda it, g: mp_from_grain(it, g, from_grain),
    "interleave": lambda it, g: interleave_from_grain(it, g, from_grain),
    **{stage: lambda it, g: pack_from_grain(it, g, from_grain, _produced) for stage in _PACKING},
    **{stage: _from_pass_through for stage in _PASS_THROUGH},
}

_TO: dict[str, Callable[[Any, State], Any]] = {
    "to_iter_dataset": lambda it, s: {"next_index": int(s["next_index"])},
    "map": _to_map,
    "limit": lambda it, s: {
        "parent": to_grain(it._parent, s["parent"]),
        "count_elements_read": int(s["read"]),
    },
    "mix": _to_mix,
    "window_shuffle": _to_window_shuffle,
    "mp_prefetch": lambda it, s: mp_to_grain(it, s, to_grain),
    "interleave": lambda it, s: interleave_to_grain(it, s, to_grain),
    **{stage: lambda it, s: pack_to_grain(it, s, to_grain) for stage in _PACKING},
    **{stage: _to_pass_through for stage in _PASS_THROUGH},
}
