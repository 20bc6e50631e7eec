"""An error budget: skip elements whose processing raised, up to a limit.

chute's own addition (Grain has no equivalent).  Wrap the part of a pipeline
whose failures you are willing to drop::

    ds = chute.MapDataset.source(records).map(decode).to_iter_dataset()
    ds = chute.experimental.skip_errors(ds, max_errors=100).batch(32)

Each skipped element is logged and recorded (its position in this stage's
input, the stage that raised and the element index there); the records are
part of the iterator's state, so the count carries over a resume.  Once the
budget is spent, ``ErrorBudgetExceededError`` is raised from the last error.
"""

from __future__ import annotations

import logging
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.errors import ChuteError, ErrorBudgetExceededError
from chute._core.validate import check_int

logger = logging.getLogger("chute")


class ErrorBudgetIterDataset(IterDataset[Any]):
    """Skips failing elements of ``parent`` within a budget.

    Args:
      parent: the dataset to protect (a MapDataset is read with
        ``to_iter_dataset()``).
      max_errors: how many failing elements may be skipped in total.
      max_error_ratio: the largest fraction of failed elements among those
        tried so far; checked once ``min_elements`` were tried.
      min_elements: elements to try before the ratio is checked.
    """

    def __init__(
        self,
        parent: IterDataset[Any] | MapDataset[Any],
        *,
        max_errors: int | None = None,
        max_error_ratio: float | None = None,
        min_elements: int = 100,
    ) -> None:
        if isinstance(parent, MapDataset):
            parent = parent.to_iter_dataset()
        super().__init__(parent)
        if max_errors is None and max_error_ratio is None:
            raise ValueError(
                "ErrorBudgetIterDataset needs a budget: pass max_errors=N and/or "
                "max_error_ratio=r (e.g. max_errors=10)."
            )
        if max_errors is not None:
            check_int(max_errors, "ErrorBudgetIterDataset: max_errors", minimum=0)
        if max_error_ratio is not None and not (
            isinstance(max_error_ratio, (int, float)) and 0.0 <= max_error_ratio <= 1.0
        ):
            raise ValueError(
                "ErrorBudgetIterDataset: max_error_ratio must be in [0, 1] "
                f"(got {max_error_ratio!r})."
            )
        check_int(min_elements, "ErrorBudgetIterDataset: min_elements", minimum=1)
        self._max_errors, self._max_ratio, self._min_elements = (
            max_errors,
            max_error_ratio,
            min_elements,
        )

    def __iter__(self) -> DatasetIterator[Any]:
        return _ErrorBudgetIterator(
            iter(self._parent), self._max_errors, self._max_ratio, self._min_elements
        )


def skip_errors(
    ds: IterDataset[Any] | MapDataset[Any],
    *,
    max_errors: int | None = None,
    max_error_ratio: float | None = None,
    min_elements: int = 100,
) -> ErrorBudgetIterDataset:
    """``ErrorBudgetIterDataset(ds, ...)``, handy with ``ds.pipe(skip_errors, ...)``."""
    return ErrorBudgetIterDataset(
        ds, max_errors=max_errors, max_error_ratio=max_error_ratio, min_elements=min_elements
    )


class _ErrorBudgetIterator(DatasetIterator[Any]):
    _stage = "error_budget"

    def __init__(
        self,
        parent: DatasetIterator[Any],
        max_errors: int | None,
        max_ratio: float | None,
        min_elements: int,
    ) -> None:
        super().__init__(parent)
        self._max_errors, self._max_ratio, self._min_elements = max_errors, max_ratio, min_elements
        self._tried = 0
        self._skipped: list[dict[str, Any]] = []

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """One record per skipped element: position, stage, index and error."""
        return list(self._skipped)

    def __next__(self) -> Any:
        while True:
            try:
                x = next(self._parent)
            except (StopIteration, ChuteError):
                raise
            except Exception as exc:
                self._tried += 1
                self._record(exc)
                continue
            self._tried += 1
            return x

    def _record(self, exc: Exception) -> None:
        entry = {
            "position": self._tried - 1,
            "stage": getattr(exc, "chute_stage", None),
            "index": getattr(exc, "chute_element_index", None),
            "error": f"{type(exc).__name__}: {exc}"[:200],
        }
        self._skipped.append(entry)
        errors = len(self._skipped)
        over_count = self._max_errors is not None and errors > self._max_errors
        over_ratio = (
            self._max_ratio is not None
            and self._tried >= self._min_elements
            and errors > self._max_ratio * self._tried
        )
        if over_count or over_ratio:
            limit = (
                f"max_errors={self._max_errors}"
                if over_count
                else f"max_error_ratio={self._max_ratio}"
            )
            raise ErrorBudgetExceededError(
                f"{errors} of {self._tried} elements failed, over the error budget ({limit}). "
                f"Skipped so far: {self._skipped[:5]}{' ...' if errors > 5 else ''}. Fix the "
                "failing elements or raise the budget."
            ) from exc
        logger.warning(
            "chute: skipped a failing element (%s of the budget used): %s", errors, entry
        )

    def get_state(self) -> dict[str, Any]:
        return self._state(
            parent=self._parent.get_state(), tried=self._tried, skipped=list(self._skipped)
        )

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "tried", "skipped")
        self._parent.set_state(state["parent"])
        self._tried = int(state["tried"])
        self._skipped = [dict(e) for e in state["skipped"]]
