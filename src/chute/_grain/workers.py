"""Crossing ``mp_prefetch`` checkpoints between Grain and chute.

Grain saves its workers as an interleave over one dataset per worker::

    {"next_index_in_cycle": turn, "next_index_in_datasets": W,
     "iterators_in_use_indices": [0, ..., W - 1],
     "iterators_in_use_states": [<worker 0's pipeline state>, ...],
     "exhausted": [0, ...], "future_states": {}}

chute saves the same per-worker positions under ``"workers"``.  A worker's
pipeline lives in its process, so its stages are read from a local copy of
worker ``w``'s share, built here and never iterated (a window shuffle reads
one window from it).  Grain's state is translated with Grain's worker count;
chute's own restore then re-deals it if this iterator has another count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from chute._core.errors import CheckpointError
from chute._core.iterator import STATE_VERSION
from chute._core.nesting import inner_iterators
from chute._grain.need import need
from chute._stages.slicing import share

Translate = Callable[[Any, Any], Any]


@contextmanager
def _worker_pipelines(it: Any, count: int) -> Iterator[list[Any]]:
    """Iterators of each of ``count`` workers' pipelines, built in this process."""
    ds = it._ds
    with inner_iterators():
        pipelines = [iter(share(ds._parent, w, count, ds._sequential)) for w in range(count)]
    try:
        yield pipelines
    finally:
        for pipeline in pipelines:
            pipeline.close()


def mp_from_grain(it: Any, g: Any, from_grain: Translate) -> dict[str, Any]:
    """chute's ``mp_prefetch`` state for Grain's state ``g`` (any worker count)."""
    need(g, it, "next_index_in_cycle", "iterators_in_use_indices", "iterators_in_use_states")
    states = g["iterators_in_use_states"]
    count = len(states)
    if list(g["iterators_in_use_indices"]) != list(range(count)) or g.get("future_states"):
        raise CheckpointError(
            "Grain's mp_prefetch state lists its workers out of order or holds states "
            "of workers not yet started; chute reads only the layout Grain's mp_prefetch "
            "writes (workers 0..W-1, no future states)."
        )
    with _worker_pipelines(it, count) as pipelines:
        workers = [from_grain(p, s) for p, s in zip(pipelines, states)]
    exhausted = list(g.get("exhausted", [0] * count))
    return {
        "version": STATE_VERSION,
        "stage": "mp_prefetch",
        "workers": workers,
        "turn": int(g["next_index_in_cycle"]) % max(1, count),
        "exhausted": [bool(x) for x in exhausted],
        "stream": None,
    }


def mp_to_grain(it: Any, state: dict[str, Any], to_grain: Translate) -> dict[str, Any]:
    """Grain's ``mp_prefetch`` state for chute's ``state``: Grain needs the same worker count."""
    if state.get("stream") is not None:
        raise CheckpointError(
            "this mp_prefetch iterator was restored from a checkpoint of another worker "
            "count, so its workers read re-dealt positions that Grain's state cannot hold. "
            "Save the Grain state from an iterator that started fresh or from a checkpoint "
            "with its own worker count."
        )
    count = len(state["workers"])
    with _worker_pipelines(it, count) as pipelines:
        workers = [to_grain(p, s) for p, s in zip(pipelines, state["workers"])]
    return {
        "next_index_in_cycle": int(state["turn"]),
        "next_index_in_datasets": count,
        "iterators_in_use_indices": list(range(count)),
        "iterators_in_use_states": workers,
        "exhausted": [int(bool(x)) for x in state["exhausted"]],
        "future_states": {},
    }
