"""Mixture weights that change during a run: on a schedule, or set on the running iterator.

``IterDataset.mix(datasets, weights)`` takes, beside fixed weights, a
``WeightSchedule``: weights that hold from given steps on (a curriculum), or a
function of the step, evaluated every ``every`` steps.  The step is the mix's
own element count, the ``index`` its state already holds, so a resumed run
goes on with the schedule where it was.  ``set_mix_weights(iterator, weights)``
changes the weights of a running mix from its next element on; the change is
in the state, so it holds after a restore.

Fixed weights, a piecewise schedule and live changes: element ``k`` comes from
the source that Grain's pattern (``chute._stages.mix``) picks at position ``k``
for the weights in force at ``k``.  The pattern is deterministic and even in
every stretch of it, so each source's share in any window of a constant stretch
stays at its weight (within 0.1 percentage point over 1,000 elements), and a
change takes effect at once; Grain continues the new weights' pattern from
position ``k`` in the same way when a checkpoint is restored into a mix with
other weights.  Weights that follow a function of the step would make that
pattern pick about as unevenly as chance (1.7 points over 1,000 elements for a
ramp), so such a mix picks by credits instead (``_MixIterator._smooth_turn``):
every source stays within about one element of what its weights so far are
due, and the credits are in the state.  Each source keeps its own iterator, so
no change ever drops or repeats an element.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chute._core.pipeline_walk import pipeline_nodes
from chute._core.validate import check_callable, check_int
from chute._execution.worker import Worker
from chute._stages.mix import _check_weights

__all__ = ["Credits", "WeightSchedule", "set_mix_weights"]

NEVER = math.inf  # the weights hold from here on


class WeightSchedule:
    """Mixture weights as a function of the step (the mix's element count).

    Either ``points``, a mapping of steps to weights, each holding from its
    step until the next (the first step must be 0): a curriculum; or ``fn``,
    ``fn(step) -> weights``, evaluated at step 0 and every ``every`` steps after
    (a smooth change: ``every=1`` follows it exactly, a larger ``every`` costs
    less).  Weights are a list with one positive, finite number per dataset, or
    a ``name -> weight`` mapping for a mix of named datasets.

    Args:
      points: ``{step: weights}``, piecewise constant.
      fn: ``fn(step) -> weights``, instead of ``points``.
      every: how often ``fn`` is evaluated, in steps.

    >>> import chute
    >>> a = chute.MapDataset.range(0, 100).to_iter_dataset()
    >>> b = chute.MapDataset.range(100, 200).to_iter_dataset()
    >>> mixed = chute.IterDataset.mix([a, b], WeightSchedule({0: [1, 1], 4: [1, 3]}))
    >>> list(mixed)[:12]
    [0, 100, 1, 101, 2, 102, 103, 104, 3, 105, 106, 107]
    """

    def __init__(
        self,
        points: Mapping[int, Any] | None = None,
        fn: Callable[[int], Any] | None = None,
        *,
        every: int = 1,
    ) -> None:
        if (points is None) == (fn is None):
            raise TypeError("WeightSchedule takes either points={step: weights} or fn=, not both.")
        self._every = check_int(every, "WeightSchedule: every", minimum=1)
        self._fn = fn
        self._steps: list[int] = []
        self._weights: list[Any] = []
        if fn is not None:
            check_callable(fn, "WeightSchedule: fn")
            return
        if not isinstance(points, Mapping) or not points:
            raise TypeError(
                "WeightSchedule: points must be a non-empty mapping of steps to weights, "
                f"e.g. {{0: [0.8, 0.2], 10_000: [0.5, 0.5]}} (got {points!r})."
            )
        for step in points:
            check_int(step, "WeightSchedule: a step of points", minimum=0)
        self._steps = sorted(int(s) for s in points)
        if self._steps[0] != 0:
            raise ValueError(
                f"WeightSchedule: points must start at step 0 (the first is {self._steps[0]}); "
                "say which weights hold from the start."
            )
        self._weights = [points[s] for s in self._steps]

    @property
    def every(self) -> int:
        """How often a function schedule is evaluated, in steps (1 for points)."""
        return self._every

    def at(self, step: int) -> tuple[Any, float]:
        """The weights in force at ``step``, and the step from which they may change.

        Args:
          step: a mix element's index (the mix's element count before it).

        Returns:
          ``(weights, until)``: the weights as given, and the first step that may
          have others (``math.inf`` when none will).
        """
        if self._fn is not None:
            start = step - step % self._every
            return self._fn(start), start + self._every
        k = bisect.bisect_right(self._steps, step) - 1
        until = self._steps[k + 1] if k + 1 < len(self._steps) else NEVER
        return self._weights[k], until

    def all_points(self) -> list[tuple[int, Any]]:
        """``(step, weights)`` of a piecewise schedule (empty for a function)."""
        return list(zip(self._steps, self._weights))

    def __repr__(self) -> str:
        if self._fn is not None:
            name = getattr(self._fn, "__qualname__", type(self._fn).__name__)
            return f"WeightSchedule(fn={name}, every={self._every})"
        points = ", ".join(f"{s}: {_plain(w)}" for s, w in zip(self._steps, self._weights))
        return f"WeightSchedule({{{points}}})"


class Credits:
    """The turns of a mix whose weights follow a function of the step, by credits.

    Each turn adds each running source's share of the weights in force to its
    credit; the source with the most credit (the first on a tie) takes the turn
    and gives up one, so every source stays within about one element of its due.
    While the weights hold (a stretch of a schedule with ``every``), the turns
    are worked out ahead in one loop (``plan``); the credits at any element are
    the same float operations replayed (``at``), so a state saved anywhere and
    restored works out the very same turns.
    """

    #: The most turns worked out ahead at once.
    AHEAD = 4096

    def __init__(self, count: int) -> None:
        self.reset([0.0] * count, 0)

    def reset(self, credits: list[float], index: int) -> None:
        """The credits before element ``index``; nothing worked out ahead."""
        self._base, self._start = list(credits), index
        self._turns: list[int] = []
        self._shares: list[tuple[int, float]] = []

    def turn(self, index: int) -> int | None:
        """The turn of element ``index`` if it was worked out, else None."""
        offset = index - self._start
        return self._turns[offset] if 0 <= offset < len(self._turns) else None

    def at(self, index: int) -> list[float]:
        """The credits before element ``index`` (at or after the last ``plan``)."""
        credits = list(self._base)
        for turn in self._turns[: index - self._start]:
            for k, share in self._shares:
                credits[k] += share
            credits[turn] -= 1.0
        return credits

    def plan(self, index: int, weights: list[float], running: list[int], length: int) -> int:
        """Works out ``length`` turns from ``index`` for ``weights`` over the ``running``
        sources; returns element ``index``'s."""
        credits = self.at(index)
        total = sum(weights[k] for k in running)
        shares = [(k, weights[k] / total) for k in running]
        turns = []
        for _ in range(max(1, min(length, self.AHEAD))):
            for k, share in shares:
                credits[k] += share
            best = running[0]
            for k in running[1:]:
                if credits[k] > credits[best]:
                    best = k
            credits[best] -= 1.0
            turns.append(best)
        self._base, self._start = self.at(index), index
        self._turns, self._shares = turns, shares
        return turns[0]


