"""Faults inside workers: an element that cannot be sent, and the order after an error."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest

import chute as grain
from chute import MultiprocessingOptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.usefixtures("start_method")


def _drain(it: Any, error: type[BaseException]) -> tuple[list[Any], list[str]]:
    out: list[Any] = []
    messages: list[str] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out, messages
        except error as exc:
            out.append("error")
            messages.append(str(exc))


def _with_lock(x: int) -> dict[str, Any]:
    return {"v": x, "h": threading.Lock()} if x == 26 else {"v": x}


def test_an_element_that_cannot_be_pickled_becomes_its_error_and_the_epoch_goes_on() -> None:
    ds = grain.MapDataset.range(40).map(_with_lock).to_iter_dataset()
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))) as it:
        out, messages = _drain(it, TypeError)
    values = [x if x == "error" else x["v"] for x in out]
    assert values == [*range(26), "error", *range(27, 40)]
    (message,) = messages
    assert "cannot be sent from the worker" in message
    assert "map(_with_lock)" in message and "lock at ['h']" in message


def _with_lambda(x: int) -> dict[str, Any]:
    return {"image": np.full(1 << 17, x), "scale": lambda v: v * x}  # 1 MiB, and a lambda


def _rings() -> list[str]:
    """This process's ring segments still named in shared memory."""
    return [
        p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(f"chute-{os.getpid()}-")
    ]


def test_elements_that_need_cloudpickle_keep_shared_memory_bounded() -> None:
    before = len(_rings())
    ds = grain.MapDataset.range(40).map(_with_lambda).to_iter_dataset()
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))) as it:
        for i, element in enumerate(it):
            assert int(element["image"][-1]) == i and element["scale"](2) == 2 * i
        # a slot claimed before plain pickle failed would stay busy: 40 slots of 1 MiB
        assert len(_rings()) - before <= 4  # per worker: one reused slot, and the control


def test_batches_built_in_shared_memory_that_need_cloudpickle_arrive_whole() -> None:
    before = len(_rings())
    ds = grain.MapDataset.range(40).map(_with_lambda).to_iter_dataset().batch(4)
    seen: list[int] = []
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))) as it:
        for batch in it:  # each worker batches its own elements
            assert batch["image"].shape == (4, 1 << 17)
            assert batch["image"][:, -1].tolist() == [scale(1) for scale in batch["scale"]]
            seen += batch["image"][:, 0].tolist()
        assert len(_rings()) - before <= 4
    assert sorted(seen) == list(range(40))


def _fails_at_13(x: int) -> int:
    if x == 13:
        raise ValueError("bad record 13")
    return x


@pytest.mark.parametrize("workers", [2, 3])
def test_after_a_worker_error_the_other_elements_keep_the_uninterrupted_order(
    workers: int,
) -> None:
    ds = grain.MapDataset.range(30).map(_fails_at_13).to_iter_dataset()
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=workers))) as it:
        out, _ = _drain(it, ValueError)
    assert out == [*range(13), "error", *range(14, 30)]


def _source_changed_at_13(x: int) -> int:
    if x == 13:
        raise grain.SourceChangedError("shard 2 changed since it was opened")
    return x


def test_a_changed_source_in_a_worker_takes_its_elements_turn_like_any_error() -> None:
    ds = grain.MapDataset.range(30).map(_source_changed_at_13).to_iter_dataset()
    with iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))) as it:
        out, _ = _drain(it, grain.SourceChangedError)
    assert out == [*range(13), "error", *range(14, 30)]  # the worker went on: so do its turns


def test_a_checkpoint_after_a_worker_error_resumes_in_the_same_order() -> None:
    ds = grain.MapDataset.range(30).map(_fails_at_13).to_iter_dataset()
    pipeline = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    with iter(pipeline) as it:
        head, _ = [next(it) for _ in range(13)], None
        with pytest.raises(ValueError):
            next(it)
        state = it.get_state()
    with iter(pipeline) as again:
        again.set_state(state)
        assert head + list(again) == [*range(13), *range(14, 30)]
