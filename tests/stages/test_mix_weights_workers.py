"""Mixture weights that change, wherever the pipeline runs: a mix with a ``WeightSchedule``
in local worker processes (``mp_prefetch``) and inside each virtual shard's pipeline, saved
on one topology and resumed on another, each element exactly once and in the same order;
``set_mix_weights`` on a mix that runs in workers is refused.

Each worker (each virtual shard) runs its own copy of the mix over its share of the
sources, so the schedule follows that copy's own step: the mix's element count in it.
Ray workers: ``tests/ray/test_mix_weights_ray.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from chute import IterDataset, MapDataset, MultiprocessingOptions, ShardOptions
from chute.experimental import WeightSchedule, set_mix_weights, virtual_shards
from chute.testing import Topology, assert_resumes_exactly

#: A curriculum: mostly the first source, then even, then mostly the second.
SCHEDULE = WeightSchedule({0: [0.9, 0.1], 300: [0.5, 0.5], 900: [0.2, 0.8]})
V = 4  # virtual shards
SHARD_SCHEDULE = WeightSchedule({0: [0.8, 0.2], 20: [0.5, 0.5], 60: [0.2, 0.8]})


def _smooth(step: int) -> list[float]:
    """Weights that move a little every 50 steps: from 0.9/0.1 towards 0.3/0.7."""
    first = max(0.3, 0.9 - step / 2_000)
    return [first, 1 - first]


def _sources(part: slice = slice(None)) -> list[IterDataset[int]]:
    return [
        MapDataset.range(0, 3_000)[part].to_iter_dataset(),
        MapDataset.range(10_000, 13_000)[part].to_iter_dataset(),
    ]


def _mixed(schedule: Any = SCHEDULE, part: slice = slice(None)) -> IterDataset[int]:
    return IterDataset.mix(_sources(part), schedule)


def _in_workers(schedule: Any = SCHEDULE, workers: int = 2) -> IterDataset[int]:
    return _mixed(schedule).mp_prefetch(MultiprocessingOptions(num_workers=workers))


def _round_robin(*parts: list[int]) -> list[int]:
    """The workers' elements in the order the parent reads them: one from each in turn."""
    return [x for turn in itertools.zip_longest(*parts) for x in turn if x is not None]


def _exactly_once(elements: list[int], workers: int = 2) -> None:
    """No element twice, and each worker took a prefix of its share of each source: none
    skipped (the mix stops at its first source that runs out)."""
    assert len(set(elements)) == len(elements), "an element came twice"
    for low, high in ((0, 3_000), (10_000, 13_000)):
        for w in range(workers):
            own = sorted(x for x in elements if low <= x < high and (x - low) % workers == w)
            assert own == list(range(low + w, high, workers))[: len(own)], (low, w)


# -- local worker processes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "first_in_head"),
    # the share of the first source in a worker's first 300 elements: 0.9 throughout, or
    # _smooth's 0.9, 0.875, ..., 0.775 for 50 steps each (a mean of 0.8375)
    [(SCHEDULE, 270), (WeightSchedule(fn=_smooth, every=50), 251)],
)
def test_each_worker_follows_the_schedule_on_its_own_share(
    schedule: WeightSchedule, first_in_head: int
) -> None:
    got = list(_in_workers(schedule))
    per_worker = [list(_mixed(schedule, slice(w, None, 2))) for w in range(2)]
    assert got == _round_robin(*per_worker)
    _exactly_once(got)
    for own in per_worker:  # each worker's copy counts its own steps
        assert sum(x < 3_000 for x in own[:300]) == pytest.approx(first_in_head, abs=2)


def test_a_plain_callable_schedule_runs_in_workers() -> None:
    got = list(_in_workers(_smooth))
    assert got == _round_robin(*(list(_mixed(_smooth, slice(w, None, 2))) for w in range(2)))


def test_a_scheduled_mix_in_workers_resumes_exactly() -> None:
    report = assert_resumes_exactly(_in_workers, resumes=3, seed=1)
    assert report.elements == len(list(_in_workers()))


def test_a_state_saved_in_workers_resumes_past_a_weight_change() -> None:
    expected = list(_in_workers())
    with iter(_in_workers()) as it:
        head = [next(it) for _ in range(700)]  # 350 a worker: past the change at step 300
        state = it.get_state()
    with iter(_in_workers()) as it:
        it.set_state(state)
        tail = list(it)
    assert head + tail == expected


# -- set_mix_weights and workers ------------------------------------------------------------


@pytest.mark.parametrize("started", [False, True])
def test_set_mix_weights_on_a_mix_in_workers_says_to_use_a_schedule(started: bool) -> None:
    expected = list(_in_workers())
    with iter(_in_workers()) as it:
        head = [next(it)] if started else []
        with pytest.raises(ValueError, match="worker processes.*WeightSchedule") as caught:
            set_mix_weights(it, [0.5, 0.5])
        assert "the iterator's mix runs in worker processes" in str(caught.value)
        assert head + list(it) == expected  # nothing changed


# -- virtual shards ---------------------------------------------------------------------------


def _shard(shard: ShardOptions) -> IterDataset[int]:
    """Shard ``shard``'s pipeline: a scheduled mix of its slices of the two sources."""
    part = slice(shard.shard_index, None, shard.shard_count)
    a = MapDataset.range(0, 400)[part].to_iter_dataset()
    b = MapDataset.range(1_000, 1_400)[part].to_iter_dataset()
    return IterDataset.mix([a, b], SHARD_SCHEDULE)


def _sharded() -> IterDataset[int]:
    return virtual_shards(_shard, V)


def test_each_virtual_shard_follows_the_schedule_on_its_own_step() -> None:
    with iter(_sharded()) as it:
        by_shard: dict[int, list[int]] = {}
        for element in it:
            shard, _ = it.last_origin  # type: ignore[attr-defined]
            by_shard.setdefault(shard, []).append(element)
    assert by_shard == {s: list(_shard(ShardOptions(s, V))) for s in range(V)}


def test_a_scheduled_mix_in_virtual_shards_resumes_exactly_on_any_topology() -> None:
    report = assert_resumes_exactly(
        _sharded,
        topologies=[Topology(1, 0), Topology(1, 2), Topology(2, 1), Topology(4, 0)],
        resumes=4,
        seed=3,
    )
    lengths = [len(list(_shard(ShardOptions(s, V)))) for s in range(V)]
    assert report.elements == sum(lengths)
    assert len({topology for topology, _ in report.parts}) >= 2, report.parts


def test_mix_weights_are_refused_on_virtual_shards_running_several_mixes() -> None:
    with iter(_sharded()) as it:
        next(it)
        with pytest.raises(ValueError, match="mix stages in this process"):
            set_mix_weights(it, [0.5, 0.5])
