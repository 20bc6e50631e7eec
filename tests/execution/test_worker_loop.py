"""The worker loop: a worker's default batches are stacked straight into its shared-memory ring."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import chute as grain
from chute._core import tree
from chute._execution import processes, worker_loop


def _marked(writer: Any, leaves: list[Any]) -> Any:
    """Stands in for the ring stacker (inherited by forked workers): its batches are all -1."""
    return np.full_like(tree.stack(leaves), -1)


def _loader_batches() -> list[Any]:
    loader = grain.DataLoader(
        data_source=[np.full(4, i) for i in range(8)],
        sampler=grain.samplers.SequentialSampler(8, grain.sharding.NoSharding()),
        operations=[grain.transforms.Batch(4)],
        worker_count=2,
    )
    return list(loader)


class _Draw(grain.transforms.RandomMap):
    def random_map(self, x: Any, rng: np.random.Generator) -> Any:
        return x + rng.integers(1)  # + 0: the records carry their RNG to the batch


def _loader_record_batches() -> list[Any]:
    """A loader whose operations need the records' RNG: its records are batched, then
    unwrapped."""
    loader = grain.DataLoader(
        data_source=[np.full(4, i) for i in range(8)],
        sampler=grain.IndexSampler(num_records=8, shuffle=False, seed=0, num_epochs=1),
        operations=[_Draw(), grain.transforms.Batch(4)],
        worker_count=2,
    )
    return list(loader)


def _mp_prefetch_batches() -> list[Any]:
    ds = grain.MapDataset.range(8).map(lambda i: np.full(4, i)).to_iter_dataset().batch(4)
    return list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


def _mp_prefetch_map_batches() -> list[Any]:
    ds = grain.MapDataset.range(8).map(lambda i: np.full(4, i)).batch(4).to_iter_dataset()
    return list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))


@pytest.mark.forks
@pytest.mark.parametrize(
    "batches",
    [_mp_prefetch_batches, _mp_prefetch_map_batches, _loader_batches, _loader_record_batches],
)
def test_workers_stack_their_default_batches_with_the_ring_stacker(
    batches: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if processes.fork_unsafe_reason() is not None:
        pytest.skip(f"this test process cannot fork: {processes.fork_unsafe_reason()}")
    monkeypatch.setenv(processes.START_ENV, "fork")
    monkeypatch.setattr(worker_loop, "_stack_in_ring", _marked)
    got = batches()
    assert len(got) == 2 and all((b == -1).all() and b.shape == (4, 4) for b in got)


def test_a_worker_given_no_batch_stacker_leaves_its_pipeline_alone() -> None:
    ds = grain.MapDataset.range(8).to_iter_dataset().batch(4)
    assert worker_loop._batches_in_ring(ds, writer=None, stack_batches=None) is ds


def test_a_stop_a_finalizer_swallowed_prints_nothing_and_stops_at_the_next_element(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from chute._execution import worker_loop

    monkeypatch.setattr(worker_loop, "_stop_asked", False)
    monkeypatch.setattr(sys, "unraisablehook", worker_loop._quiet_about_stops)

    class InterruptedFinalizer:  # SIGTERM arrived while this __del__ ran
        def __del__(self) -> None:
            worker_loop._stop_asked = True
            raise worker_loop.WorkerStopped(0)

    InterruptedFinalizer()  # Python reports what __del__ raised to sys.unraisablehook
    assert capsys.readouterr().err == ""

    class Credits:
        def recv_bytes(self) -> bytes:
            return b"1"

        def poll(self) -> bool:
            return False

    sent: list[object] = []
    with pytest.raises(worker_loop.WorkerStopped):
        worker_loop._serve(iter(range(3)), Credits(), sent.append)
    assert sent == []  # no element made after the stop


def test_batches_made_on_a_reading_thread_are_stacked_as_usual() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from chute._execution.transport import RingReader, RingSlot, RingWriter
    from chute._stages.batch import leaves_stacked_by

    leaves = [np.full(10_000, i) for i in range(4)]
    with RingReader() as reader, RingWriter(reader.prefix) as writer:
        ds = worker_loop._batches_in_ring(
            grain.MapDataset.range(4).to_iter_dataset().batch(4), writer, leaves_stacked_by
        )
        stack = ds._batch_fn.keywords["leaves_fn"]  # as the sending thread holds it
        with ThreadPoolExecutor(1) as pool:
            on_thread = pool.submit(stack, leaves).result()
        assert isinstance(on_thread, np.ndarray)
        np.testing.assert_array_equal(on_thread, np.stack(leaves))
        assert isinstance(stack(leaves), RingSlot)


def test_a_state_waiting_behind_credits_is_taken_first_and_later_credits_stay() -> None:
    """A worker told to move skips the elements it was granted at the old position (the
    parent drops them), and keeps the credits granted after the move."""
    import collections
    import multiprocessing

    receive, send = multiprocessing.Pipe(duplex=False)
    queued: collections.deque[bytes] = collections.deque()
    for command in (b"1", b"1", b"1"):
        send.send_bytes(command)
    assert worker_loop._next_command(receive, queued) == b"1"  # credits alone: one each
    assert list(queued) == [b"1", b"1"]
    send.send_bytes(b"state")
    send.send_bytes(b"1")
    assert worker_loop._next_command(receive, queued) == b"state"
    assert worker_loop._next_command(receive, queued) == b"1"
    assert not queued and not receive.poll()
    send.close()
    receive.close()