def _plain(weights: Any) -> Any:
    if isinstance(weights, Mapping):
        return {str(k): float(v) for k, v in weights.items()}
    return [float(w) for w in weights]


def ordered_weights(weights: Any, keys: Sequence[str] | None, n: int, where: str) -> list[float]:
    """Checked weights in the datasets' order (a mapping is paired by name)."""
    if isinstance(weights, Mapping):
        if keys is None:
            raise TypeError(f"{where}: weights can be a mapping only when datasets is one too.")
        names = {str(k): v for k, v in weights.items()}
        if set(names) != set(keys):
            unknown = sorted(set(names) - set(keys))
            missing = sorted(set(keys) - set(names))
            raise ValueError(
                f"{where}: the weights name {unknown or 'no'} unknown dataset(s) and leave out "
                f"{missing or 'none'}; the datasets are {list(keys)}."
            )
        weights = [names[k] for k in keys]
    return _check_weights(weights, n, where)


def set_mix_weights(iterator: Any, weights: Any) -> None:
    """Changes the weights of the running mix in ``iterator``, from its next element on.

    The new weights replace fixed weights and any schedule; they are part of
    the iterator's state, so a restored run goes on with them.  ``None`` goes
    back to the mix's own weights or schedule.

    Args:
      iterator: an iterator of a pipeline with one ``IterDataset.mix`` running in this
        process (not in worker processes: give such a mix a ``WeightSchedule``).
      weights: one positive, finite weight per dataset (a mapping for named ones), or None.

    Raises:
      ValueError: bad weights, or no mix (or more than one) runs in this process.
    """
    nodes = list(pipeline_nodes(iterator))
    mixes = [n for n in nodes if callable(getattr(n, "set_weights", None))]
    if not mixes and any(isinstance(n, Worker) for n in nodes):
        raise ValueError(
            "set_mix_weights(): the iterator's mix runs in worker processes, where weights "
            "change by a WeightSchedule only (a part of the pipeline each worker runs)."
        )
    if len(mixes) != 1:
        advice = "call it on one mix's own iterator" if mixes else "build it with IterDataset.mix"
        raise ValueError(
            f"set_mix_weights(): the iterator runs {len(mixes)} mix stages in this process; "
            f"{advice}."
        )
    mixes[0].set_weights(weights)
