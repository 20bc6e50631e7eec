"""What an iterator chain says of itself without its states: the stages down its first
parents (for ``repr``), and the records its error budgets skipped."""

from __future__ import annotations

from typing import Any

from chute._core.capabilities import KeepsSkipRecords
from chute._core.pipeline_walk import parents_of, pipeline_nodes

__all__ = ["describe_chain", "skipped_records"]


def describe_chain(it: Any, depth: int = 4) -> str:
    """``batch <- map(f) at element 12 <- ...``: stage labels down the first parents.

    The first stage that counts its elements anyway says where it is.  Cheap:
    reads a few attributes of at most ``depth`` iterators, never a state.
    """
    steps: list[str] = []
    located = False
    while it is not None and len(steps) < depth:
        step = it._label or it._stage_name()
        position = None if located else it._repr_position()
        located = located or position is not None
        steps.append(step if position is None else f"{step} at element {position}")
        it = it._parents[0] if it._parents else None
    return " <- ".join(steps) + (" <- ..." if it is not None else "")


_BUDGET_STAGES = ("error_budget", "with_options")


def skipped_records(iterator: Any) -> list[dict[str, Any]]:
    """The skip records of the error budgets in ``iterator``'s pipeline.

    In-process budgets are found among the iterator's ancestors; those in
    worker processes (``mp_prefetch``), in the states the workers last sent.
    """
    found: list[dict[str, Any]] = []
    for node in pipeline_nodes(iterator):
        if isinstance(node, KeepsSkipRecords):
            found.extend(node._own_skipped())
        if not parents_of(node) and callable(getattr(node, "get_state", None)):
            _skipped_in_state(node.get_state(), found)
    return found


def _skipped_in_state(state: Any, found: list[dict[str, Any]]) -> None:
    if isinstance(state, dict):
        if state.get("stage") in _BUDGET_STAGES and isinstance(state.get("skipped"), list):
            found.extend(dict(e) for e in state["skipped"])
            return
        for value in state.values():
            _skipped_in_state(value, found)
    elif isinstance(state, list):
        for value in state:
            _skipped_in_state(value, found)
