"""``IterDataset.mix``: interleaves iterable datasets in Grain's mix order.

The order of turns is the one ``MapDataset.mix`` uses (``chute._stages.mix``);
the mix stops at the first turn whose dataset has run out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from chute._core import metrics
from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.errors import CheckpointError
from chute._core.pipeline_context import iter_inside, join
from chute._core.state_check import count, fields, flag, optional, refuse
from chute._stages.mix import _check_parents, _check_weights, _proportions, _select
from chute._stages.mix_weights import NEVER, Credits, WeightSchedule, ordered_weights

_BLOCK = 512  # turns an iterator works out at a time


def _iter_inputs(datasets: Any, weights: Any, where: str) -> tuple[list[str] | None, Any, Any]:
    """(state keys or None, parents, weights in parent order) for ``IterDataset.mix``."""
    if not isinstance(datasets, Mapping):
        if isinstance(weights, Mapping):
            raise TypeError(f"{where}: weights can be a mapping only when datasets is one too.")
        return None, _check_parents(datasets, (IterDataset, MapDataset), where), weights
    if not datasets:
        raise ValueError(f"{where} needs at least one dataset (got an empty mapping).")
    keys = [str(key) for key in datasets]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{where}: dataset names must differ as strings (got {list(datasets)}).")
    if isinstance(weights, Mapping) and not isinstance(weights, WeightSchedule):
        if set(weights) != set(datasets):
            raise ValueError(
                f"{where}: weights must have the same keys as datasets "
                f"(datasets: {sorted(keys)}, weights: {sorted(map(str, weights))})."
            )
        weights = [weights[key] for key in datasets]
    parents = _check_parents(list(datasets.values()), (IterDataset, MapDataset), where)
    return keys, parents, weights


class MixedIterDataset(IterDataset[Any]):
    """Interleaves iterable datasets in Grain's mix order; stops when one runs out.

    ``datasets`` may be a list or a ``name -> dataset`` mapping; with a mapping,
    ``weights`` may be a mapping with the same names, and a checkpoint restores
    each dataset by name (one missing from it starts from its beginning).  Named
    weights are paired with datasets by name; Grain pairs them by position, so
    the two differ only when the two mappings list their names in other orders.

    >>> a = MapDataset.range(5).to_iter_dataset()
    >>> b = MapDataset.range(10, 13).to_iter_dataset()
    >>> list(IterDataset.mix([a, b]))
    [0, 10, 1, 11, 2, 12, 3]
    """

    def __init__(self, datasets: Any, weights: Any = None, *, on_exhausted: str = "stop") -> None:
        where = "IterDataset.mix()"
        if on_exhausted not in ("stop", "continue"):
            raise ValueError(
                f"{where}: on_exhausted must be 'stop' (end the mix with the first dataset that "
                f"runs out, as Grain) or 'continue' (go on with the others); got {on_exhausted!r}."
            )
        self._go_on = on_exhausted == "continue"
        if callable(weights) and not isinstance(weights, WeightSchedule):
            weights = WeightSchedule(fn=weights)
        schedule = weights if isinstance(weights, WeightSchedule) else None
        keys, parents, weights = _iter_inputs(datasets, None if schedule else weights, where)
        super().__init__(parents)
        self._keys = keys
        self._schedule = schedule
        self._smooth = schedule is not None and not schedule.all_points()
        for step, points in schedule.all_points() if schedule else ():
            ordered_weights(points, keys, len(parents), f"{where}: the schedule at step {step}")
        if schedule is None:
            self._props = _proportions(_check_weights(weights, len(parents), where), where)
        else:
            self._props = _proportions(self._weights(schedule.at(0)[0], "at step 0"), where)

    def _weights(self, weights: Any, when: str) -> list[float]:
        """``weights`` checked and in the datasets' order; ``when`` names them for errors."""
        if weights is None:  # equal weights are asked for by name only where None means that
            raise TypeError(f"mix weights {when}: got None; give one positive weight per dataset.")
        return ordered_weights(weights, self._keys, len(self._parents), f"mix weights {when}")

    def __iter__(self) -> _MixIterator:
        return _MixIterator(self)

    def _describe(self) -> str:
        names = f"{self._keys}, " if self._keys is not None else ""
        if self._go_on:
            names += "on_exhausted='continue', "
        if self._schedule is not None:
            return f"{names}{len(self._parents)} datasets, {self._schedule!r}"
        return f"{names}{len(self._parents)} datasets, proportions={list(self._props)}"


def _dataset_states(it: _MixIterator, key: str, value: Any, where: str) -> None:
    """One state per dataset: a list in order, or by name for a mix of named datasets."""
    if it._ds._keys is None and not isinstance(value, list):
        raise refuse(it, key, where, f"a list of {len(it._parents)} dataset states", value)
    if it._ds._keys is None and len(value) != len(it._parents):
        raise CheckpointError(
            f"mix.set_state(): the state holds {len(value)} dataset states (at {where}) but this "
            f"mix has {len(it._parents)} datasets; build the mix that saved it."
        )
    if it._ds._keys is not None and not isinstance(value, Mapping):
        raise refuse(it, key, where, "a mapping of names to states: the datasets are named", value)
    for k, (name, part) in enumerate(it._named_parts(value)):
        place = f"{where}[{name!r}]"
        if part is None and (it._ds._keys is None or name in value):
            raise refuse(it, f"{key}[{name!r}]", place, "a dataset state", part)
        if part is not None:
            it._parents[k]._validate_state(part, place)


