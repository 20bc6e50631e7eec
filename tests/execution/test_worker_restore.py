"""A restore the worker's pipeline refuses: its error in the parent, the iterator where it was."""

from __future__ import annotations

import copy
import functools
import os
import time
from collections.abc import Callable
from typing import Any

import pytest

import chute as grain
from chute import MultiprocessingOptions

pytestmark = pytest.mark.usefixtures("start_method")


def _double(x: int) -> int:
    return x * 2


def test_a_state_a_worker_refuses_raises_its_error_and_leaves_the_position_alone() -> None:
    ds = grain.MapDataset.range(20).to_iter_dataset().map(_double)
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2, per_worker_buffer_size=3))
    with iter(ds) as it:
        assert [next(it) for _ in range(5)] == [0, 2, 4, 6, 8]
        bad = copy.deepcopy(it.get_state())
        bad["workers"][1]["stage"] = "filter"  # worker 1's pipeline has no filter
        with pytest.raises(Exception) as raised:
            it.set_state(bad)
        assert not isinstance(raised.value, grain.WorkerDiedError)
        assert "filter" in str(raised.value)
        assert list(it) == [x * 2 for x in range(5, 20)]  # as if the restore was never tried


def test_after_a_refused_restore_a_good_one_still_works() -> None:
    ds = grain.MapDataset.range(12).to_iter_dataset().map(_double)
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=1))
    with iter(ds) as it:
        next(it)
        good = it.get_state()
        bad = copy.deepcopy(good)
        bad["workers"][0]["parent"]["next_index"] = "three"
        with pytest.raises((TypeError, ValueError, grain.CheckpointError)):
            it.set_state(bad)
        assert next(it) == 2
        it.set_state(good)
        assert list(it) == [x * 2 for x in range(1, 12)]


# -- a restore right after iter(): the workers start at the state ------------------------


class _Refusing(grain.IterDataset):
    """Passes its parent's elements on; its iterator refuses a state whose ``limit`` is
    negative with a ValueError (a refusal only the worker's pipeline can make: the parent
    checks no such rule)."""

    def __iter__(self) -> grain.DatasetIterator:
        return _RefusingIterator(iter(self._parent))


class _RefusingIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator) -> None:
        super().__init__(parent)
        self._limit = 0

    def __next__(self) -> Any:
        return next(self._parent)

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent.get_state(), "limit": self._limit}

    def set_state(self, state: dict[str, Any]) -> None:
        if state["limit"] < 0:
            raise ValueError(f"limit {state['limit']} is negative")
        self._parent.set_state(state["parent"])


def _logged(path: str, x: int) -> int:
    """``x``, after appending ``pid x`` to the file ``path``."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()} {x}\n")
    return x


def _log(path: Any) -> list[tuple[int, int]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(int(a), int(b)) for a, b in (line.split() for line in f if line.strip())]


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"waited a minute for {what}"
        time.sleep(0.01)


def test_a_restore_right_after_iter_does_not_wait_for_the_elements_from_the_start(
    start_method: str, tmp_path: Any
) -> None:
    """Forked workers that delivered nothing are started again at the state; a move (the
    fork server's workers) goes on in the same processes.  Either way nothing is lost."""
    ds = grain.MapDataset.range(40).to_iter_dataset()
    ds = ds.map(functools.partial(_logged, str(tmp_path / "log")))
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2))
    with iter(ds) as it:
        assert [next(it) for _ in range(7)] == list(range(7))
        state = it.get_state()
    os.unlink(tmp_path / "log")
    with iter(ds) as it:
        both = lambda: len({pid for pid, _ in _log(tmp_path / "log")}) == 2  # noqa: E731
        _wait_for(both, "both workers to make elements from the start")
        before = {pid for pid, _ in _log(tmp_path / "log")}
        it.set_state(state)
        assert list(it) == list(range(7, 40))
    after = {pid for pid, x in _log(tmp_path / "log") if x >= 7}
    if start_method == "fork":
        assert not before & after  # new processes made the elements after the state
    else:
        assert after <= before  # the same processes moved


def test_a_state_a_fresh_worker_refuses_raises_its_error_and_leaves_it_at_the_start(
    start_method: str,
) -> None:
    ds = _Refusing(grain.MapDataset.range(10).to_iter_dataset())
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=1))
    with iter(ds) as it:
        good = it.get_state()
        bad = copy.deepcopy(good)
        bad["workers"][0]["limit"] = -1
        with pytest.raises(ValueError, match="limit -1 is negative"):
            it.set_state(bad)
        assert list(it) == list(range(10))  # where it was: the start
        it.set_state(good)  # and a good state still works
        assert list(it) == list(range(10))
