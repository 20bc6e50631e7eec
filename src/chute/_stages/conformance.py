"""The checkpoint-conformance check every stage's tests run.

``assert_equal_output_after_checkpoint(ds)`` iterates ``ds`` once, saving the
state before every element, then for every saved state checks that a fresh
iterator restored there yields exactly the rest of the reference output, that
each state survives a JSON round trip, and that the state's shape (its keys)
never changes.  It also restores an already-used iterator, checks that a state
saved at the end restores to the end, and runs the same checks over two epochs
of the dataset, so restores at an epoch's end and into the next are covered.

It is public as ``chute.experimental.assert_equal_output_after_checkpoint``, so
that users can check their own stages the way chute checks its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from chute._core.dataset import IterDataset, MapDataset
from chute._stages.repeat import RepeatIterDataset


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return bool(a == b)


def _shape(state: Any) -> Any:
    if isinstance(state, bytes):
        return _shape(json.loads(state))
    if isinstance(state, dict):
        return {k: _shape(v) for k, v in state.items()}
    return type(state).__name__ if not isinstance(state, (int, float)) else "number"


def _saved(state: Any) -> Any:
    """The state as it comes back from storage (JSON bytes stay bytes)."""
    if isinstance(state, bytes):
        return bytes(state)
    return json.loads(json.dumps(state))


def _run(iterator: Any, limit: int | None) -> tuple[list[Any], list[dict[str, Any]]]:
    values: list[Any] = []
    states = [iterator.get_state()]
    while limit is None or len(values) < limit:
        try:
            values.append(next(iterator))
        except StopIteration:
            break
        states.append(iterator.get_state())
    return values, states


def assert_equal_output_after_checkpoint(
    ds: Iterable[Any],
    *,
    max_steps: int | None = 200,
    restore_points: int | None = None,
    epochs: int = 2,
) -> None:
    """Asserts that restoring ``ds``'s iterator anywhere reproduces its output.

    Args:
      ds: a MapDataset, IterDataset or DataLoader (whose states are JSON bytes).
      max_steps: elements to check (``None``: the whole dataset).
      restore_points: how many saved states to restore from (``None``: all).
      epochs: also check ``RepeatIterDataset(ds, epochs)`` when above 1.

    Raises:
      AssertionError: naming the step where the restored output differs.

    >>> from chute import MapDataset
    >>> assert_equal_output_after_checkpoint(MapDataset.range(6).shuffle(seed=1).batch(4))
    """
    _check(ds, max_steps, restore_points)
    if epochs > 1 and isinstance(ds, (MapDataset, IterDataset)):
        iter_ds: Any = ds.to_iter_dataset() if isinstance(ds, MapDataset) else ds
        steps = None if max_steps is None else max_steps * epochs
        _check(RepeatIterDataset(iter_ds, epochs), steps, restore_points)


def _check(ds: Iterable[Any], max_steps: int | None, restore_points: int | None) -> None:
    it: Any = iter(ds)
    expected, states = _run(it, max_steps)
    shape = _shape(states[0])
    for k, state in enumerate(states):
        if _shape(state) != shape:
            raise AssertionError(f"the state's shape changed at step {k}: {state} vs {states[0]}")
        if _saved(state) != state:
            raise AssertionError(f"the state at step {k} does not survive JSON: {state!r}")
    steps = list(range(len(states)))
    if restore_points is not None and restore_points < len(steps):
        picks = np.linspace(0, len(steps) - 1, restore_points).round().astype(int)
        steps = sorted(set(picks.tolist()))
    for k in steps:
        fresh: Any = iter(ds)
        fresh.set_state(_saved(states[k]))
        got, _ = _run(fresh, None if max_steps is None else max_steps - k)
        if not _equal(got, expected[k:]):
            raise AssertionError(
                f"restored at step {k}, the iterator yields {got[:5]}... but the original "
                f"yielded {expected[k : k + 5]}..."
            )
        close = getattr(fresh, "close", None)
        if close is not None:
            close()
    # Restoring an iterator that has already moved on must work as well.
    middle = len(states) // 2
    it.set_state(states[middle])
    again, _ = _run(it, None if max_steps is None else max_steps - middle)
    if not _equal(again, expected[middle:]):
        raise AssertionError(f"restoring a used iterator at step {middle} changed the output.")
    close = getattr(it, "close", None)
    if close is not None:
        close()
