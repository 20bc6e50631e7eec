"""Worker shares of a pipeline: random_map after to_iter_dataset draws as without workers.

Every share (a worker process of ``mp_prefetch``, a thread of
``multithread_prefetch``) numbers its random draws by the element of the undivided
pipeline it stands for, so the numbers never depend on how many workers run.
The Grain outputs below were observed from Grain 0.2.18 (the tests never import it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import chute as grain
from chute import MultiprocessingOptions, experimental
from chute._stages.slicing import Ordinals
from chute._stages.streams import Stream


def _draw(x: int, rng: np.random.Generator) -> tuple[int, int]:
    return x, int(rng.integers(0, 10**6))


def _random_map(n: int = 16) -> grain.IterDataset[Any]:
    return grain.MapDataset.range(n).seed(1).to_iter_dataset().random_map(_draw)


# Grain 0.2.18: the same with and without workers, through mp_prefetch and
# multithread_prefetch with 1 to 4 workers (observed for every count).
GRAIN_DRAWS = [134951, 76384, 900278, 964867, 97421, 783068, 654560, 773833]


def _spread(ds: grain.IterDataset[Any], kind: str, count: int, **kwargs: Any) -> Any:
    if kind == "processes":
        return ds.mp_prefetch(MultiprocessingOptions(num_workers=count), **kwargs)
    return experimental.multithread_prefetch(ds, num_threads=count, buffer_size=2, **kwargs)


def _pairs(ds: Any) -> list[list[int]]:
    return [list(x) for x in ds]


KINDS = ["processes", "threads"]


@pytest.mark.parametrize("count", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_random_map_after_to_iter_dataset_draws_as_without_workers(kind: str, count: int) -> None:
    alone = _pairs(_random_map())
    assert [d for _, d in alone[:8]] == GRAIN_DRAWS
    assert _pairs(_spread(_random_map(), kind, count)) == alone


@pytest.mark.parametrize("kind", KINDS)
def test_random_map_in_sequential_slices_draws_in_output_order_as_grain(kind: str) -> None:
    got = _pairs(_spread(_random_map(8), kind, 2, sequential_slice=True))
    assert got == [
        [0, 134951], [4, 76384], [1, 900278], [5, 964867],
        [2, 97421], [6, 783068], [3, 654560], [7, 773833],
    ]  # fmt: skip


def test_random_map_after_a_filter_draws_by_output_position_as_grain() -> None:
    ds = grain.MapDataset.range(16).seed(1).to_iter_dataset().filter(lambda x: x % 3 != 0)
    ds = ds.random_map(_draw).mp_prefetch(MultiprocessingOptions(num_workers=2))
    assert _pairs(ds) == [
        [2, 308031], [1, 852412], [4, 615465], [5, 507746], [8, 186976],
        [7, 766724], [10, 822361], [11, 637455], [14, 727519], [13, 239621],
    ]  # fmt: skip


def test_threads_inside_workers_draw_as_without_either() -> None:
    threads = experimental.multithread_prefetch(_random_map(), num_threads=2, buffer_size=1)
    ds = threads.mp_prefetch(MultiprocessingOptions(num_workers=2))
    assert _pairs(ds) == _pairs(_random_map())


def _tail_after_restore(
    kind: str, saved_with: int, restored_into: int, steps: int
) -> list[list[int]]:
    with iter(_spread(_random_map(), kind, saved_with)) as it:
        for _ in range(steps):
            next(it)
        state = it.get_state()
    with iter(_spread(_random_map(), kind, restored_into)) as it:
        it.set_state(state)
        return _pairs(it)


@pytest.mark.parametrize("count", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_random_map_restored_mid_stream_goes_on_with_the_draws_without_workers(
    kind: str, count: int
) -> None:
    alone = _pairs(_random_map())
    for steps in (1, 5, 10):
        assert _tail_after_restore(kind, count, count, steps) == alone[steps:]


@pytest.mark.parametrize(("saved_with", "restored_into"), [(2, 3), (3, 2), (4, 1), (1, 4)])
def test_random_map_restored_into_another_worker_count_goes_on_with_the_same_draws(
    saved_with: int, restored_into: int
) -> None:
    alone = _pairs(_random_map())
    assert _tail_after_restore("processes", saved_with, restored_into, 5) == alone[5:]


def test_ordinals_of_a_re_dealt_stream_are_its_positions() -> None:
    stream = Stream(pending=(3, 7), tail=10, end=16)
    ordinals = Ordinals(1, 2, stream)
    assert [ordinals(k) for k in range(4)] == [7, 11, 13, 15]
