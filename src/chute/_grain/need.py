"""The one check every Grain-state translation starts with: does the state have its keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chute._core.errors import CheckpointError


def need(g: Any, it: Any, *keys: str) -> Mapping[str, Any]:
    """``g`` if it is a Grain state with ``keys`` for stage ``it``, else CheckpointError."""
    if isinstance(g, Mapping) and all(k in g for k in keys):
        return g
    found = sorted(g) if isinstance(g, Mapping) else type(g).__name__
    raise CheckpointError(
        f"Grain state {short(g)} does not fit chute's {it._stage_name()} stage, which "
        f"reads Grain's {list(keys)} (the state holds {found}). The checkpoint was saved "
        "by a different pipeline: build the same stages Grain ran, in the same order."
    )


def short(g: Any) -> str:
    """``repr(g)``, cut to 120 characters for messages."""
    text = repr(g)
    return text if len(text) <= 120 else text[:117] + "..."
