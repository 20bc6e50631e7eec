"""The checkpointable iterator behind every packing stage.

Packing works in rounds: sequences go into the bins until one fits none; then
the round's bins are built and handed out one output at a time, and the
sequence that did not fit opens the next round.  The iterator's state is
positions, never the bins: where the current round's first pull starts (a
parent state plus a number of pulls to skip after it), how many pulls the
round has made, whether the round is closed, and how many of its outputs were
handed out.  A restore replays those pulls into fresh bins and skips the
outputs already handed out.  The state also lists the pulls that raised (in
reading or in parsing), counted from the parent state: they were reported
then, so the replay passes over them; an error at any other pull is raised
(``_pull_log.replay_pulls``).

The state's ``pulls`` counts the pulls a restore replays; while it is nonzero
a DataLoader refuses to re-deal the worker's positions to another number of
workers (the loader's operation counts the batch it assembles as one more, so
its checkpoints always restore with the saved worker count).

The parent is read in chunks (``_next_many`` when it has one), and its state
is taken once per chunk, not once per element.
"""

from __future__ import annotations

from typing import Any, Protocol

from chute._core import errors
from chute._core.dataset import DatasetIterator
from chute._core.errors import CheckpointError
from chute._core.replay import failed_pulls, replay_pulls
from chute._core.state_check import (
    count,
    fields,
    flag,
    optional,
    parent_state,
    pull_numbers,
    require,
)
from chute._stages.capabilities import ReadsMany
from chute._stages.packing import Packer

_CHUNK = 64


class Layout(Protocol):
    """How a packing stage reads its elements and writes its outputs."""

    name: str

    def parse(self, element: Any, index: int) -> tuple[list[Any], list[int], tuple[Any, ...]]:
        """(arrays, lengths, meta values) of an element; raises on bad input."""

    def outputs(self, packer: Packer, bins_before: int) -> list[Any]:
        """The round's outputs, in the order they are handed out."""


class _Reader:
    """Reads the parent in chunks; its position is (state, pulls after it, index)."""

    def __init__(self, parent: DatasetIterator[Any]) -> None:
        self._parent = parent
        self._many = parent._next_many if isinstance(parent, ReadsMany) else None
        self.reset(parent.get_state(), 0)

    def reset(self, state: dict[str, Any], index: int) -> None:
        self._base, self._offset, self.index = state, 0, index
        self._items: list[Any] = []
        self._next = 0
        self._ended = False

    def position(self) -> tuple[dict[str, Any], int, int]:
        return self._base, self._offset, self.index

    def last_position(self) -> tuple[dict[str, Any], int, int]:
        """The position just before the element read last."""
        return self._base, self._offset - 1, self.index - 1

    def settle(self) -> None:
        """Makes the parent's own state the position, when no chunk is held."""
        if self._next >= len(self._items) and (self._offset or self._ended):
            self._base, self._offset = self._parent.get_state(), 0
            self._items, self._next = [], 0

    def __next__(self) -> Any:
        if self._next >= len(self._items):
            self._fill()
        x = self._items[self._next]
        self._next += 1
        self._offset += 1
        self.index += 1
        return x

    def _fill(self) -> None:
        if self._ended:
            raise StopIteration
        if self._offset >= _CHUNK or not self._items:
            self._base, self._offset = self._parent.get_state(), 0
        self._items, self._next = [], 0
        try:
            self._items = self._many(_CHUNK) if self._many is not None else [next(self._parent)]
        except StopIteration:
            self._ended = True
            raise
        except Exception:
            self._offset += 1  # the failed pull is consumed
            self.index += 1
            raise


