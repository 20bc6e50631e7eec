"""``WithOptionsIterDataset``: attaches ``DatasetOptions`` to a pipeline.

The options reach every stage of the pipeline, before and after this node,
the pipelines that stages build inside themselves (an interleave's datasets)
and the worker processes of ``mp_prefetch`` (see
``chute._core.pipeline_context``); where several nodes set the same field,
the later node wins.  Without an error budget the node adds no stage of its
own: iterating it gives the parent's iterator, with the parent's state.

With an error budget (chute's ``max_errors``/``max_error_ratio`` fields), the
node skips elements whose processing raised in any stage before it, as
``skip_errors`` does.  A pipeline has one budget per chain: the last node that
sets a budget field enforces it, with the budget fields of the nodes before
it merged under its own, and those nodes pass errors on to it.  Each skipped
element is logged and recorded (its position in this node's input, the stage
that raised and the element index there); the records and the count of
elements tried are part of the iterator's state, so they carry over a resume.
Once the budget is spent, ``ErrorBudgetExceededError`` is raised from the last
error.  chute's own errors (``ChuteError``) are never skipped.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset, MapDataset, as_iter_dataset
from chute._core.dataset_options import ERROR_BUDGET_FIELDS, DatasetOptions, has_error_budget
from chute._core.errors import ChuteError, ErrorBudgetExceededError
from chute._core.pipeline_context import join, options_after
from chute._core.pipeline_walk import parents_of
from chute._core.state_check import by_stage, count, fields, parent_state, refuse
from chute._stages._record_batches import records_batched

logger = logging.getLogger("chute")


#: The keys of a skip record that say where its element came from, and the error's attribute.
_ORIGIN = (
    ("source_index", "chute_source_index"),
    ("file", "chute_source_file"),
    ("record", "chute_source_record"),
    ("offset", "chute_source_offset"),
)


class WithOptionsIterDataset(IterDataset[Any]):
    """``parent`` with ``options`` applied to its whole pipeline.

    Args:
      parent: the pipeline (a MapDataset is read with ``to_iter_dataset()``).
      options: the ``DatasetOptions`` to merge into the pipeline's options.

    >>> from chute import MapDataset
    >>> ds = MapDataset.range(10).to_iter_dataset().map(lambda x: 10 // (x % 4))
    >>> list(WithOptionsIterDataset(ds, DatasetOptions(max_errors=3)))
    [10, 5, 3, 10, 5, 3, 10]
    """

    _stage = "with_options"

    def __init__(self, parent: IterDataset[Any] | MapDataset[Any], options: DatasetOptions) -> None:
        name = type(self).__name__
        parent = as_iter_dataset(parent, name)
        if not isinstance(options, DatasetOptions):
            raise TypeError(
                f"{name} takes chute.experimental.DatasetOptions (got {options!r} that is a "
                f"{type(options).__name__}); build them with DatasetOptions(field=value, ...)."
            )
        super().__init__(parent)
        self._options = options

    @property
    def options(self) -> DatasetOptions:
        """The options this node sets."""
        return self._options

    def __iter__(self) -> DatasetIterator[Any]:
        if not self._options._user_set_fields & ERROR_BUDGET_FIELDS:
            with options_after(self._options):  # stages fixing options when built see them
                parent = iter(self._parent)
            join(parent, self._options)
            return parent
        with options_after(self._options):
            parent = iter(records_batched(self._parent))  # a bad record costs itself only
        budget = _budget_fields(self._options)
        enforcers = _enforcers_upstream(parent)
        for enforcer in enforcers:
            budget = budget.merge(enforcer._budget)
        if not has_error_budget(budget):
            join(parent, self._options)
            return parent
        for enforcer in enforcers:
            enforcer._enforcing = False  # this node covers their stages too
        return _ErrorBudgetIterator(parent, self._options, budget, self._stage)

    def _describe(self) -> str:
        return f"{self._parent!r}, {self._options!r}"


def _budget_fields(options: DatasetOptions) -> DatasetOptions:
    explicit = options._explicit()
    return DatasetOptions(**{k: v for k, v in explicit.items() if k in ERROR_BUDGET_FIELDS})


def _batch_upstream(iterator: DatasetIterator[Any]) -> Any:
    """The batch iterator whose batches reach ``iterator`` whole, if any.

    Its records are what the budget counts as tried.  Only a chain of
    single-parent, element-wise stages may stand between them.
    """
    node: Any = iterator
    while True:
        if hasattr(node, "records_in_last_batch"):
            return node
        parents = parents_of(node)
        if len(parents) != 1 or not (isinstance(node, DatasetIterator) and node._stage == "map"):
            return None
        node = parents[0]


def _enforcers_upstream(iterator: DatasetIterator[Any]) -> list[_ErrorBudgetIterator]:
    """The error budgets still enforced in ``iterator``'s chain, nearest first."""
    found: list[_ErrorBudgetIterator] = []
    queue: collections.deque[Any] = collections.deque([iterator])
    while queue:
        node = queue.popleft()
        if isinstance(node, _ErrorBudgetIterator) and node._enforcing:
            found.append(node)
        queue.extend((getattr(node, "__dict__", None) or {}).get("_parents", ()))
    return found


class _ErrorBudgetIterator(DatasetIterator[Any]):
    """Skips failing elements of the parent while the budget allows."""

    _state_fields = fields(parent=parent_state, tried=count(), skipped=by_stage)

    def __init__(
        self,
        parent: DatasetIterator[Any],
        options: DatasetOptions,
        budget: DatasetOptions,
        stage: str,
    ) -> None:
        super().__init__(parent)
        self._stage = stage
        self._budget = budget
        self._enforcing = True
        self._tried = 0
        self._skipped: list[dict[str, Any]] = []
        self._batches = _batch_upstream(parent)
        join(self, options)

    def _own_skipped(self) -> list[dict[str, Any]]:
        """One record per element this budget skipped: position, stage, index and error."""
        return list(self._skipped)

    def __next__(self) -> Any:
        while True:
            try:
                x = next(self._parent)
            except (StopIteration, ChuteError):
                raise
            except Exception as exc:
                if not self._enforcing:
                    raise
                held = 0 if self._batches is None else self._batches.records_held
                self._tried += 1
                self._record(exc, self._tried - 1 + held)
                continue
            batches = self._batches
            self._tried += 1 if batches is None else batches.records_in_last_batch
            return x

    def _record(self, exc: Exception, position: int) -> None:
        entry = {
            "position": position,
            "stage": getattr(exc, "chute_stage", None),
            "index": getattr(exc, "chute_element_index", None),
            "error": f"{type(exc).__name__}: {exc}"[:200],
        }
        for key, attribute in _ORIGIN:  # where the source knows them, as the error's note
            value = getattr(exc, attribute, None)
            if value is not None:
                entry[key] = value
        self._skipped.append(entry)
        limit = self._over_budget()
        if limit is not None:
            count = len(self._skipped)
            raise ErrorBudgetExceededError(
                f"{count} of {self._tried} elements failed, over the error budget ({limit}). "
                f"Skipped so far: {self._skipped[:5]}{' ...' if count > 5 else ''}. Fix the "
                "failing elements or raise the budget."
            ) from exc
        index, stage = entry["index"], entry["stage"]
        logger.warning(
            "chute: skipped a failing record (%s, position %s in the budget's input): %s; "
            "%s skipped so far.",
            f"element index {index} in stage {stage}" if stage is not None else "stage unknown",
            entry["position"],
            entry["error"],
            len(self._skipped),
        )

    def _over_budget(self) -> str | None:
        """The limit the errors so far go over, or None."""
        count, budget = len(self._skipped), self._budget
        if budget.max_errors is not None and count > budget.max_errors:
            return f"max_errors={budget.max_errors}"
        ratio = budget.max_error_ratio
        if (
            ratio is not None
            and self._tried >= budget.error_min_elements
            and count > ratio * self._tried
        ):
            return f"max_error_ratio={ratio}"
        return None

    def get_state(self) -> dict[str, Any]:
        return self._state(
            parent=self._parent.get_state(), tried=self._tried, skipped=list(self._skipped)
        )

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "tried", "skipped")
        self._parent.set_state(state["parent"])
        self._tried = int(state["tried"])
        self._skipped = [dict(e) for e in state["skipped"]]

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        skipped, tried = state["skipped"], state["tried"]
        if (
            not isinstance(skipped, list)
            or len(skipped) > tried
            or not all(isinstance(e, dict) for e in skipped)
        ):
            expected = f"a list of at most {tried} (tried) dicts, one per skipped record"
            raise refuse(self, "skipped", f"{where}['skipped']", expected, skipped)
