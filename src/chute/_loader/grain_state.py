"""Crossing DataLoader checkpoints between Grain and chute.

Grain's DataLoader saves JSON bytes naming, for each worker, the last
sampler position it handed out::

    {"version": 2, "last_seen_indices": {"0": 6, "1": 3}, "last_worker_index": 0,
     "worker_count": 2, "sampler": "IndexSampler(...)", "data_source": "..."}

Worker ``w`` of ``W`` reads positions ``w, w + W, ...``, so a last position
``p`` means ``(p - w) // W + 1`` positions read (``w - W`` before the first),
and the next batch comes from worker ``last_worker_index + 1``.  chute's
state holds the same counts as ``"positions"``, with each worker's pipeline
state.  Grain checks ``repr(sampler)`` and its description of the data source
on restore (``repr(source)``; the type alone for a list, tuple or array;
for an ArrayRecord source, a SHA-1 of its file names), and so does chute with
a Grain state, describing its own source as Grain would.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from chute._core.errors import CheckpointError
from chute._core.nesting import inner_iterator
from chute._grain.state import from_grain
from chute._loader.capabilities import DescribesItselfToGrain
from chute._loader.pipeline import worker_dataset
from chute._stages.streams import Stream

GRAIN_VERSION = 2


def is_grain_loader_state(saved: Any) -> bool:
    """True for a parsed DataLoader state in Grain's layout."""
    return isinstance(saved, dict) and "last_seen_indices" in saved


def _check_crossable(loader: Any) -> None:
    if loader._shard[1] != 1:
        raise CheckpointError(
            "chute does not yet translate DataLoader checkpoints between Grain and chute "
            "when the loader reads one shard of several (shard_options); restore a "
            "checkpoint saved by the same library."
        )


def _positions(saved: dict[str, Any], workers: int) -> list[int]:
    last = saved["last_seen_indices"]
    positions = []
    for w in range(workers):
        seen = last.get(str(w)) if isinstance(last, dict) else None
        if not isinstance(seen, int) or seen < w - workers or (seen - w) % workers:
            raise CheckpointError(
                f"Grain DataLoader state: last_seen_indices[{w!r}] is {seen!r}, not a "
                f"position of worker {w} of {workers}; the state is damaged or not Grain's."
            )
        positions.append((seen - w) // workers + 1)
    return positions


def loader_from_grain(loader: Any, saved: dict[str, Any], check: bool = True) -> dict[str, Any]:
    """chute's parsed DataLoader state for Grain's ``saved`` (its worker count).

    ``check=False`` (``allow_pipeline_change``) takes the positions without
    comparing the sampler and the data source.

    Raises:
        CheckpointError: Another sampler or data source, a sharded loader, or a
            damaged state.
    """
    _check_crossable(loader)
    if check:
        _check_same(loader, saved)
    workers = max(1, int(saved.get("worker_count", 0)))
    positions = _positions(saved, workers)
    stream = Stream((), 0, loader._length())
    states = []
    for w, position in enumerate(positions):
        ds = worker_dataset(
            stream, w, workers, loader._sampler, loader._source, loader._operations,
            loader._read_options, loader._seed, loader._shard,
        )  # fmt: skip
        with inner_iterator(ds) as pipeline:
            states.append(from_grain(pipeline, {"next_index": position}))
    return {
        "worker_count": workers,
        "turn": (int(saved.get("last_worker_index", -1)) + 1) % workers,
        "exhausted": [False] * workers,
        "stream": {"pending": [], "tail": 0},
        "positions": positions,
        "workers": states,
    }


def loader_to_grain(loader: Any, state: bytes) -> bytes:
    """Grain's DataLoader state (JSON bytes) for chute's ``state`` of ``loader``.

    Raises:
        CheckpointError: The position is one Grain's state cannot hold.
    """
    _check_crossable(loader)
    saved = json.loads(state)
    if saved["stream"]["pending"] or saved["stream"]["tail"]:
        raise CheckpointError(
            "this DataLoader iterator was restored from a checkpoint of another worker "
            "count, so its workers read re-dealt positions that Grain's state cannot hold. "
            "Save the Grain state from a loader that started fresh or from a checkpoint "
            "with its own worker count."
        )
    if saved["positions"] is None:
        raise CheckpointError(
            "a DataLoader worker stopped part way through a batch (after an error); "
            "Grain's checkpoints cannot say so. Save the Grain state after the next batch."
        )
    workers = int(saved["worker_count"])
    last = {str(w): w + (p - 1) * workers for w, p in enumerate(saved["positions"])}
    grain = {
        "version": GRAIN_VERSION,
        "last_seen_indices": last,
        "last_worker_index": int(saved["turn"]) - 1,
        "worker_count": loader._worker_count,
        "sampler": _grain_repr(loader._sampler),
        "data_source": _grain_repr(loader._data_source),
    }
    return json.dumps(grain, indent=4).encode()


def _check_same(loader: Any, saved: dict[str, Any]) -> None:
    """Raises unless Grain's ``saved`` names this loader's sampler and data source."""
    for what, key, mine in (
        ("sampler", "sampler", _grain_repr(loader._sampler)),
        ("data source", "data_source", _grain_repr(loader._data_source)),
    ):
        if key not in saved:
            raise CheckpointError(
                f"the Grain DataLoader checkpoint does not record its {what} (no {key!r} "
                f"entry; it holds {sorted(saved)}); pass the bytes Grain's get_state() returned."
            )
        if _without_address(saved[key]) != _without_address(mine):
            raise CheckpointError(
                f"the Grain checkpoint was saved with {what} {saved[key]} but this DataLoader "
                f"has {mine} (as Grain describes it); build the loader over the {what} Grain "
                "ran (changed on purpose? call chute.checkpoint.allow_pipeline_change(iterator) "
                "first)."
            )


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _without_address(text: Any) -> Any:
    """A default repr's memory address, which differs in every process, left out."""
    return _ADDRESS.sub("", text) if isinstance(text, str) else text


def _grain_repr(obj: Any) -> str:
    """What Grain records of a source or sampler: chute's objects that differ say theirs."""
    if isinstance(obj, (list, tuple, np.ndarray)):  # Grain leaves the data out
        return str(type(obj))
    return obj._grain_repr() if isinstance(obj, DescribesItselfToGrain) else repr(obj)
