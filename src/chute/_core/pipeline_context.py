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
(a zip, a mix) joins them as it is built.

A stage that builds pipelines inside itself (an interleave opening its
datasets, a mix restarting one, ``ElasticIterator``) builds their iterators
with ``iter_inside(context, dataset)``: the inner pipeline's context then
reads the stage's options over its own (the stage's win, as in Grain), live,
so options attached after the stage reach it.  Options attached after a node
are also known while ``WithOptionsIterDataset`` builds its parent
(``options_after``): ``join`` merges them in at once, so a stage that must
fix its options when it is built (``mp_prefetch`` hands them to its worker
processes) sees them too.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import copy
from collections.abc import Iterable, Iterator
from typing import Any

from chute._core.dataset_options import ERROR_BUDGET_FIELDS, DatasetOptions
from chute._core.pipeline_walk import pipeline_nodes

_ATTRIBUTE = "_chute_pipeline_context"

# The options set after the node whose parent is being built, on this thread (see
# ``options_after``); None outside such a build.
_AFTER: contextvars.ContextVar[DatasetOptions | None] = contextvars.ContextVar(
    "chute_options_after", default=None
)


class PipelineContext:
    """Options shared by the iterators of one pipeline (see the module docstring)."""

    __slots__ = ("_merged_into", "_options", "_outer")

    def __init__(self, options: DatasetOptions | None = None) -> None:
        self._options = options if options is not None else DatasetOptions()
        self._merged_into: PipelineContext | None = None
        # The context of the stage that built this pipeline inside itself (iter_inside).
        self._outer: PipelineContext | None = None

    def resolve(self) -> PipelineContext:
        """The context this one was merged into (itself if it was not)."""
        ctx = self
        while ctx._merged_into is not None:
            ctx = ctx._merged_into
        return ctx

    @property
    def options(self) -> DatasetOptions:
        """The pipeline's options, merged from every node that set some.

        In a pipeline built inside a stage (``iter_inside``), the options of the
        stage's pipeline win over those set inside.
        """
        ctx = self.resolve()
        outer = None if ctx._outer is None else ctx._outer.resolve()
        if outer is None or outer is ctx:
            return ctx._options
        return outer.options.merge(ctx._options)

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
            if ctx._outer is None:
                ctx._outer = other._outer
    if options is not None:
        ctx._options = options.merge(ctx._options)
    after = _AFTER.get()
    if after is not None:  # built inside a WithOptionsIterDataset: its options come later
        ctx._options = after.merge(ctx._options)
    try:
        setattr(iterator, _ATTRIBUTE, ctx)
    except AttributeError:  # an iterator with __slots__: it simply does not pass options on
        pass
    return ctx


@contextlib.contextmanager
def options_after(options: DatasetOptions | None) -> Iterator[None]:
    """While inside, iterators built on this thread know ``options`` (set after them).

    ``WithOptionsIterDataset`` builds its parent's iterator inside, so that
    ``join`` merges its options in at once; it joins them again afterwards.
    Nested uses merge, the outer (later) options winning.

    Args:
      options: the options set after the iterators about to be built; None: none.
    """
    if options is None:
        yield
        return
    outer = _AFTER.get()
    token = _AFTER.set(options if outer is None else outer.merge(options))
    try:
        yield
    finally:
        _AFTER.reset(token)


def iter_inside(owner: PipelineContext, dataset: Iterable[Any]) -> Any:
    """``iter(dataset)`` for a pipeline that a stage builds inside itself.

    The inner pipeline reads the options of ``owner`` (the stage's context)
    over its own, as they are now and as later nodes set them.  Every stage
    that builds iterators after its own iterator was built, or on other
    threads, builds them this way.

    Args:
      owner: the context of the stage's iterator (``join(stage_iterator)``).
      dataset: the inner pipeline.

    Returns:
      The inner pipeline's iterator.

    >>> from chute import MapDataset
    >>> owner = PipelineContext(DatasetOptions(filter_raise_threshold_ratio=0.5))
    >>> inner = iter_inside(owner, MapDataset.range(3).to_iter_dataset())
    >>> join(inner).options.filter_raise_threshold_ratio
    0.5
    """
    with options_after(owner.options):
        iterator: Any = iter(dataset)
    ctx = join(iterator)
    if ctx.resolve() is not owner.resolve():
        ctx.resolve()._outer = owner
    return iterator


def options_set_in(dataset: Any) -> DatasetOptions:
    """The ``DatasetOptions`` that the nodes of ``dataset``'s pipeline set, merged.

    A node nearer the output wins; where branches meet, the first branch's.
    The error budget's fields are left out: a budget is enforced where its
    node stands.  ``mp_prefetch`` passes these (with those set after it) to
    its worker processes and to the stages after it, as Grain does.

    Args:
      dataset: a dataset node.

    Returns:
      The merged options (no field set when no node sets any).
    """
    merged = DatasetOptions()
    for node in pipeline_nodes(dataset):
        options = _instance_dict(node).get("_options")
        if isinstance(options, DatasetOptions):
            merged = merged.merge(options)
    return without_budget(merged)


def without_budget(options: DatasetOptions) -> DatasetOptions:
    """``options`` without the error budget's fields (chute's own)."""
    explicit = options._explicit()
    return DatasetOptions(**{k: v for k, v in explicit.items() if k not in ERROR_BUDGET_FIELDS})


_CARRIED = "_chute_carried_options"


def carrying(dataset: Any, options: DatasetOptions) -> Any:
    """A copy of the node ``dataset`` whose iterators run under ``options``.

    The pipeline a worker process runs carries the options of the pipeline
    around it this way, without a node of its own: its outermost ``iter()``
    (``chute._core.iterator``) builds it inside ``options_after(options)``
    and joins them, as a ``WithOptionsIterDataset`` above it would.

    Args:
      dataset: the top node of the pipeline (left unchanged).
      options: the options to run it under.

    Returns:
      A shallow copy of the node, or ``dataset`` itself when no option is set.
    """
    if not options._explicit():
        return dataset
    copied = copy.copy(dataset)
    setattr(copied, _CARRIED, options)
    return copied


def carried(dataset: Any) -> DatasetOptions | None:
    """The options ``carrying`` gave the node ``dataset``, or None."""
    return _instance_dict(dataset).get(_CARRIED)
