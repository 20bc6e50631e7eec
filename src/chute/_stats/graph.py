"""A pipeline's stages in pipeline order: the shape that the summary and the picture share.

``stage_graph(ds)`` walks a dataset's parents depth first and lists every
stage once, sources first and the dataset itself last; each ``StageNode``
names its parents by their index in that list.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from chute._core.node import Node
from chute._stages.batch import BatchIterDataset, BatchMapDataset
from chute._stages.source_block import INTERNAL  # the mark of the nodes chute makes for workers
from chute._stages.source_dataset import SourceMapDataset

__all__ = ["StageNode", "post_order", "retries_of", "spec_text", "stage_graph", "stage_label"]

_SUFFIX = re.compile(r"(Map|Iter)?Dataset$")


@dataclasses.dataclass(frozen=True)
class StageNode:
    """One stage of a pipeline.

    Args:
      index: its place in pipeline order (sources first).
      name: the call that built it, e.g. ``map(decode)``, or its kind.
      kind: the dataset class, e.g. ``MapMapDataset``.
      parents: the indices of the stages it reads from.
      spec: its element spec as text (``'?'`` where it cannot be told unread).
      internal: a node chute made itself (a worker's slice of the pipeline), which the
        statistics leave out of what they show.
    """

    index: int
    name: str
    kind: str
    parents: tuple[int, ...]
    spec: str = "?"
    internal: bool = False


def stage_label(ds: Any) -> str:
    """``map(decode)``, ``shuffle(seed=42)``; for a stage without one, its kind (``range``)."""
    step = ds._repr_step() if isinstance(ds, Node) else ""
    if step:
        return str(step)
    named = _NAMED.get(type(ds).__name__)
    if named is not None:
        return named(ds)
    kind = _SUFFIX.sub("", type(ds).__name__) or type(ds).__name__
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def _batch(ds: Any) -> str:
    size = ds._batch_size if isinstance(ds, (BatchMapDataset, BatchIterDataset)) else "?"
    return f"batch({size})"


def _workers(ds: Any) -> str:
    from chute._stages.mp_prefetch import MultiprocessPrefetchIterDataset

    if not isinstance(ds, MultiprocessPrefetchIterDataset):
        return "mp_prefetch(? workers)"
    count = ds._options.num_workers
    ray = " Ray" if ds._executor is not None else ""
    return f"mp_prefetch({count}{ray} workers)"


#: Labels for stages whose dataset keeps no ``_label`` of its own.
_NAMED: dict[str, Any] = {
    "BatchMapDataset": _batch,
    "BatchIterDataset": _batch,
    "PrefetchIterDataset": lambda ds: "to_iter_dataset",
    "MultiprocessPrefetchIterDataset": _workers,
}


def retries_of(ds: Any) -> int | None:
    """How many requests the stage's data source retried, if it reads an object store.

    A source that counts its retries has an int ``retries`` (``None``: it reads local
    files); a source stage sliced by ``set_slice`` keeps the original source.
    """
    if not isinstance(ds, SourceMapDataset):
        return None
    source = ds.__dict__.get("_original_source", ds._source)
    count = getattr(source, "retries", None)
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def spec_text(ds: Any) -> str:
    """The stage's element spec as one line, or ``'?'``."""
    from chute._stages.element_spec import get_element_spec

    try:
        spec = get_element_spec(ds)
    except Exception:  # a spec that cannot be told without reading: not an error here
        return "?"
    return " ".join(repr(spec).split())


def post_order(ds: Any) -> list[Any]:
    """The datasets of ``ds``'s graph once each, every one after its parents, ``ds`` last."""
    out: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(ds, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if not expanded:
            stack.append((node, True))
            stack.extend((p, False) for p in reversed(_parents(node)))
            continue
        seen.add(id(node))
        out.append(node)
    return out


def _parents(node: Any) -> list[Any]:
    return [p for p in getattr(node, "parents", ()) if hasattr(p, "parents")]


def stage_graph(ds: Any, *, specs: bool = True) -> list[StageNode]:
    """The stages of ``ds`` in pipeline order (sources first, ``ds`` last).

    >>> from chute import MapDataset
    >>> [n.name for n in stage_graph(MapDataset.range(4).map(str).batch(2), specs=False)]
    ['range', 'map(str)', 'batch(2)']
    """
    order = post_order(ds)
    index_of = {id(node): i for i, node in enumerate(order)}
    return [
        StageNode(
            index=i,
            name=stage_label(node),
            kind=type(node).__name__,
            parents=tuple(index_of[id(p)] for p in _parents(node)),
            spec=spec_text(node) if specs else "?",
            internal=bool(getattr(node, "__dict__", {}).get(INTERNAL)),
        )
        for i, node in enumerate(order)
    ]
