"""What stages (and the sources they read) offer one another, as small Protocols.

The idea and the rules are ``chute._core.capabilities``'s: the user of a
capability asks with ``isinstance``; the members keep their private names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "BatchesRecordsInWorkers",
    "CountsPerSource",
    "GoesByPublicName",
    "HandsOnParentsElement",
    "LocatesRecords",
    "MapsToParentIndex",
    "NumbersElements",
    "ReadsMany",
    "RemembersLastOrigin",
    "StartsDownloads",
    "WrapsFunction",
]


@runtime_checkable
class WrapsFunction(Protocol):
    """A transform or batch function that wraps the user's function (``Map(fn)``)."""

    _fn: Callable[..., Any] | None


@runtime_checkable
class ReadsMany(Protocol):
    """An iterator that hands out up to ``count`` elements in one call (fewer at the end)."""

    def _next_many(self, count: int) -> list[Any]: ...


@runtime_checkable
class StartsDownloads(Protocol):
    """A bucket source that can start fetching its shards before the first read."""

    def _start_downloads(self) -> None: ...


@runtime_checkable
class LocatesRecords(Protocol):
    """A source that says which file and record an index reads: ``(file, record)``."""

    def _record_location(self, index: int) -> tuple[str, int]: ...


@runtime_checkable
class MapsToParentIndex(Protocol):
    """A MapDataset stage that says which parent element its element ``index`` came from."""

    def _parent_index(self, index: int) -> Any: ...


@runtime_checkable
class HandsOnParentsElement(Protocol):
    """An iterator whose last element is its parent's last, in position (map, filter)."""

    _last_from_parent: bool


@runtime_checkable
class RemembersLastOrigin(Protocol):
    """An iterator that says where the element it handed out last came from."""

    def _last_origin(self) -> Any: ...


@runtime_checkable
class NumbersElements(Protocol):
    """A random stage that numbers its elements (``random_map``): a worker's copy is renumbered."""

    _ordinals: Any


@runtime_checkable
class GoesByPublicName(Protocol):
    """A source read another way (from an index, a bucket) that checkpoints name as another."""

    _public_name: str


@runtime_checkable
class BatchesRecordsInWorkers(Protocol):
    """A stage that runs its parent in worker processes (``mp_prefetch``): under an error
    budget it is marked, and each worker's share is rebuilt to batch records there."""

    _records_batched: bool


@runtime_checkable
class CountsPerSource(Protocol):
    """A mixing iterator (``IterDataset.mix``): the elements each source gave it since it was
    built or restored, and the weights in force now, both in the sources' order."""

    @property
    def counts(self) -> tuple[int, ...]: ...

    @property
    def weights(self) -> list[float]: ...
