"""The options shared by the iterators of one pipeline.

Options set anywhere in a pipeline apply to all of its stages, before and
after the node that sets them.  Iterators are built from the source outwards,
so a stage cannot see the nodes built after it; instead, the iterators that
care about options share one mutable ``PipelineContext``:

* a stage that reads options (a filter, say) calls ``join(iterator)`` when its
  iterator is built: it adopts the context found upstream, or starts one;
* ``WithOptionsIterDataset`` calls ``join(iterator, options)``, which merges
  its options into that same context, over those set before (later wins).

Stages read ``context.options`` when they need it (not per element), so they
see options attached after them.  Two branches with contexts of their own
(under a zip or a mix) are merged into one when a node after them joins;
the first branch's explicit fields win; an iterator with several parents
(a zip, a mix) joins them as it is built.  Iterators that live in other
processes (``mp_prefetch`` workers) are not reached: attach options before
``mp_prefetch`` to reach the stages it runs.
"""

from __future__ import annotations

import collections
from typing import Any

from chute._core.dataset_options import DatasetOptions

_ATTRIBUTE = "_chute_pipeline_context"


class PipelineContext:
    """Options shared by the iterators of one pipeline (see the module docstring)."""

    __slots__ = ("_merged_into", "_options")

    def __init__(self, options: DatasetOptions | None = None) -> None:
        self._options = options if options is not None else DatasetOptions()
        self._merged_into: PipelineContext | None = None

    def resolve(self) -> PipelineContext:
        """The context this one was merged into (itself if it was not)."""
        ctx = self
        while ctx._merged_into is not None:
            ctx = ctx._merged_into
        return ctx

    @property
    def options(self) -> DatasetOptions:
        """The pipeline's options, merged from every node that set some."""
        return self.resolve()._options

    def __repr__(self) -> str:
        return f"PipelineContext({self.options!r})"


def _instance_dict(node: Any) -> dict[str, Any]:
    # The instance dict only: never trigger a __getattr__ of a proxy iterator.
    return getattr(node, "__dict__", None) or {}


def _contexts_upstream(iterator: Any) -> list[PipelineContext]:
    """The distinct contexts of ``iterator`` and its ancestors, nearest first.

    A node that holds a context speaks for everything above it, so the walk
    does not go past it.
    """
    found: list[PipelineContext] = []
    seen: set[int] = set()
    queue = collections.deque([iterator])
    while queue:
        node = queue.popleft()
        if id(node) in seen:
            continue
        seen.add(id(node))
        attributes = _instance_dict(node)
        ctx = attributes.get(_ATTRIBUTE)
        if ctx is not None:
            ctx = ctx.resolve()
            if all(ctx is not other for other in found):
                found.append(ctx)
            continue
        queue.extend(attributes.get("_parents", ()))
    return found


def join(iterator: Any, options: DatasetOptions | None = None) -> PipelineContext:
    """Gives ``iterator`` the context of its pipeline, merging ``options`` into it.

    Args:
      iterator: a freshly built iterator; its ancestors are searched for a
        context to share.
      options: options set at this point of the pipeline; they win over the
        options set before (upstream) and lose to those set after.

    Returns:
      The shared context; read ``.options`` from it when the options matter.

    >>> from chute import MapDataset
    >>> it = iter(MapDataset.range(3).to_iter_dataset())
    >>> first = join(it, DatasetOptions(min_shm_size=1))
    >>> join(it, DatasetOptions(min_shm_size=2)).options.min_shm_size
    2
    """
    contexts = _contexts_upstream(iterator)
    if not contexts:
        ctx = PipelineContext()
    else:
        ctx = contexts[0]
        for other in contexts[1:]:
            ctx._options = ctx._options.merge(other._options)
            other._merged_into = ctx
    if options is not None:
        ctx._options = options.merge(ctx._options)
    try:
        setattr(iterator, _ATTRIBUTE, ctx)
    except AttributeError:  # an iterator with __slots__: it simply does not pass options on
        pass
    return ctx
