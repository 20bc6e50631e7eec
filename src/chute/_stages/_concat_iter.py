"""The iterator of ``ConcatThenSplitIterDataset`` and its checkpoints.

The iterator keeps a log of the parent elements it still holds, each with the
parent's state before it: elements waiting in the packing buffer (the first
possibly cut already) and full-length elements waiting to come out alone.
Elements are released in pull order within each kind, so a checkpoint is
positions only: the parent's state before the oldest held element, how many
pulls followed it (and which raised), how many of the pulled elements of each
kind are already out, and how many tokens of the first buffered element
earlier outputs took.  A restore replays those pulls and rebuilds the same
buffer.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from chute._core.dataset import DatasetIterator
from chute._core.errors import CheckpointError
from chute._core.state_check import (
    REACH,
    by_stage,
    check_pulls,
    count,
    fields,
    is_int,
    parent_state,
    parents_reach,
    pull_numbers,
    refuse,
    require,
)
from chute._stages._concat_pack import (
    PackConfig,
    Piece,
    build,
    check_packable,
    is_full_length,
    overflows,
    plan,
    to_piece,
)


@dataclasses.dataclass
class _Pull:
    """One element pulled from the parent and the parent's state before it."""

    before: dict[str, Any]
    kind: str  # "queue" (comes out alone), "buffer" (packed) or "failed" (raised)
    piece: Piece  # without features when it failed
    done: bool = False  # all of it emitted, or it raised


def _failed(before: dict[str, Any], index: int) -> _Pull:
    return _Pull(before, "failed", Piece(index, {}, frozenset(), {}), done=True)


