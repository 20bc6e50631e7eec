"""Checkpoints taken from another thread while the training loop iterates.

A background thread calls ``get_state()`` again and again while the loop calls
``next()``; every state it gets must be the position between two elements the loop
received: restored, it yields the element the loop received next, and the ones
after it.  Without the iterator's lock some states restore elsewhere (a few in a
hundred in process, most with worker processes).
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import chute
from chute import (
    DataLoader,
    IndexSampler,
    MapDataset,
    MultiprocessingOptions,
    NoSharding,
    ReadOptions,
)
from chute.experimental import WindowShuffleIterDataset

THREADS = ReadOptions(num_threads=2, prefetch_buffer_size=8, autotune=False)


@pytest.fixture(autouse=True)
def _switch_threads_often() -> Iterator[None]:
    """The interpreter switches threads every microsecond: the loop is interrupted mid-element."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _plain(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else x


Taken = dict[str, tuple[int, Any, int]]


def _iterate_while_a_thread_checkpoints(it: Any, *, step: bool) -> tuple[list[Any], Taken]:
    """Iterates ``it`` to the end while another thread takes states.

    Returns the elements and each distinct state (by its JSON), with the most
    elements the loop had received before the thread asked for it and the
    fewest it had received once the thread got it.  ``step``: the loop lets
    other threads run after each element, as a training step would.
    """
    received: list[Any] = []
    taken: Taken = {}
    done = threading.Event()

    def checkpoint() -> None:
        while not done.is_set():
            before = len(received)
            state = it.get_state()
            after = len(received)
            key = state.decode() if isinstance(state, bytes) else json.dumps(state)
            low, _, high = taken.get(key, (before, None, after))
            taken[key] = (max(low, before), state, min(high, after))

    thread = threading.Thread(target=checkpoint)
    thread.start()
    try:
        for x in it:
            received.append(_plain(x))
            if step:
                time.sleep(0)
    finally:
        done.set()
        thread.join()
    return received, taken


def _check_restores(make: Callable[[], Any], received: list[Any], taken: Taken, most: int) -> None:
    """Restores up to ``most`` of the distinct states, spread over the run."""
    where = {json.dumps(x): i for i, x in enumerate(received)}
    states = list(taken.values())
    assert len(states) >= min(most, 3)
    for before, state, after in states[:: max(1, len(states) // most)]:
        restored = make()
        restored.set_state(json.loads(json.dumps(state)) if isinstance(state, dict) else state)
        got = [_plain(x) for x in itertools.islice(restored, 3)]
        restored.close()
        position = where[json.dumps(got[0])] if got else len(received)
        # The loop may have had an element from next() that it had not stored yet.
        assert before <= position <= after + 1
        assert got == received[position : position + 3]


def _in_process() -> Any:
    ds = MapDataset.range(2000).seed(5).shuffle().map(lambda x: x * 3)
    ds = ds.to_iter_dataset(THREADS).filter(lambda x: x % 7 != 1)
    return WindowShuffleIterDataset(ds, window_size=16, seed=1).batch(4)


def test_states_taken_from_another_thread_restore_to_the_next_element() -> None:
    ds = _in_process()
    it = iter(ds)
    received, taken = _iterate_while_a_thread_checkpoints(it, step=False)
    assert received == [_plain(x) for x in ds]
    _check_restores(lambda: iter(ds), received, taken, most=400)


@pytest.mark.forks
def test_mp_prefetch_states_taken_from_another_thread_restore_to_the_next_element() -> None:
    ds = MapDataset.range(400).map(lambda x: x * 3).to_iter_dataset().batch(3)
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    it = iter(ds)
    received, taken = _iterate_while_a_thread_checkpoints(it, step=True)
    it.close()
    _check_restores(lambda: iter(ds), received, taken, most=10)


@pytest.mark.forks
@pytest.mark.parametrize("workers", [0, 2])
def test_data_loader_states_taken_from_another_thread_restore_to_the_next_batch(
    workers: int,
) -> None:
    def make() -> Any:
        sampler = IndexSampler(300, NoSharding(), shuffle=True, num_epochs=1, seed=3)
        loader = DataLoader(
            data_source=list(range(300)),
            sampler=sampler,
            operations=[chute.Batch(5)],
            worker_count=workers,
        )
        return iter(loader)

    it = make()
    received, taken = _iterate_while_a_thread_checkpoints(it, step=True)
    it.close()
    _check_restores(make, received, taken, most=6 if workers else 100)


def test_set_state_from_another_thread_waits_for_the_element_in_progress() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(x: int) -> int:
        if x == 2:
            started.set()
            release.wait(10)
        return x

    ds = MapDataset.range(6).to_iter_dataset().map(slow)
    it = iter(ds)
    assert [next(it), next(it)] == [0, 1]
    state = it.get_state()
    out: list[int] = []
    loop = threading.Thread(target=lambda: out.append(next(it)))
    loop.start()
    started.wait(10)
    restoring = threading.Thread(target=it.set_state, args=(state,))
    restoring.start()
    restoring.join(0.2)
    assert restoring.is_alive()  # waits for the element the loop is making
    release.set()
    loop.join(10)
    restoring.join(10)
    assert out == [2]
    assert list(it) == [2, 3, 4, 5]
