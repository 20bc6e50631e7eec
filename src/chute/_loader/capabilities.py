"""What the DataLoader asks of its operations and samplers, as small Protocols.

The idea and the rules are ``chute._core.capabilities``'s: the loader asks with
``isinstance``; the members keep their private names.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ActsOnRecords",
    "AllowsPipelineChange",
    "BuildsLoaderStage",
    "DescribesItselfToGrain",
    "KnowsRecordKeys",
]


@runtime_checkable
class AllowsPipelineChange(Protocol):
    """An iterator that takes a state saved by a changed pipeline (a DataLoader's iterator
    gets the flag from ``chute.checkpoint.allow_pipeline_change()``)."""

    _allow_pipeline_change: bool


@runtime_checkable
class DescribesItselfToGrain(Protocol):
    """A source or sampler whose description in a Grain checkpoint differs from its repr."""

    def _grain_repr(self) -> str: ...


@runtime_checkable
class KnowsRecordKeys(Protocol):
    """A sampler that hands out record keys of its own (not the positions it deals)."""

    _record_keys: Any


@runtime_checkable
class BuildsLoaderStage(Protocol):
    """A DataLoader operation that builds its own stage of the loader's pipeline."""

    def _loader_stage(self, ds: Any) -> Any: ...


@runtime_checkable
class ActsOnRecords(Protocol):
    """A DataLoader operation that rewrites itself to act on ``Record``s."""

    def _on_records(self) -> Any: ...