class ConcatThenSplitIterator(DatasetIterator[dict[str, Any]]):
    """Packs the parent's elements; see ``ConcatThenSplitIterDataset``."""

    _stage = "concat_then_split"
    _state_fields = fields(
        parent=parent_state,
        pulls=count(),
        failed=pull_numbers,
        queue_out=count(),
        buffer_out=count(),
        start=by_stage,
        pulled=count(parents_reach, why=REACH),
    )

    def __init__(self, parent: DatasetIterator[Any], cfg: PackConfig) -> None:
        super().__init__(parent)
        self._cfg = cfg
        self._pulled = 0  # elements pulled from the parent so far
        self._reset()

    def _reset(self) -> None:
        self._log: collections.deque[_Pull] = collections.deque()
        self._queue: collections.deque[_Pull] = collections.deque()
        self._buffer: list[_Pull] = []
        self._totals = dict.fromkeys(self._cfg.lengths, 0)

    def __next__(self) -> dict[str, Any]:
        if self._queue:
            return self._emit_queued()
        while not overflows(self._totals, self._cfg):
            if not self._pull():
                if self._buffer:
                    return self._emit(final=True)
                if self._queue:
                    return self._emit_queued()
                raise StopIteration
        return self._emit(final=False)

    def _pull(self) -> bool:
        """Pulls one element into the buffer or queue; False at the parent's end."""
        before = self._parent.get_state()
        try:
            element = next(self._parent)
        except StopIteration:
            return False
        except Exception:
            self._hold(_failed(before, self._pulled))
            raise
        try:
            entry = self._entry(before, element, self._pulled)
            if entry.kind == "buffer" and self._buffer:
                check_packable(self._buffer[0].piece, entry.piece)
        except Exception:
            self._hold(_failed(before, self._pulled))
            raise
        self._hold(entry)
        return True

    def _entry(self, before: dict[str, Any], element: Any, index: int) -> _Pull:
        cfg = self._cfg
        piece = to_piece(element, cfg, index)
        alone = not cfg.split_full_length and is_full_length(piece.arrays, cfg)
        return _Pull(before, "queue" if alone else "buffer", piece)

    def _hold(self, entry: _Pull) -> None:
        self._pulled += 1
        self._log.append(entry)
        if entry.kind == "queue":
            self._queue.append(entry)
        elif entry.kind == "buffer":
            self._add_to_buffer(entry)
        self._compact()

    def _add_to_buffer(self, entry: _Pull) -> None:
        self._buffer.append(entry)
        for k in self._totals:
            self._totals[k] += entry.piece.remaining(k)

    def _compact(self) -> None:
        """Forgets the oldest pulls once they are fully emitted."""
        while self._log and self._log[0].done:
            self._log.popleft()

    def _emit_queued(self) -> dict[str, Any]:
        entry = self._queue.popleft()
        out = build([entry.piece], [_whole(entry.piece)], self._cfg)
        entry.done = True
        self._compact()
        return out

    def _emit(self, final: bool) -> dict[str, Any]:
        """Packs the buffer: everything at the end, else up to the first overflow."""
        entries = self._buffer
        pieces = [e.piece for e in entries]
        takes = [_whole(p) for p in pieces]
        keep: list[_Pull] = []
        if not final:
            keep = [entries[-1]]
            take = plan(pieces, self._cfg)
            del takes[-1]
            if take is None:
                entries, pieces = entries[:-1], pieces[:-1]
            else:
                takes.append(take)
        out = build(pieces, takes, self._cfg)
        for entry, take in zip(entries, takes):
            if keep and entry is keep[0]:
                _advance(entry, take)
            else:
                entry.done = True
        self._buffer, self._totals = [], dict.fromkeys(self._cfg.lengths, 0)
        for entry in keep:
            self._add_to_buffer(entry)
        self._compact()
        return out

    def get_state(self) -> dict[str, Any]:
        log = self._log
        start = dict(self._buffer[0].piece.start) if self._buffer else None
        return self._state(
            parent=log[0].before if log else self._parent.get_state(),
            pulls=len(log),
            failed=[i for i, e in enumerate(log) if e.kind == "failed"],
            queue_out=sum(e.done for e in log if e.kind == "queue"),
            buffer_out=sum(e.done for e in log if e.kind == "buffer"),
            start=start or dict.fromkeys(self._cfg.lengths, 0),
            pulled=self._pulled,
        )

    def set_state(self, state: dict[str, Any]) -> None:
        keys = ("parent", "pulls", "failed", "queue_out", "buffer_out", "start", "pulled")
        state = self._check_state(state, *keys)
        self._parent.set_state(state["parent"])
        self._reset()
        self._pulled = int(state["pulled"]) - int(state["pulls"])
        failed = {int(i) for i in state["failed"]}
        for i in range(int(state["pulls"])):
            self._replay(i in failed)
        out = {"queue": int(state["queue_out"]), "buffer": int(state["buffer_out"])}
        for entry in self._log:
            if entry.kind in out and out[entry.kind] > 0:
                entry.done, out[entry.kind] = True, out[entry.kind] - 1
        self._queue = collections.deque(e for e in self._log if e.kind == "queue" and not e.done)
        held = [e for e in self._log if e.kind == "buffer" and not e.done]
        if held:
            held[0].piece.start = {k: int(state["start"][k]) for k in self._cfg.lengths}
        self._buffer, self._totals = [], dict.fromkeys(self._cfg.lengths, 0)
        for entry in held:
            self._add_to_buffer(entry)
        self._compact()

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        check_pulls(self, state, where, kept_most=None)
        pulls, failed = state["pulls"], len(state["failed"])
        out = state["queue_out"] + state["buffer_out"]
        require(self, out + failed <= pulls, where, f"{out} elements out of {pulls - failed}")
        require(self, pulls <= state["pulled"], where, f"{pulls} pulls held of {state['pulled']}")
        start, lengths = state["start"], self._cfg.lengths
        if not (
            isinstance(start, dict)
            and set(start) == set(lengths)
            and all(is_int(v) for v in start.values())
        ):
            expected = f"a dict of token counts (ints >= 0) for {sorted(lengths)}"
            raise refuse(self, "start", f"{where}['start']", expected, start)

    def _replay(self, failed: bool) -> None:
        """Pulls one element again while restoring, as it was pulled before."""
        before = self._parent.get_state()
        try:
            element = next(self._parent)
        except StopIteration:
            raise CheckpointError(
                "ConcatThenSplitIterDataset: the parent ended while replaying the pulls "
                "recorded in the checkpoint; the pipeline or its data differ from the "
                "ones that saved it."
            ) from None
        except Exception:
            if not failed:
                raise
            element = None
        if failed:
            self._log.append(_failed(before, self._pulled))
            self._pulled += 1
            return
        entry = self._entry(before, element, self._pulled)
        self._pulled += 1
        self._log.append(entry)


def _whole(piece: Piece) -> dict[str, int]:
    return {k: piece.remaining(k) for k in piece.arrays}


def _advance(entry: _Pull, take: dict[str, int]) -> None:
    """Marks the taken tokens of a cut element as emitted; fixed features repeat."""
    for k, n in take.items():
        if k not in entry.piece.fixed:
            entry.piece.start[k] += n
