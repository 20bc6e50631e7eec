"""The iterators of ``virtual_shards``: a host's shards read in the fixed order.

A host (or one of its workers) reads its virtual shards round-robin in
shard-number order, one element per shard per round, skipping shards that
ran dry.  Every element is thus the ``n``-th element of shard ``v``, and the
global stream is all shards' elements sorted by ``(n, v)``: a host's stream
is the part of it that its shards make, whatever the topology.

State (the same shape on every host and worker): ``num_shards`` and one
entry per virtual shard, ``{"state", "taken", "dry"}`` for the shards this
iterator runs and None for the others.  ``taken`` counts the turns the shard
had (an element, or an error in its place), so the next shard to read after
a restore is the first live shard with the fewest turns: the position needs
no other number, and a restore into any topology finds it.

With workers (``_PooledShardsIterator``), worker ``i`` of ``W`` runs the
host's shards ``i, i + W, ...`` (by their place in the host's list) and
tells the parent when one runs dry (``ShardRanDry``), so the parent asks
each worker for exactly the shards it would read itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.errors import CheckpointError, IteratorClosedError, WorkerDiedError, add_note
from chute._core.nesting import inner_iterator, inner_iterators
from chute._core.pipeline_context import iter_inside, join
from chute._core.state_check import by_stage, fields, is_int, refuse, require

__all__ = [
    "ShardRanDry",
    "ShardTurns",
    "ShardsIterator",
    "WorkerShards",
    "next_turn",
    "split_state",
]

_STAGE = "virtual_shards"


@dataclasses.dataclass(frozen=True)
class ShardRanDry:
    """What a worker sends in place of an element when its virtual shard ``shard`` ran dry."""

    shard: int


def next_turn(taken: Sequence[int], dry: Sequence[bool]) -> int:
    """The place of the next shard to read: the first live one with the fewest turns."""
    live = [t for t, d in zip(taken, dry) if not d]
    if not live:
        return 0
    fewest = min(live)
    return next(k for k, (t, d) in enumerate(zip(taken, dry)) if not d and t == fewest)


class ShardTurns(DatasetIterator[Any]):
    """What both iterators share: the host's shard list, each shard's turns, the state."""

    _stage = _STAGE
    _state_fields = fields(num_shards=by_stage, shards=by_stage)

    #: ``(host, hosts)``: the host this iterator reads for (None: a worker's share).
    host: tuple[int, int] | None = None

    def __init__(
        self, shards: dict[int, IterDataset[Any]], num_shards: int, parents: Sequence[Any]
    ) -> None:
        super().__init__(list(parents))
        self._datasets = shards
        self._ids = sorted(shards)
        self._num_shards = num_shards
        self._taken = [0] * len(self._ids)
        self._dry = [False] * len(self._ids)
        self._k = 0
        self._last: tuple[int, int] | None = None

    @property
    def shards(self) -> tuple[int, ...]:
        """The virtual shards this iterator reads, in the order it reads them."""
        return tuple(self._ids)

    @property
    def last_origin(self) -> tuple[int, int] | None:
        """``(shard, n)``: the element ``next()`` returned last was shard ``shard``'s ``n``-th
        (from 0); None before the first.  The global stream is ordered by ``(n, shard)``."""
        return self._last

    def _advance(self) -> None:
        self._k = (self._k + 1) % len(self._ids)

    def _note(self, exc: BaseException, k: int) -> None:
        add_note(
            exc,
            f"chute: in virtual shard {self._ids[k]} of {self._num_shards} (its element "
            f"{self._taken[k] - 1}); the next call goes on with the next shard.",
        )

    def _parts(self) -> list[dict[str, Any]]:
        """This iterator's shards' states, in its order."""
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        shards: list[Any] = [None] * self._num_shards
        for k, (v, part) in enumerate(zip(self._ids, self._parts())):
            shards[v] = {"state": part, "taken": self._taken[k], "dry": self._dry[k]}
        return self._state(num_shards=self._num_shards, shards=shards)

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        saved = state["num_shards"]
        if saved != self._num_shards:
            raise CheckpointError(
                f"virtual_shards.set_state(): the state was saved with num_shards={saved!r} "
                f"virtual shards and this pipeline has {self._num_shards} (at {where}); a state "
                "moves to other hosts and workers, not to another number of virtual shards. "
                f"Build the pipeline with num_shards={saved!r}."
            )
        shards = state["shards"]
        if not isinstance(shards, list) or len(shards) != self._num_shards:
            expected = f"a list of {self._num_shards} entries, one per virtual shard"
            raise refuse(self, "shards", f"{where}['shards']", expected, shards)
        missing = [v for v in self._ids if shards[v] is None]
        if missing:
            raise CheckpointError(
                f"virtual_shards.set_state(): the state holds no position for virtual shard(s) "
                f"{_few(missing)}, which this host runs now (at {where}['shards']): it was saved "
                "by one host of several. Merge every host's state with "
                "chute.experimental.merge_states(states) and restore each host from the merge."
            )
        for v in self._ids:
            part, at = shards[v], f"{where}['shards'][{v}]"
            if not isinstance(part, dict) or set(part) != {"state", "taken", "dry"}:
                raise refuse(self, "shards", at, "a dict with 'state', 'taken' and 'dry'", part)
            require(self, is_int(part["taken"]), at, f"taken={part['taken']!r} is not a count")
            require(self, isinstance(part["dry"], bool), at, f"dry={part['dry']!r} is not a bool")
            with inner_iterator(self._datasets[v]) as shard:
                shard._validate_state(part["state"], f"{at}['state']")

    def _apply_positions(self, state: dict[str, Any]) -> list[Any]:
        """Takes the turns and dry flags of ``state``; returns this iterator's shards' states."""
        parts = [state["shards"][v] for v in self._ids]
        self._taken = [int(p["taken"]) for p in parts]
        self._dry = [bool(p["dry"]) for p in parts]
        self._k = next_turn(self._taken, self._dry)
        self._last = None
        return [p["state"] for p in parts]


class ShardsIterator(ShardTurns):
    """Reads ``shards`` (virtual shard number → its pipeline) in this process.

    With ``report_dry`` (a worker's), a shard that runs dry yields a
    ``ShardRanDry`` in its turn; otherwise it is skipped.
    """

    def __init__(
        self, shards: dict[int, IterDataset[Any]], num_shards: int, report_dry: bool = False
    ) -> None:
        super().__init__(shards, num_shards, ())
        context = join(self)  # the options set around this stage reach the shards' stages
        with inner_iterators():  # the whole's state describes them: no fingerprints
            self._parents = tuple(iter_inside(context, shards[v]) for v in self._ids)
        self._report_dry = report_dry

    def __next__(self) -> Any:
        for _ in range(len(self._ids)):
            k = self._k
            if self._dry[k]:
                self._advance()
                continue
            try:
                element = next(self._parents[k])
            except StopIteration:
                self._dry[k] = True
                self._advance()
                if self._report_dry:
                    return ShardRanDry(self._ids[k])
                continue
            except (WorkerDiedError, IteratorClosedError):
                raise
            except Exception as exc:  # the failing element took the shard's turn
                self._taken[k] += 1
                self._advance()
                self._note(exc, k)
                raise
            self._last = (self._ids[k], self._taken[k])
            self._taken[k] += 1
            self._advance()
            return element
        raise StopIteration

    def _parts(self) -> list[dict[str, Any]]:
        return [it.get_state() for it in self._parents]

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "num_shards", "shards")
        for it, part in zip(self._parents, self._apply_positions(state)):
            it.set_state(part)


class WorkerShards(IterDataset[Any]):
    """The shards one worker runs (virtual shard number → its pipeline), reporting dry ones."""

    def __init__(self, shards: dict[int, IterDataset[Any]], num_shards: int) -> None:
        super().__init__()
        self._shards, self._num_shards = shards, num_shards

    def __iter__(self) -> DatasetIterator[Any]:
        return ShardsIterator(self._shards, self._num_shards, report_dry=True)

    def _describe(self) -> str:
        return f"virtual shards {_few(sorted(self._shards))} of {self._num_shards}"


def split_state(state: dict[str, Any], shards: Sequence[int]) -> dict[str, Any]:
    """The part of a (whole or merged) state that describes ``shards`` only."""
    mine = set(shards)
    parts = [p if v in mine else None for v, p in enumerate(state["shards"])]
    return {**{k: v for k, v in state.items() if k != "fingerprint"}, "shards": parts}


def _few(numbers: Sequence[int]) -> str:
    shown = ", ".join(map(str, numbers[:8]))
    return shown + (f", ... ({len(numbers)} in all)" if len(numbers) > 8 else "")
