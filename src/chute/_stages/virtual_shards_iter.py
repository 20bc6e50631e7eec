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

import bisect
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.errors import CheckpointError, IteratorClosedError, WorkerDiedError, add_note
from chute._core.nesting import inner_iterator, inner_iterators
from chute._core.pipeline_context import iter_inside, join
from chute._core.state_check import by_stage, count, fields, is_int, refuse, require
from chute._stages.prefetch import reads_inline

__all__ = [
    "ShardRanDry",
    "ShardTurns",
    "ShardsIterator",
    "WorkerShards",
    "entries_of",
    "next_turn",
    "split_state",
]

_STAGE = "virtual_shards"


@dataclasses.dataclass(frozen=True)
class ShardRanDry:
    """What a worker sends in place of an element when its virtual shard ``shard`` ran dry."""

    shard: int


def _place_of(
    following: int | None, ids: Sequence[int], taken: Sequence[int], dry: Sequence[bool]
) -> int:
    """The place in ``ids`` of the shard to read next after a restore.

    ``following`` is the shard the saving iterator (a host, or the parent of
    these workers) would have read next: the first live shard from it on, in
    turn, is this one's.  A merge of several hosts' states names none; then
    the first live shard with the fewest turns.
    """
    if following is None:
        return next_turn(taken, dry)
    start = bisect.bisect_left(ids, following)
    for j in range(len(ids)):
        k = (start + j) % len(ids)
        if not dry[k]:
            return k
    return 0


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
    _state_fields = fields(num_shards=by_stage, shards=by_stage, step=count(), next_shard=by_stage)

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
        self._step = 0  # the turns this host had since the run began: the same on every host
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

    def _took(self, k: int) -> None:
        """Shard ``k`` had its turn (an element, or an error in its place)."""
        self._taken[k] += 1
        self._step += 1
        self._advance()

    def _next_shard(self) -> int | None:
        """The shard read next (None: all ran dry)."""
        count = len(self._ids)
        for j in range(count):
            k = (self._k + j) % count
            if not self._dry[k]:
                return self._ids[k]
        return None

    #: A worker's iterator hands on a shard that ran dry as a ``ShardRanDry``, in its turn.
    _report_dry = False

    def _take(self, k: int) -> Any:
        """Shard ``k``'s next element; StopIteration when it ran dry."""
        raise NotImplementedError

    def _changed(self, k: int) -> None:
        """Shard ``k`` had its turn or ran dry: its state moved."""

    def _failed(self, exc: BaseException, k: int) -> None:
        """Shard ``k``'s element raised ``exc`` in its turn."""

    def __next__(self) -> Any:
        for _ in range(len(self._ids)):
            k = self._k
            if self._dry[k]:
                self._advance()
                continue
            try:
                element = self._take(k)
            except StopIteration:
                self._dry[k] = True
                self._changed(k)
                self._advance()
                if self._report_dry:
                    return ShardRanDry(self._ids[k])
                continue
            except (WorkerDiedError, IteratorClosedError):
                raise  # the turn stays: a restore goes on there
            except Exception as exc:  # the failing element took the shard's turn
                self._changed(k)
                self._took(k)
                self._failed(exc, k)
                raise
            self._changed(k)
            self._last = (self._ids[k], self._taken[k])
            self._took(k)
            return element
        raise StopIteration

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
        return self._state(
            num_shards=self._num_shards,
            shards=self._entries(),
            step=self._step,
            next_shard=self._next_shard(),
        )

    def _entries(self) -> Any:
        """One entry per virtual shard: this iterator's shards' ``{"state", "taken", "dry"}``."""
        shards: list[Any] = [None] * self._num_shards
        for k, (v, part) in enumerate(zip(self._ids, self._parts())):
            shards[v] = {"state": part, "taken": self._taken[k], "dry": self._dry[k]}
        return shards

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        saved = state["num_shards"]
        if saved != self._num_shards:
            raise CheckpointError(
                f"virtual_shards.set_state(): the state was saved with num_shards={saved!r} "
                f"virtual shards and this pipeline has {self._num_shards} (at {where}); a state "
                "moves to other hosts and workers, not to another number of virtual shards. "
                f"Build the pipeline with num_shards={saved!r}."
            )
        following = state["next_shard"]
        if following is not None and not is_int(following, self._num_shards - 1):
            expected = f"None or a shard number below {self._num_shards}"
            raise refuse(self, "next_shard", f"{where}['next_shard']", expected, following)
        shards = entries_of(state, where)
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
        entries = entries_of(state, "state")
        parts = [entries[v] for v in self._ids]
        self._taken = [int(p["taken"]) for p in parts]
        self._dry = [bool(p["dry"]) for p in parts]
        self._k = _place_of(state["next_shard"], self._ids, self._taken, self._dry)
        self._step = int(state["step"])
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
        # No fingerprints: the whole's state describes them.  Reads inline: the shards take
        # turns a few elements at a time, and workers, not threads, read them in parallel.
        with inner_iterators(), reads_inline():
            self._parents = tuple(iter_inside(context, shards[v]) for v in self._ids)
        self._report_dry = report_dry
        # Each shard's state as last read: only the shard whose turn it was changes, and a
        # worker sends the state with every element.
        self._saved: list[Any] = [None] * len(self._ids)
        self._text: list[str | None] = [None] * len(self._ids)  # a worker's entries, as JSON

    def _take(self, k: int) -> Any:
        return next(self._parents[k])

    def _changed(self, k: int) -> None:
        self._saved[k] = self._text[k] = None

    def _failed(self, exc: BaseException, k: int) -> None:
        self._note(exc, k)

    def _parts(self) -> list[Any]:
        saved = self._saved
        for k, part in enumerate(saved):
            if part is None:
                saved[k] = self._parents[k].get_state()
        return list(saved)

    def _entries(self) -> Any:
        """A worker sends its state with every element: its entries go as one JSON text,
        each shard's part of it made again only after that shard's turn."""
        if not self._report_dry:
            return super()._entries()
        texts, parts = self._text, self._parts()
        for k, text in enumerate(texts):
            if text is None:
                entry = {"state": parts[k], "taken": self._taken[k], "dry": self._dry[k]}
                texts[k] = json.dumps(entry, separators=(",", ":"))
        pieces = ["null"] * self._num_shards
        for v, text in zip(self._ids, texts):
            pieces[v] = text or "null"  # (every text was just made)
        return "[" + ",".join(pieces) + "]"

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "num_shards", "shards")
        self._saved = [None] * len(self._ids)
        self._text = [None] * len(self._ids)
        for it, part in zip(self._parents, self._apply_positions(state)):
            it.set_state(part)


