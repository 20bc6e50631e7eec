"""Packing states crossing between Grain and chute.

Both pack in rounds.  Grain's state is the parent's state where the current
round starts, how many of the round's rows were handed out (``next_row``)
and how many rows were handed out in all (``counter``).  chute's names the
round's start as a parent state plus pulls to skip after it, and replays the
round's pulls on restore.  Going from Grain, chute is put at the round's
start and takes ``next_row`` rows again (reading the round's elements, as
any restore of a packing stage does); going to Grain, the parent is read up
to the round's start to learn its state there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chute._core.errors import CheckpointError
from chute._core.iterator import STATE_VERSION
from chute._core.replay import failed_pulls, replay_pulls
from chute._grain.need import need

Translate = Callable[[Any, Any], Any]
_KEYS = ("parent", "next_row", "counter")


def pack_from_grain(it: Any, g: Any, from_grain: Translate, produced: Any) -> dict[str, Any]:
    """chute's packing state at the position of Grain's ``g``."""
    need(g, it, *_KEYS)
    rows, counter = int(g["next_row"]), int(g["counter"])
    if not 0 <= rows <= counter:
        raise CheckpointError(f"Grain's packing state {g!r:.120} has next_row > counter.")
    parent = from_grain(it._parent, g["parent"])
    start = {
        "version": STATE_VERSION,
        "stage": it._stage_name(),
        "parent": parent,
        "pulls": 0,
        "skip": 0,
        "replay": 0,
        "failed": [],
        "index": produced(parent),
        "closed": False,
        "emitted": 0,
        "bins": counter - rows,
    }
    if not rows:
        return start
    it.set_state(start)
    for taken in range(rows):
        try:
            next(it)
        except StopIteration:
            raise CheckpointError(
                f"Grain's packing state says {rows} rows of this round were handed out, but "
                f"the round has {taken}: the data differs from the run that saved it."
            ) from None
    state = it.get_state()
    state.pop("fingerprint", None)
    return state


def pack_to_grain(it: Any, state: dict[str, Any], to_grain: Translate) -> dict[str, Any]:
    """Grain's packing state for chute's ``state`` of ``it`` (which is left where it was)."""
    parent, start, skip = it._parent, state["parent"], int(state["skip"])
    failed = failed_pulls(state, "packing") or set()
    if any(k >= skip for k in failed):
        raise CheckpointError(
            "an element of the packing round under way raised, and Grain's packing state "
            "cannot say so (Grain would read it again); save the Grain state once the round's "
            "outputs are handed out."
        )
    if skip:  # the round starts after some pulls: read up to there, then back
        parent.set_state(start)
        for _ in replay_pulls(lambda: next(parent), skip, failed, "packing"):
            pass
        start = parent.get_state()
        it.set_state(state)
    return {
        "parent": to_grain(parent, start),
        "next_row": int(state["emitted"]),
        "counter": int(state["bins"]) + int(state["emitted"]),
    }
