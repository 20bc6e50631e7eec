"""Streams of positions as datasets, and the positions a worker's state has read.

A *stream* (``chute._execution.streams.Stream``, re-exported here) is the
sequence of positions a group of workers reads; ``relayout`` re-deals what is
left to another number of workers.  This module reads streams as datasets and
finds, in a worker's saved state, how many elements of its stream it has read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chute._core.dataset import Indices, MapDataset
from chute._execution.streams import Stream, relayout
from chute._stages.prefetch import next_index_in_state

__all__ = ["Stream", "StreamMapDataset", "StreamView", "positions_of", "relayout"]


class StreamMapDataset(MapDataset[int]):
    """The positions of a stream, as a MapDataset."""

    def __init__(self, stream: Stream) -> None:
        super().__init__()
        self._stream = stream

    def __len__(self) -> int:
        return len(self._stream)

    def _getitems(self, indices: Indices) -> list[int]:
        return self._stream.positions(np.asarray(indices, dtype=np.int64)).tolist()


class StreamView(MapDataset[Any]):
    """The elements of ``parent`` at the positions of ``stream``, in stream order."""

    def __init__(self, parent: MapDataset[Any], stream: Stream) -> None:
        super().__init__(parent)
        self._stream = stream

    def __len__(self) -> int:
        return len(self._stream)

    def _getitems(self, indices: Indices) -> list[Any]:
        return self._parent._getitems(self._stream.positions(np.asarray(indices, dtype=np.int64)))


def positions_of(states: Sequence[dict[str, Any]]) -> list[int] | None:
    """Stream positions each worker has consumed, if all are whole elements."""
    if any(_mid_batch(s) for s in states):
        return None
    return [next_index_in_state(s) for s in states]


def _mid_batch(state: Any) -> bool:
    """True if a nested iterator state holds pulls not yet emitted."""
    if isinstance(state, dict):
        return bool(state.get("pulls")) or any(_mid_batch(v) for v in state.values())
    return False
