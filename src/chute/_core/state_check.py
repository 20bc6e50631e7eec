"""Checking a saved state whole before ``set_state()`` changes anything.

``set_state()`` of chute's iterators runs in two phases.  First the whole state is
checked: its version, the stage that wrote each part, the keys each stage writes (no
more, no fewer), each value's type and range, and, through the parents' iterators,
every part nested in it.  Only a state that passes is applied.  A refusal is a
``CheckpointError`` naming the stage, the key and its place in the state (as
``state['parent']['next_index']``); the iterator is left as it was.

A stage lists what its part holds in ``_state_fields``: each key it writes with the
check its value must pass (``count``, ``flag``, ``parent_state``, ...; ``optional`` for keys
that older states lack), and adds the rules that tie its keys together in
``_check_part`` (a batch holds fewer elements than its size).  Positions are checked
against what the pipeline can reach: a ``to_iter_dataset`` position against the length
of the MapDataset it reads (its epochs included), a counter against the most elements
its parent can yield (``DatasetIterator._reach``), every count against
``MAX_POSITION``.

A few states pass every check and still do not fit the data: the pulls a batch
recorded, say, that the data no longer holds.  Replaying them raises
``CheckpointError`` part way through the restore, and the iterator is then moved back to
the position it had before the call.  An iterator without ``_state_fields`` (a user's
own) checks its state itself, in its ``set_state``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from chute._core.errors import CheckpointError

__all__ = [
    "CHECKS_FIRST",
    "MAX_POSITION",
    "REACH",
    "by_stage",
    "check_pulls",
    "checking",
    "checks_first",
    "count",
    "fields",
    "flag",
    "flags",
    "is_checked",
    "is_int",
    "is_optional",
    "mark_checked",
    "optional",
    "parent_state",
    "parent_states",
    "parents_reach",
    "pull_numbers",
    "refuse",
    "require",
]

#: No position or count in a state is larger: positions index int64 arrays.
MAX_POSITION = 2**63 - 1
#: Why a counter is bounded by ``parents_reach``, for messages.
REACH = "the most elements its parent yields"

#: ``check(iterator, key, value, where)``: raises ``CheckpointError`` for a bad value.
Check = Callable[[Any, str, Any, str], None]
#: Set on a ``set_state`` that checks first (or runs inside one that does): not wrapped again.
CHECKS_FIRST = "_chute_checks_first"

_CHECKED = threading.local()  # ids of the state parts checked by the restore under way


def checks_first(apply: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """Wraps a stage's ``set_state``: the outermost call checks the whole state, then applies
    (``DatasetIterator._restore``); the parents' ``set_state`` called while it applies skip
    the checks their part passed."""

    @functools.wraps(apply)
    def set_state(self: Any, state: Any) -> None:
        if self._state_fields is None or is_checked(state):
            apply(self, state)
        else:
            self._restore(state, apply)

    setattr(set_state, CHECKS_FIRST, True)
    return set_state


@contextlib.contextmanager
def checking(*, pipeline_changed: bool = False) -> Iterator[None]:
    """A restore is under way in this thread: the parts it checked are not checked again.

    ``pipeline_changed`` (``chute.checkpoint.allow_pipeline_change``): the saved
    positions are taken as they are, so bounds that come from this pipeline's
    lengths are not checked, only types and ``MAX_POSITION``.
    """
    outermost = getattr(_CHECKED, "ids", None) is None
    if outermost:
        _CHECKED.ids, _CHECKED.changed = set(), pipeline_changed
    try:
        yield
    finally:
        if outermost:
            _CHECKED.ids = None
            _CHECKED.changed = False


def mark_checked(part: Any) -> None:
    """``part`` passed every check: its stage's ``set_state`` may apply it as it is."""
    ids = getattr(_CHECKED, "ids", None)
    if ids is not None:
        ids.add(id(part))


def is_checked(part: Any) -> bool:
    """Whether the restore under way already checked ``part`` (the same object)."""
    ids = getattr(_CHECKED, "ids", None)
    return ids is not None and id(part) in ids


def refuse(it: Any, key: str, where: str, expected: str, value: Any) -> CheckpointError:
    """The error for a value that is not what ``it``'s stage writes under ``key``."""
    got = f"{value!r}"
    got = got if len(got) <= 80 else got[:77] + "..."
    return CheckpointError(
        f"{it._stage_name()}.set_state(): {key} must be {expected} (got {got}), at {where}; "
        "pass the state that get_state() returned, unchanged."
    )


