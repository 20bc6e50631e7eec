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
ramp), so such a mix gives the turns by due dates instead (``Credits``): every
source stays within about one element of what its weights so far are due, and
the credits are in the state.  Each source keeps its own iterator, so
no change ever drops or repeats an element.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

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
    """The turns of a mix whose weights follow a function of the step, by due dates.

    Over a stretch where the weights hold, each running source ``k`` has a share
    ``s_k`` of them and a credit ``d_k`` carried in from before; its ``m``-th turn
    of the stretch falls due at ``(m - d_k) / s_k`` turns from the stretch's start,
    and the turns go to the sources in the order they fall due (the lower source
    on a tie).  So every source stays within about one element of its due, in
    every window.  The turns of a stretch are worked out at its start (``plan``),
    in numpy when it is long; a state holds the credits at the stretch's start
    and where it started, so a restore works the same stretch out again and goes
    on with the very same turns.
    """

    #: The most turns worked out at once.
    AHEAD = 4096
    #: Shorter stretches are worked out in plain Python (the same arithmetic).
    _NUMPY_FROM = 512

    def __init__(self, count: int) -> None:
        self.reset([0.0] * count, 0)

    def reset(self, credits: list[float], start: int) -> None:
        """The credits at element ``start``, where the next stretch starts."""
        self.base, self.start = [float(c) for c in credits], int(start)
        self.turns: list[int] = []  # of the stretch from ``start``, as worked out
        self._shares: dict[int, float] = {}

    @property
    def planned(self) -> bool:
        """Whether the stretch from ``start`` was worked out."""
        return bool(self.turns)

    def turn(self, index: int) -> int | None:
        """The turn of element ``index`` if its stretch was worked out, else None."""
        offset = index - self.start
        return self.turns[offset] if 0 <= offset < len(self.turns) else None

    def at(self, index: int) -> list[float]:
        """The credits at element ``index`` of the stretch worked out (or at its start)."""
        taken = self.turns[: index - self.start]
        credits = list(self.base)
        for k, share in self._shares.items():
            credits[k] = self.base[k] + len(taken) * share - taken.count(k)
        return credits

    def cut(self, index: int) -> None:
        """A new stretch starts at ``index`` (the weights or the running sources changed)."""
        self.reset(self.at(index), index)

    def plan(self, weights: list[float], running: list[int], length: int) -> None:
        """Works out ``length`` turns from ``start`` for ``weights`` over ``running``."""
        total = sum(weights[k] for k in running)
        self._shares = {k: weights[k] / total for k in running}
        length = max(1, min(length, self.AHEAD))
        if length == 1:  # weights that change every step: the earliest first due date
            _, first = min(((1 - self.base[k]) / share, k) for k, share in self._shares.items())
            self.turns = [first]
            return
        due: list[tuple[float, int]] = []
        if length < self._NUMPY_FROM:
            for k, share in self._shares.items():
                last = math.ceil(length * share + self.base[k]) + 2
                due += [((m - self.base[k]) / share, k) for m in range(1, last)]
            due.sort()
            self.turns = [k for _, k in due[:length]]
            return
        times, owners = [], []
        for k, share in self._shares.items():
            m = np.arange(1, math.ceil(length * share + self.base[k]) + 2, dtype=np.int64)
            times.append((m - self.base[k]) / share)
            owners.append(np.full(len(m), k, dtype=np.int64))
        when, who = np.concatenate(times), np.concatenate(owners)
        order = np.lexsort((who, when))[:length]
        self.turns = who[order].tolist()


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
