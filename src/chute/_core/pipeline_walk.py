"""``pipeline_nodes``: every node of a pipeline (datasets, or iterators), each once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["parents_of", "pipeline_nodes"]


def parents_of(node: Any) -> tuple[Any, ...]:
    """``node``'s ``_parents``, read from its own attributes: an object that makes up
    attributes on demand (a mock, a proxy) has none."""
    return tuple((getattr(node, "__dict__", None) or {}).get("_parents", ()))


def pipeline_nodes(root: Any) -> Iterator[Any]:
    """Every node of ``root``'s pipeline through ``_parents``, depth first: ``root``, then
    each parent's part in order, each node once where branches meet."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(parents_of(node)))
