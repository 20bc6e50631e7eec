"""``filter`` for both dataset kinds, and the check on how much a filter drops.

A filter that drops nearly everything usually hides a bug.  Over windows of
1,000 consecutive input elements (0-999, 1000-1999, ...), an ``IterDataset``
filter compares the fraction it dropped with the pipeline's ``DatasetOptions``:
at or above ``filter_raise_threshold_ratio`` it raises ``FilterThresholdError``
(a ``ValueError``) from the ``next()`` call that reads on past the window, so
no element is lost and the iterator can go on; at or above
``filter_warn_threshold_ratio`` (0.9 by default) it logs one warning per
iterator.  ``None`` turns a check off; ``0.0`` fires on any drop (Grain
treats ``0.0`` as off).  Windows shorter than 1,000 elements are not checked.
The holes (``None``) a ``MapDataset.filter`` leaves are dropped, and checked
the same way per window of 1,000 indices, by ``to_iter_dataset`` (prefetch.py).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from chute._core import errors
from chute._core.dataset import DatasetIterator, Indices, IterDataset, MapDataset
from chute._core.errors import FilterThresholdError
from chute._core.pipeline_context import join
from chute._core.state_check import REACH, count, fields, parent_state, parents_reach, require
from chute._core.transforms import TRANSFORM_TYPES, Filter, callable_of
from chute._stages._origin import label, locate, locate_last
from chute._stages.capabilities import WrapsFunction

T = TypeVar("T")


logger = logging.getLogger("chute")

#: Inputs per window over which the dropped fraction is checked.
WINDOW = 1000


class FilterMapDataset(MapDataset[T]):
    """Elements where the predicate is false read as ``None``.

    ``to_iter_dataset()`` skips them; ``batch`` refuses to follow a filter
    (batch after ``to_iter_dataset()`` instead).

    >>> [MapDataset.range(4).filter(lambda x: x % 2 == 0)[i] for i in range(4)]
    [0, None, 2, None]
    """

    def __init__(self, parent: MapDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._pred = callable_of(transform, Filter, "MapDataset.filter()")
        self._label = label("filter", transform)

    def __len__(self) -> int:
        return len(self._parent)

    def _getitems(self, indices: Indices) -> list[Any]:
        items = self._parent._getitems(indices)
        pred = self._pred
        out: list[Any] = []
        append = out.append
        try:
            for x in items:
                append(x if x is not None and pred(x) else None)
        except Exception as exc:
            i = int(indices[len(out)])
            errors.annotate(exc, self._label, i, locate(self, i))
            raise
        return out

    def _parent_index(self, index: int) -> tuple[int, int]:
        return 0, index


class FilterIterDataset(IterDataset[T]):
    """Keeps the elements where the predicate is true.

    >>> list(MapDataset.range(6).to_iter_dataset().filter(lambda x: x % 3 == 0))
    [0, 3]
    """

    def __init__(self, parent: IterDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._pred = callable_of(transform, Filter, "IterDataset.filter()")
        self._label = label("filter", transform)
        self._transform = transform

    def __iter__(self) -> DatasetIterator[Any]:
        iterator = _FilterIterator(iter(self._parent), self._pred, self._label)
        transform = self._transform
        iterator._check.grain_name = lambda: (
            f"FilterDatasetIterator(transform={grains_transform_name(transform)})"
        )
        return iterator


class DropCheck:
    """Compares a stage's dropped fraction per window with the pipeline's options.

    Any stage that drops elements can use it: build it with the stage's
    iterator (it joins the pipeline's options) and call ``window_done`` with
    the number dropped each time ``WINDOW`` more inputs were read.
    """

    def __init__(self, iterator: DatasetIterator[Any], label: str) -> None:
        self._context = join(iterator)
        self._label = label
        self._warned = False
        #: The stage as Grain's message names it (built only for a message); else ``label``.
        self.grain_name: Callable[[], str] = lambda: label

    def window_done(self, dropped: int) -> None:
        """Raises or warns if ``dropped`` of the last ``WINDOW`` inputs is too many."""
        if not dropped:
            return
        options = self._context.options
        ratio = dropped / WINDOW
        limit = options.filter_raise_threshold_ratio
        if limit is not None and ratio >= limit:
            raise FilterThresholdError(self._message(ratio, "filter_raise_threshold_ratio", limit))
        limit = options.filter_warn_threshold_ratio
        if limit is not None and ratio >= limit and not self._warned:
            self._warned = True
            logger.warning(
                "%s (warned once per iterator)",
                self._message(ratio, "filter_warn_threshold_ratio", limit),
            )

    def _message(self, ratio: float, field: str, limit: float) -> str:
        """Grain's text (as ``import chute as grain`` reads it), then chute's details."""
        return (
            f"Transformation {self.grain_name()} skipped {ratio * 100:.2f} % of the last seen "
            f"{WINDOW} elements. Please check the filtering logic. If this is intended, "
            "consider pre-filtering the input dataset before training. To disable this check, "
            f"set `grain.experimental.DatasetOptions.{field}` used in `WithOptionsIterDataset` "
            f"to `None`. chute: stage {self._label} dropped {ratio:.2%} of the last {WINDOW} "
            f"elements it read, at or above {field}={limit}; change the threshold with "
            f"chute.experimental.WithOptionsIterDataset(ds, chute.experimental.DatasetOptions("
            f"{field}=...)) (None turns the check off)."
        )


def grains_transform_name(transform: Any) -> str:
    """How Grain names a transform in its messages: ``pred @ .../pkg/mod.py:12``.

    A transform object is named by its class, or by its own ``str()`` where its
    class defines one; a chute transform wrapping a function, and a plain
    callable, by the function's name, file (its last three parts) and line.

    >>> grains_transform_name(len)
    'len'
    """
    fn = transform._fn if isinstance(transform, WrapsFunction) else None
    if isinstance(transform, TRANSFORM_TYPES) and callable(fn) and fn is not transform:
        transform = fn  # Filter(fn): named as Grain names fn
    if isinstance(transform, TRANSFORM_TYPES):
        kind = type(transform)
        own = [m for m in (kind.__str__, kind.__repr__) if not m.__module__.startswith("chute.")]
        return str(transform) if own else kind.__name__
    name = getattr(transform, "__name__", None) or repr(transform)
    try:
        path = inspect.getsourcefile(transform)
        if path is None:
            return name
        parts = path.split("/")
        if len(parts) >= 3:
            path = ".../" + "/".join(parts[-3:])
        return f"{name} @ {path}:{inspect.getsourcelines(transform)[1]}"
    except (OSError, TypeError):  # built-in functions have no source
        return name


class _FilterIterator(DatasetIterator[Any]):
    _stage = "filter"
    _state_fields = fields(
        parent=parent_state,
        index=count(parents_reach, why=REACH),
        dropped=count(WINDOW, why="elements in a window of the drop check"),
    )
    _last_from_parent = True  # the element tested is the parent's last: see _origin.py

    def __init__(self, parent: DatasetIterator[Any], pred: Any, label: str) -> None:
        super().__init__(parent)
        self._pred, self._label = pred, label
        self._index = 0  # inputs read
        self._dropped = 0  # inputs dropped in the current window
        self._check = DropCheck(self, label)

    def __next__(self) -> Any:
        parent, pred = self._parent, self._pred
        index, dropped = self._index, self._dropped  # kept in locals, stored on every exit
        while True:
            if dropped and not index % WINDOW:
                # A window ended: check it before reading on, so that nothing is lost
                # and a state saved here checks it again when restored.
                self._index, self._dropped = index, 0
                self._check.window_done(dropped)
                dropped = 0
            try:
                x = next(parent)
            except BaseException:
                self._index, self._dropped = index, dropped
                raise
            index += 1
            try:
                keep = pred(x)
            except Exception as exc:
                self._index, self._dropped = index, dropped
                errors.annotate(exc, self._label, index - 1, locate_last(self))
                raise
            if keep:
                self._index, self._dropped = index, dropped
                return x
            dropped += 1

    def get_state(self) -> dict[str, Any]:
        return self._state(
            parent=self._parent.get_state(), index=self._index, dropped=self._dropped
        )

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent", "index", "dropped")
        self._parent.set_state(state["parent"])
        self._index = int(state["index"])
        self._dropped = int(state["dropped"])

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        dropped, index = state["dropped"], state["index"]
        require(self, dropped <= index, where, f"{dropped} dropped of {index} read")

    def _reach(self) -> int | None:
        return self._parent._reach()