def _select_one(props: tuple[int, ...], index: int) -> int:
    """The dataset of mix element ``index`` for ``props``: ``_select`` for one index."""
    left = sum(props)
    rem = index % left
    for k, p in enumerate(props[:-1]):
        taken = -((-rem * p) // left)
        if -((-(rem + 1) * p) // left) > taken:
            return k
        rem -= taken
        left -= p
    return len(props) - 1


def _live_weights(it: _MixIterator, key: str, value: Any, where: str) -> None:
    """The weights set on the running mix (``set_mix_weights``): one per dataset."""
    try:
        it._ds._weights(value, "in the state")
    except (TypeError, ValueError) as exc:
        raise refuse(it, key, where, f"one weight per dataset ({exc})", value) from None


def _credit_list(it: _MixIterator, key: str, value: Any, where: str) -> None:
    """The credits of a mix whose weights follow a function: one finite number per dataset."""
    n = len(it._parents)
    if it._credits is None or not (
        isinstance(value, list)
        and len(value) == n
        and all(isinstance(c, (int, float)) and math.isfinite(c) and abs(c) <= n for c in value)
    ):
        why = "no credits (its weights do not follow a function)" if it._credits is None else ""
        raise refuse(it, key, where, why or f"a list of {n} finite numbers", value)


def _exhausted_flags(it: _MixIterator, key: str, value: Any, where: str) -> None:
    """Which datasets ran out, with ``on_exhausted="continue"``: one bool per dataset."""
    n = len(it._parents)
    if not (
        isinstance(value, list)
        and len(value) == n
        and all(isinstance(x, bool) for x in value)
        and not all(value)
    ):
        raise refuse(it, key, where, f"a list of {n} bools, not all True", value)


class _MixIterator(DatasetIterator[Any]):
    _stage = "mix"
    _state_fields = fields(
        parents=_dataset_states,
        index=count(),
        stop=flag,
        weights=optional(_live_weights),
        exhausted=optional(_exhausted_flags),
        credits=optional(_credit_list),
        credits_from=optional(count()),
    )

    def __init__(self, ds: MixedIterDataset) -> None:
        super().__init__([iter(parent) for parent in ds._parents])
        self._ds = ds
        self._index = 0  # selections made so far
        self._stop = False
        self._block_start, self._block = 0, np.empty(0, dtype=np.int64)
        self._live: list[float] | None = None  # weights set on the running mix
        self._counts = [0] * len(self._parents)  # elements each dataset gave (statistics)
        self._out = [False] * len(self._parents)  # datasets that ran out (on_exhausted="continue")
        # A mix whose weights follow a function of the step picks by credits (see _smooth_turn).
        self._credits = Credits(len(self._parents)) if ds._smooth else None
        self._every = ds._schedule.every if ds._schedule is not None else 1
        metrics.add_mix_sources(self, "mix")  # elements per source, read with the metrics
        self._ids: np.ndarray | None = None  # the datasets still running, when some are out

    @property
    def counts(self) -> tuple[int, ...]:
        """Elements each dataset gave this iterator since it was built or restored."""
        return tuple(self._counts)

    @property
    def weights(self) -> list[float]:
        """The weights in force for the next element, in the datasets' order."""
        return list(self._weights_at(self._index)[0])

    def set_weights(self, weights: Any) -> None:
        """Uses ``weights`` from the next element on (None: the mix's own again)."""
        self._live = None if weights is None else self._ds._weights(weights, "set on the mix")
        self._block = np.empty(0, dtype=np.int64)  # the next turn is worked out anew
        self._replan()

    def _replan(self) -> None:
        """Turns worked out ahead by credits are worked out again from the next element."""
        if self._credits is not None:
            self._credits.cut(self._index)

    def _running(self, weights: list[float]) -> list[float]:
        """``weights`` of the datasets still running (all, unless some ran out)."""
        if self._ids is None:
            return weights
        return [weights[k] for k in self._ids.tolist()]

    def _weights_at(self, index: int) -> tuple[list[float], float]:
        """The weights in force at ``index`` (live, scheduled or fixed), in the datasets'
        order, and the index from which they may change."""
        schedule = self._ds._schedule
        if self._live is not None:
            return self._live, NEVER
        if schedule is None:
            return [float(p) for p in self._ds._props], NEVER
        raw, until = schedule.at(index)
        return self._ds._weights(raw, f"at step {index}"), until

    def _props_at(self, index: int) -> tuple[tuple[int, ...], float]:
        """The proportions in force at ``index`` and the index from which they may change."""
        if self._live is None and self._ds._schedule is None and self._ids is None:
            return self._ds._props, NEVER  # fixed weights, every dataset running
        weights, until = self._weights_at(index)
        return _proportions(self._running(weights), "mix weights"), until

    def _smooth_turn(self, index: int) -> int:
        """The turn of a mix whose weights follow a function of the step (``Credits``):
        Grain's pattern, at weights that change that often, picks about as unevenly as
        chance.  The credits are in the state."""
        credits = self._credits
        assert credits is not None
        turn = credits.turn(index)
        if turn is not None:
            return turn
        if not credits.planned and index > credits.start:  # restored inside a stretch
            credits.plan(*self._stretch_at(credits.start))  # worked out again, as it was
            turn = credits.turn(index)
            if turn is not None:
                return turn
        stretch = self._stretch_at(index)  # may raise: then nothing has changed
        if index != credits.start:  # past the stretch worked out: the next starts here
            credits.cut(index)
        credits.plan(*stretch)
        turn = credits.turn(index)
        assert turn is not None
        return turn

    def _stretch_at(self, start: int) -> tuple[list[float], list[int], int]:
        """The weights, the running datasets and the length of the stretch from ``start``."""
        weights, until = self._weights_at(start)
        running = [k for k, out in enumerate(self._out) if not out]
        return weights, running, int(min(until - start, Credits.AHEAD))

    def _turn(self, index: int) -> int:
        """The dataset that yields mix element ``index``."""
        credits = self._credits
        if credits is not None:
            ahead, planned = index - credits.start, credits.turns
            return planned[ahead] if 0 <= ahead < len(planned) else self._smooth_turn(index)
        offset = index - self._block_start
        if not 0 <= offset < len(self._block):
            props, until = self._props_at(index)
            size = int(min(_BLOCK, until - index))
            if size == 1:  # weights that change every step: one turn, without numpy
                turn = _select_one(props, index)
                return turn if self._ids is None else int(self._ids[turn])
            self._block_start, offset = index, 0
            indices = np.arange(index, index + size, dtype=np.int64)
            turns = _select(props, indices)[0]
            self._block = turns if self._ids is None else self._ids[turns]
        return int(self._block[offset])

    def __next__(self) -> Any:
        if self._stop:
            raise StopIteration
        while True:
            turn = self._turn(self._index)
            try:
                element = next(self._parents[turn])
            except StopIteration:
                if not self._ds._go_on or sum(self._out) + 1 == len(self._out):
                    self._index += 1  # as Grain: the turn was taken, and the mix ends
                    self._stop = True
                    raise
                self._run_out(turn)  # the others share this turn and the ones after it
                continue
            except Exception:
                self._index += 1  # the failing element took its turn
                raise
            self._index += 1
            self._counts[turn] += 1
            return element

    def _run_out(self, turn: int) -> None:
        self._replan()
        self._out[turn] = True
        self._ids = np.flatnonzero(~np.asarray(self._out))
        self._block = np.empty(0, dtype=np.int64)

    def get_state(self) -> dict[str, Any]:
        states = [parent.get_state() for parent in self._parents]
        keys = self._ds._keys
        parents = states if keys is None else dict(zip(keys, states))
        extra: dict[str, Any] = {}  # only what Grain's state lacks, when there is any
        if self._live is not None:
            extra["weights"] = list(self._live)
        if any(self._out):
            extra["exhausted"] = list(self._out)
        if self._credits is not None:  # where the stretch under way started, and its credits
            extra["credits"] = list(self._credits.base)
            extra["credits_from"] = self._credits.start
        return self._state(parents=parents, index=self._index, stop=self._stop, **extra)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parents", "index", "stop")
        metrics.read_mix(self)  # what it counted goes into the metrics before counts restart
        live = state.get("weights")
        self._live = None if live is None else self._ds._weights(live, "in the state")
        self._counts = [0] * len(self._parents)
        self._out = [False] * len(self._parents)
        self._ids = None
        saved = state.get("credits")
        if self._credits is not None:
            zero = [0.0] * len(self._parents)
            credits = zero if saved is None else [float(c) for c in saved]
            self._credits.reset(credits, int(state.get("credits_from", 0)))
        for k, out in enumerate(state.get("exhausted") or ()):
            if out:
                self._run_out(k)
        self._block = np.empty(0, dtype=np.int64)
        for k, (_, parent_state) in enumerate(self._named_parts(state["parents"])):
            if parent_state is None:  # a dataset the checkpoint does not name starts anew
                self._restart(k)
            else:
                self._parents[k].set_state(parent_state)
        self._index, self._stop = int(state["index"]), bool(state["stop"])

    def close(self) -> None:
        """Closes every dataset's iterator; what the mix counted goes into the metrics."""
        metrics.read_mix(self)
        super().close()

    def _named_parts(self, saved: Any) -> list[tuple[Any, Any]]:
        """(name or position, saved state or None) for each dataset, in order."""
        keys = self._ds._keys
        if keys is None:
            return list(enumerate(saved))
        return [(key, saved.get(key)) for key in keys]

    def _restart(self, k: int) -> None:
        old = self._parents[k]
        parents = list(self._parents)
        parents[k] = iter_inside(join(self), self._ds._parents[k])
        self._parents = tuple(parents)
        old.close()
