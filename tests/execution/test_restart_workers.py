"""MultiprocessingOptions(restart_workers=True): a killed worker comes back where it was."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

import chute as grain
from chute import MultiprocessingOptions, WorkerDiedError

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.usefixtures("start_method")


def _killed_once_at(marker: str, victim: int, x: int) -> int:
    if x == victim and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    return x * 10


def _pipeline(tmp_path: Path, restart: bool):  # type: ignore[no-untyped-def]
    fn = functools.partial(_killed_once_at, str(tmp_path / "killed"), 17)
    ds = grain.MapDataset.range(40).to_iter_dataset().map(fn)
    options = MultiprocessingOptions(num_workers=2, restart_workers=restart)
    return ds.mp_prefetch(options)


def test_a_killed_worker_restarts_and_the_epoch_has_every_element_once_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="chute"), iter(_pipeline(tmp_path, True)) as it:
        assert list(it) == [x * 10 for x in range(40)]
    (message,) = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert "worker 1 of 2 died (signal SIGKILL)" in message


def test_without_the_option_a_killed_worker_ends_the_run(tmp_path: Path) -> None:
    with iter(_pipeline(tmp_path, False)) as it, pytest.raises(WorkerDiedError):
        list(it)


def test_restart_workers_must_be_a_bool_and_keeps_grains_repr() -> None:
    with pytest.raises(TypeError, match="restart_workers"):
        MultiprocessingOptions(num_workers=2, restart_workers="yes")  # type: ignore[arg-type]
    assert repr(MultiprocessingOptions(2, restart_workers=True)) == (
        "MultiprocessingOptions(num_workers=2, per_worker_buffer_size=1, enable_profiling=False)"
    )


def _global_draw_killed_once_at(marker: str, victim: int, x: int) -> tuple[int, int]:
    if x == victim and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return x, int(np.random.randint(2**31))


def _global_draws_with_a_restart(marker: Path) -> list[tuple[int, int]]:
    fn = functools.partial(_global_draw_killed_once_at, str(marker), 7)
    ds = grain.MapDataset.range(12).seed(5).to_iter_dataset().map(fn)
    options = MultiprocessingOptions(num_workers=2, restart_workers=True)
    with iter(ds.mp_prefetch(options)) as it:
        return [tuple(x) for x in it]


def test_a_restarted_worker_draws_new_global_random_numbers_and_the_same_ones_in_a_rerun(
    tmp_path: Path,
) -> None:
    first = _global_draws_with_a_restart(tmp_path / "first")
    assert [x for x, _ in first] == list(range(12))
    worker_1 = [d for x, d in first if x % 2]  # elements 1, 3, 5, then restarted at 7: 7, 9, 11
    assert worker_1[3:] != worker_1[:3]  # the first life's draws are not replayed
    assert len(set(worker_1)) == len(worker_1)
    assert _global_draws_with_a_restart(tmp_path / "rerun") == first
