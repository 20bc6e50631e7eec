"""Property: any pipeline restored at any step yields the same tail."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chute import MapDataset, ReadOptions
from chute.experimental import LimitIterDataset

MAP_STAGES = {
    "shuffle": lambda ds: ds.shuffle(seed=3),
    "map": lambda ds: ds.map(lambda x: x * 7 % 101),
    "random_map": lambda ds: ds.random_map(lambda x, rng: x + int(rng.integers(3)), seed=5),
    "filter": lambda ds: ds.filter(lambda x: x % 4 != 1),
    "slice": lambda ds: ds[1:],
    "repeat": lambda ds: ds.repeat(2),
}
ITER_STAGES = {
    "map": lambda ds: ds.map(lambda x: x + 1),
    "map_with_index": lambda ds: ds.map_with_index(lambda i, x: i + x),
    "filter": lambda ds: ds.filter(lambda x: x % 3 != 0),
    "limit": lambda ds: LimitIterDataset(ds, 25),
}


def _build(
    size: int, map_stages: list[str], iter_stages: list[str], batch: bool, threads: bool
) -> Any:
    ds: Any = MapDataset.range(size)
    for name in map_stages:
        ds = MAP_STAGES[name](ds)
    options = (
        ReadOptions(num_threads=2, prefetch_buffer_size=8, autotune=False) if threads else None
    )
    ds = ds.to_iter_dataset(options)
    for name in iter_stages:
        ds = ITER_STAGES[name](ds)
    return ds.batch(3) if batch else ds


def _plain(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else x


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 40),
    map_stages=st.lists(st.sampled_from(sorted(MAP_STAGES)), max_size=4),
    iter_stages=st.lists(st.sampled_from(sorted(ITER_STAGES)), max_size=3),
    batch=st.booleans(),
    threads=st.booleans(),
    data=st.data(),
)
def test_restore_at_a_random_step_gives_the_same_tail(
    size: int,
    map_stages: list[str],
    iter_stages: list[str],
    batch: bool,
    threads: bool,
    data: st.DataObject,
) -> None:
    ds = _build(size, map_stages, iter_stages, batch, threads)
    reference = [_plain(x) for x in ds]
    step = data.draw(st.integers(0, len(reference)))
    it = iter(ds)
    for _ in range(step):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    restored = iter(ds)
    restored.set_state(state)
    assert [_plain(x) for x in restored] == reference[step:]