def require(it: Any, holds: bool, where: str, rule: str) -> None:
    """Raises ``CheckpointError`` unless a rule across ``it``'s keys ``holds``."""
    if not holds:
        raise CheckpointError(
            f"{it._stage_name()}.set_state(): {rule} (in {where}); no get_state() of this "
            "pipeline writes that. Pass the state that get_state() returned, unchanged."
        )


def is_int(value: Any, most: int = MAX_POSITION) -> bool:
    """Whether ``value`` is an int (not a bool) from 0 to ``most``."""
    return bool(
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and 0 <= value <= most
    )


def count(most: int | Callable[[Any], int | None] | None = None, *, why: str = "") -> Check:
    """An int from 0 to ``most``: a number, or a function of the iterator (None: no bound
    but ``MAX_POSITION``); ``why`` says where the bound comes from.

    A function's bound comes from the pipeline (a length, a batch size): it is not
    checked after ``allow_pipeline_change``.
    """

    def check(it: Any, key: str, value: Any, where: str) -> None:
        if not callable(most):
            high = most
        elif getattr(_CHECKED, "changed", False):  # the saved positions are taken as they are
            high = None
        else:
            high = most(it)
        if high is None or high >= MAX_POSITION:
            high, because = MAX_POSITION, ""
        else:
            because = f" ({why})" if why else ""
        if not is_int(value, high):
            raise refuse(it, key, where, f"an int >= 0 and <= {high}{because}", value)

    return check


def flag(it: Any, key: str, value: Any, where: str) -> None:
    """A bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise refuse(it, key, where, "a bool", value)


def flags(it: Any, key: str, value: Any, where: str) -> None:
    """One bool per parent."""
    if not isinstance(value, list) or len(value) != len(it._parents):
        raise refuse(it, key, where, f"a list of {len(it._parents)} bools", value)
    for k, each in enumerate(value):
        flag(it, f"{key}[{k}]", each, f"{where}[{k}]")


def parent_state(it: Any, key: str, value: Any, where: str) -> None:
    """The part the parent iterator restores from."""
    it._parent._validate_state(value, where)


def parent_states(it: Any, key: str, value: Any, where: str) -> None:
    """One part per parent iterator, in order."""
    parents = it._parents
    if not isinstance(value, list) or len(value) != len(parents):
        raise refuse(it, key, where, f"a list of {len(parents)} parent states", value)
    for k, (parent, part) in enumerate(zip(parents, value)):
        parent._validate_state(part, f"{where}[{k}]")


def pull_numbers(it: Any, key: str, value: Any, where: str) -> None:
    """The numbers of the pulls that raised: distinct ints >= 0, in order."""
    if (
        not isinstance(value, list)
        or not all(is_int(k) for k in value)
        or any(a >= b for a, b in itertools.pairwise(value))
    ):
        raise refuse(it, key, where, "a list of pull numbers (ints >= 0, increasing)", value)


def fields(**checks: Check) -> Mapping[str, Check]:
    """A stage's ``_state_fields``: each key its state holds, with the check of its value."""
    return types.MappingProxyType(checks)


def by_stage(it: Any, key: str, value: Any, where: str) -> None:
    """A value the stage's ``_check_part`` checks, with the keys it goes with."""


def optional(check: Check) -> Check:
    """``check``, for a key that states saved by an older chute lack."""

    def maybe(it: Any, key: str, value: Any, where: str) -> None:
        check(it, key, value, where)

    maybe.optional = True  # type: ignore[attr-defined]
    return maybe


def is_optional(check: Check) -> bool:
    return bool(getattr(check, "optional", False))


def check_pulls(it: Any, state: Mapping[str, Any], where: str, *, kept_most: int | None) -> None:
    """A pull log's rules: the failed pulls are among the pulls, and at most ``kept_most``
    pulls gave an element (None: no bound)."""
    pulls, failed = state["pulls"], state.get("failed") or []
    require(
        it,
        not failed or failed[-1] < pulls,
        where,
        f"failed {failed} names pulls past pulls={pulls}",
    )
    if kept_most is not None:
        kept = pulls - len(failed)
        require(
            it,
            kept <= kept_most,
            where,
            f"pulls={pulls} less {len(failed)} failed leaves {kept} elements held, more than "
            f"the {kept_most} it can hold",
        )


def parents_reach(it: Any) -> int | None:
    """The most elements ``it``'s one parent yields, if known."""
    return it._parent._reach()
