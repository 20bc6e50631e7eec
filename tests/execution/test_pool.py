"""One worker pool: turns, restores in place and into another worker count, for every client."""

from __future__ import annotations

from typing import Any

import pytest

from chute import MapDataset, MultiprocessingOptions
from chute._execution.pool import PoolSpec, WorkerPool
from chute._execution.streams import Stream
from chute._execution.worker import Worker
from chute._stages.streams import StreamMapDataset, positions_of

EVERYTHING = Stream((), 0, 10)


def _share(worker: int, count: int, stream: Stream | None) -> Any:
    return StreamMapDataset(stream or EVERYTHING)[worker::count].to_iter_dataset()


@pytest.fixture(params=["processes", "inline"])
def spec(request: pytest.FixtureRequest) -> PoolSpec:
    return PoolSpec(share=_share, inline=iter if request.param == "inline" else None)


def test_a_pool_reads_its_workers_in_turn(spec: PoolSpec) -> None:
    with WorkerPool(spec, 3, EVERYTHING) as pool:
        assert list(pool) == list(range(10))
        assert len(pool.workers) == 3


def test_a_pool_restored_into_another_worker_count_reads_each_position_once(
    spec: PoolSpec,
) -> None:
    with WorkerPool(spec, 2, EVERYTHING) as pool:
        first = [next(pool) for _ in range(3)]
        state = pool.get_state()
    positions = positions_of(state["workers"])
    assert positions is not None
    with WorkerPool(spec, 3, EVERYTHING) as pool:
        pool.redeal(EVERYTHING, 2, positions, 3)
        assert len(pool.workers) == 3 and pool.stream == Stream((), 3, 10)
        assert first + list(pool) == list(range(10))


def test_a_pool_restored_in_place_moves_its_live_workers(spec: PoolSpec) -> None:
    with WorkerPool(spec, 2, EVERYTHING) as pool:
        state = pool.get_state()
        first = [next(pool) for _ in range(5)]
        workers = pool.workers
        pool.restore(EVERYTHING, state["workers"], state["turn"], state["exhausted"])
        assert pool.workers == workers  # the same workers, moved back
        assert [next(pool) for _ in range(5)] == first


def test_a_pool_that_restarts_on_restore_starts_new_workers(spec: PoolSpec) -> None:
    with WorkerPool(spec, 2, EVERYTHING) as pool:
        state = pool.get_state()
        first = [next(pool) for _ in range(5)]
        workers = pool.workers
        pool.restore(EVERYTHING, state["workers"], 0, [False, False], in_place=False)
        assert all(a is not b for a, b in zip(pool.workers, workers))
        assert [next(pool) for _ in range(5)] == first


def test_mp_prefetch_is_a_client_of_the_pool() -> None:
    ds = MapDataset.range(6).to_iter_dataset().mp_prefetch(MultiprocessingOptions(num_workers=2))
    with iter(ds) as it:
        assert isinstance(it, WorkerPool)
        assert all(isinstance(w, Worker) for w in it.workers)
        assert it.buffer_fill()[1] == 2
        assert list(it) == list(range(6))
