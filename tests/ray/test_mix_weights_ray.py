"""Mixture weights that change, on Ray workers: a mix with a ``WeightSchedule`` gives the
elements local workers give, in the same order; its state moves between Ray actors and
local processes; in virtual shards it resumes exactly on Ray and local topologies; and
``set_mix_weights`` on it is refused.  Local workers: tests/stages/test_mix_weights_workers.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from chute import IterDataset, MapDataset, MultiprocessingOptions, RayExecutor, ShardOptions
from chute.experimental import WeightSchedule, set_mix_weights, virtual_shards
from chute.testing import Topology, assert_resumes_exactly

ray = pytest.importorskip("ray")
pytestmark = [
    pytest.mark.usefixtures("local_ray"),
    # JAX, when an earlier test started it in this process, warns at every fork.
    pytest.mark.filterwarnings(r"ignore:os.fork\(\) was called:RuntimeWarning"),
]

SCHEDULE = WeightSchedule({0: [0.9, 0.1], 300: [0.5, 0.5], 900: [0.2, 0.8]})
V = 4


def _mixed() -> IterDataset[int]:
    a = MapDataset.range(0, 3_000).to_iter_dataset()
    b = MapDataset.range(10_000, 13_000).to_iter_dataset()
    return IterDataset.mix([a, b], SCHEDULE)


def _local() -> IterDataset[int]:
    return _mixed().mp_prefetch(MultiprocessingOptions(num_workers=2))


def _on_ray() -> IterDataset[int]:
    return _mixed().mp_prefetch(MultiprocessingOptions(num_workers=2), executor=RayExecutor())


def test_ray_workers_give_what_local_workers_give() -> None:
    expected = list(_local())
    with iter(_on_ray()) as it:
        got = list(it)
    assert got == expected
    assert len(set(got)) == len(got)


@pytest.mark.parametrize(("first", "second"), [(_on_ray, _local), (_local, _on_ray)])
def test_a_state_past_a_weight_change_moves_between_ray_and_local_workers(
    first: Any, second: Any
) -> None:
    expected = list(_local())
    with iter(first()) as it:
        head = [next(it) for _ in range(700)]  # 350 a worker: past the change at step 300
        state = it.get_state()
    with iter(second()) as it:
        it.set_state(state)
        tail = list(it)
    assert head + tail == expected


def test_set_mix_weights_on_a_mix_in_ray_workers_says_to_use_a_schedule() -> None:
    with iter(_on_ray()) as it:
        next(it)
        with pytest.raises(ValueError, match="worker processes.*WeightSchedule"):
            set_mix_weights(it, [0.5, 0.5])


def _shard(shard: ShardOptions) -> IterDataset[int]:
    """Shard ``shard``'s pipeline: a scheduled mix of its slices of the two sources."""
    part = slice(shard.shard_index, None, shard.shard_count)
    a = MapDataset.range(0, 400)[part].to_iter_dataset()
    b = MapDataset.range(1_000, 1_400)[part].to_iter_dataset()
    return IterDataset.mix([a, b], WeightSchedule({0: [0.8, 0.2], 20: [0.5, 0.5]}))


def _sharded() -> IterDataset[int]:
    return virtual_shards(_shard, V)


def test_a_scheduled_mix_in_virtual_shards_moves_between_ray_and_local_hosts() -> None:
    report = assert_resumes_exactly(
        _sharded,
        topologies=[Topology(1, 2, executor=RayExecutor()), Topology(2, 1), Topology(1, 0)],
        resumes=3,
        seed=0,
    )
    on_ray = [" on Ray" in topology for topology, _ in report.parts]
    assert any(on_ray) and not all(on_ray), report.parts
    assert report.elements == sum(len(list(_shard(ShardOptions(s, V)))) for s in range(V))
