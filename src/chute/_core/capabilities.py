"""What one part of a pipeline offers another, named as small Protocols.

A stage, source or operation that offers something beyond the base contract
(reading many elements in one call, starting a bucket source's downloads,
building its own stage) says so by having the method; the one that uses it asks
with ``isinstance(obj, Capability)`` instead of probing a private name with
``getattr``.  The members keep their private names: they are chute's own, not
part of the public API of the classes that offer them.

Rewiring has its own methods on the base classes: ``Node.with_parents`` copies a
dataset over new parents, ``Node.parents`` and
``chute._core.pipeline_walk.parents_of`` read them.

Each Protocol lives in the lowest layer that asks for it: here those that
``_core`` asks for or that stages, the loader and the worker machinery all
offer; what only stages ask of one another in ``chute._stages.capabilities``;
what the DataLoader asks of its operations and samplers in
``chute._loader.capabilities``.

``isinstance`` against a Protocol is slower than an attribute read: these checks
run when a pipeline is built, timed or described, never per element.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = [
    "BuildsDatasetStage",
    "CarriesSeedMark",
    "CollectsStatistics",
    "HasParents",
    "IdentifiesData",
    "KeepsSkipRecords",
    "ReportsBufferFill",
]


@runtime_checkable
class HasParents(Protocol):
    """A dataset or an iterator of chute's: it keeps the nodes it reads from."""

    _parents: tuple[Any, ...]


@runtime_checkable
class IdentifiesData(Protocol):
    """A source stage that names the data it reads (files, their versions) for fingerprints."""

    def _data_identity(self) -> str | None: ...


@runtime_checkable
class KeepsSkipRecords(Protocol):
    """An iterator whose error budget keeps the records of the elements it skipped."""

    def _own_skipped(self) -> list[dict[str, Any]]: ...


@runtime_checkable
class BuildsDatasetStage(Protocol):
    """A transform that builds its own stage when ``apply()`` meets it."""

    def _dataset_stage(self, ds: Any) -> Any: ...


@runtime_checkable
class CarriesSeedMark(Protocol):
    """A dataset that may carry a ``.seed()`` mark (``None`` where it has none)."""

    _seed: int | None


@runtime_checkable
class CollectsStatistics(Protocol):
    """An iterator handed to the user (a pipeline's, a DataLoader's) that may carry its
    statistics: ``_chute_stats`` is the collector, or None when statistics are off."""

    _chute_stats: Any


@runtime_checkable
class ReportsBufferFill(Protocol):
    """An iterator with a buffer: ``(elements held, capacity)`` for statistics."""

    def _buffer_fill(self) -> tuple[int, int]: ...
