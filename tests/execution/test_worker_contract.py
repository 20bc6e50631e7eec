"""Local worker processes and Ray actors keep one ``Worker`` contract, written once."""

from __future__ import annotations

import pytest

from chute import MapDataset
from chute._core.errors import CheckpointError, WorkerDiedError
from chute._execution import launch
from chute._execution.ray_iterator import RayWorkerIterator
from chute._execution.worker import Worker
from chute._execution.worker_process import WorkerIterator

SHARED = ("__next__", "_relaunch", "get_state", "set_state", "close")


@pytest.mark.parametrize("kind", [WorkerIterator, RayWorkerIterator])
def test_both_kinds_of_worker_share_the_restart_and_move_back_algorithm(kind: type) -> None:
    assert issubclass(kind, Worker)
    assert not kind.__abstractmethods__
    written_again = [name for name in SHARED if name in vars(kind) and name != "close"]
    assert written_again == []


def test_a_local_worker_is_a_worker_and_moves_back_after_a_refused_restore() -> None:
    ds = MapDataset.range(6).to_iter_dataset()
    with launch.worker(None, ds, index=0, count=1, buffer_size=1, seed=1) as worker:
        assert isinstance(worker, Worker)
        assert [next(worker), next(worker)] == [0, 1]
        before = worker.get_state()
        with pytest.raises(CheckpointError):
            worker.set_state({**before, "stage": "not a stage of this pipeline"})
        assert worker.get_state() == before
        assert list(worker) == [2, 3, 4, 5]


def _no_gpu(index: int, count: int) -> None:
    raise RuntimeError(f"no GPU on worker {index}")


def test_a_worker_that_could_not_start_carries_the_error_that_stopped_it() -> None:
    ds = MapDataset.range(3).to_iter_dataset()
    worker = launch.worker(
        None, ds, index=0, count=1, buffer_size=1, seed=1, worker_init_fn=_no_gpu
    )
    with worker, pytest.raises(WorkerDiedError, match="could not start") as info:
        next(worker)
    assert isinstance(info.value.worker_exception, RuntimeError)
    assert WorkerDiedError("killed").worker_exception is None