class PackIterator(DatasetIterator[Any]):
    """Packs the parent's elements round by round; see the module docstring."""

    _state_fields = fields(
        parent=parent_state,
        pulls=optional(count()),
        skip=count(),
        replay=count(),
        failed=optional(pull_numbers),
        index=count(),
        closed=flag,
        emitted=count(),
        bins=count(),
    )

    def __init__(
        self,
        parent: DatasetIterator[Any],
        packer: Packer,
        layout: Layout,
        stage: str,
        *,
        always_holding: bool = False,
    ) -> None:
        super().__init__(parent)
        self._stage = stage
        self._holding = int(always_holding)
        self._packer, self._layout = packer, layout
        self._reader = _Reader(parent)
        self._failed: list[int] = []  # reader indices of the pulls that raised
        self._new_round(self._reader.position(), None, 0)

    def _new_round(self, anchor: tuple[dict[str, Any], int, int], carry: Any, bins: int) -> None:
        self._anchor, self._bins = anchor, bins
        first = anchor[2] - anchor[1]  # the reader index of the anchor's parent state
        self._failed = [k for k in self._failed if k >= first]
        self._packer.reset()
        self._pulls, self._closed, self._emitted = 0, False, 0
        self._out: list[Any] = []
        self._carry_anchor: tuple[dict[str, Any], int, int] | None = None
        self._carry: Any = None
        if carry is not None:
            self._packer.add(*carry)
            self._pulls = 1

    def __next__(self) -> Any:
        if not self._closed:
            self._fill()
        out = self._out
        if self._emitted >= len(out):
            raise StopIteration
        x = out[self._emitted]
        self._emitted += 1
        if self._emitted == len(out):
            self._advance()
        return x

    def _fill(self) -> None:
        """Pulls until an element fits no bin or the parent ends, then closes the round."""
        reader, packer, parse = self._reader, self._packer, self._layout.parse
        while True:
            try:
                element = next(reader)
            except StopIteration:
                break
            except Exception as exc:
                self._pulls += 1
                self._failed.append(reader.index - 1)
                errors.annotate(exc, self._layout.name, reader.index - 1)
                raise
            try:
                parsed = parse(element, reader.index - 1)
            except Exception:
                self._pulls += 1
                self._failed.append(reader.index - 1)
                raise
            if not packer.add(*parsed):
                self._carry, self._carry_anchor = parsed, reader.last_position()
                break
            self._pulls += 1
        self._close()

    def _close(self) -> None:
        self._closed = True
        if self._packer.empty:
            self._out = []
            return
        self._out = self._layout.outputs(self._packer, self._bins)

    def _advance(self) -> None:
        """After the last output of a round: the next round starts with the carried element."""
        bins = self._bins + len(self._out)
        if self._carry is None:
            self._reader.settle()
            self._new_round(self._reader.position(), None, bins)
        else:
            anchor = self._carry_anchor or self._reader.position()
            self._new_round(anchor, self._carry, bins)

    def get_state(self) -> dict[str, Any]:
        base, skip, index = self._anchor
        return self._state(
            parent=base,
            pulls=skip + self._pulls + self._holding,
            skip=skip,
            replay=self._pulls,
            failed=[k - (index - skip) for k in self._failed],
            index=index,
            closed=self._closed,
            emitted=self._emitted,
            bins=self._bins,
        )

    def set_state(self, state: dict[str, Any]) -> None:
        s = self._check_state(
            state, "parent", "skip", "replay", "index", "closed", "emitted", "bins"
        )
        skip, index, name = int(s["skip"]), int(s["index"]), self._layout.name
        failed = failed_pulls(s, name)
        reader = self._reader
        self._parent.set_state(s["parent"])
        reader.reset(s["parent"], index - skip)
        before = None if failed is None else {k for k in failed if k < skip}
        for _ in replay_pulls(reader.__next__, skip, before, name):
            pass
        self._failed = [] if failed is None else sorted(index - skip + k for k in failed)
        self._new_round((s["parent"], skip, index), None, int(s["bins"]))
        in_round = None if failed is None else {k - skip for k in failed if k >= skip}
        self._replay(int(s["replay"]), in_round)
        if s["closed"]:
            self._fill()
            if not self._packer.empty and self._pulls != int(s["replay"]):
                raise CheckpointError(
                    f"{name}: the replayed round differs from the checkpointed one; "
                    "restore into the pipeline (and data) that saved the checkpoint."
                )
            self._emitted = int(s["emitted"])

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        skip, replay, failed = state["skip"], state["replay"], state.get("failed") or []
        require(self, skip <= state["index"], where, f"{skip} pulls skipped of {state['index']}")
        require(self, not failed or failed[-1] < skip + replay, where, f"failed pulls {failed}")
        if "pulls" in state:  # Grain's states, translated, count no held batch
            pulls = skip + replay + self._holding
            require(self, state["pulls"] in (pulls, skip + replay), where, f"pulls is not {pulls}")
        emitted = state["emitted"]
        require(self, state["closed"] or not emitted, where, f"{emitted} out of an open round")

    def _replay(self, pulls: int, failed: set[int] | None) -> None:
        reader, packer, parse = self._reader, self._packer, self._layout.parse

        def pull() -> Any:
            element = next(reader)
            return parse(element, reader.index - 1)

        for parsed in replay_pulls(pull, pulls, failed, self._layout.name):
            if not packer.add(*parsed):
                raise CheckpointError(
                    f"{self._layout.name}: an element replayed from the checkpoint no longer "
                    "fits its round; restore into the pipeline that saved the checkpoint."
                )
        self._pulls += pulls
