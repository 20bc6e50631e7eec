"""A restore the worker's pipeline refuses: its error in the parent, the iterator where it was."""

from __future__ import annotations

import copy

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