class WorkerShards(IterDataset[Any]):
    """The shards one worker runs (virtual shard number → its pipeline), reporting dry ones."""

    def __init__(self, shards: dict[int, IterDataset[Any]], num_shards: int) -> None:
        super().__init__()
        self._shards, self._num_shards = shards, num_shards

    def __iter__(self) -> DatasetIterator[Any]:
        return ShardsIterator(self._shards, self._num_shards, report_dry=True)

    def stacked_by(self, stack_batches: Callable[[Any, Any], Any], leaves_fn: Any) -> WorkerShards:
        """A copy whose shards' batches have their leaves combined by ``leaves_fn``, where
        ``stack_batches`` can (a worker's shared-memory ring: ``leaves_stacked_by``)."""
        shards = {v: stack_batches(ds, leaves_fn) for v, ds in self._shards.items()}
        return WorkerShards(shards, self._num_shards)

    def _describe(self) -> str:
        return f"virtual shards {_few(sorted(self._shards))} of {self._num_shards}"


def split_state(
    state: dict[str, Any], shards: Sequence[int], following: int | None
) -> dict[str, Any]:
    """The part of a (whole or merged) state that describes ``shards`` only, for a worker
    whose parent reads shard ``following`` next."""
    mine = set(shards)
    parts = [p if v in mine else None for v, p in enumerate(entries_of(state, "state"))]
    kept = {k: v for k, v in state.items() if k != "fingerprint"}
    return {**kept, "shards": parts, "next_shard": following}


def entries_of(state: Any, where: str) -> Any:
    """A state's ``"shards"`` entries; a worker's state holds them as JSON text."""
    entries = state["shards"]
    if not isinstance(entries, str):
        return entries
    try:
        return json.loads(entries)
    except ValueError:
        raise CheckpointError(
            f"virtual_shards.set_state(): {where}['shards'] is text that is not a list of "
            "shard entries; pass the state that get_state() returned, unchanged."
        ) from None


def _few(numbers: Sequence[int]) -> str:
    shown = ", ".join(map(str, numbers[:8]))
    return shown + (f", ... ({len(numbers)} in all)" if len(numbers) > 8 else "")
