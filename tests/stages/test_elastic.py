"""ElasticIterator: hosts share global batches, and checkpoints move between host counts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chute import MapDataset, MultiprocessingOptions, ShardOptions
from chute._core.errors import CheckpointError
from chute._stages.elastic import ElasticIterator
from chute.experimental import assert_equal_output_after_checkpoint

N = 48
GLOBAL = 8


def _hosts(ds: MapDataset[Any], count: int, size: int = GLOBAL) -> list[Any]:
    return [iter(ElasticIterator(ds, size, ShardOptions(i, count))) for i in range(count)]


def _step(hosts: list[Any]) -> list[int]:
    """One global batch: every host's next batch, flattened."""
    return [int(x) for it in hosts for x in next(it).tolist()]


def _run_with_change(counts: tuple[int, int], steps_before: int) -> list[int]:
    ds = MapDataset.range(N).shuffle(seed=3).map(lambda x: x * 10)
    hosts, seen = _hosts(ds, counts[0]), []
    for _ in range(steps_before):
        seen += _step(hosts)
    state = json.loads(json.dumps(hosts[-1].get_state()))
    assert all(it.get_state() == state for it in hosts)
    new = _hosts(ds, counts[1])
    for it in new:
        it.set_state(state)
    while True:
        try:
            seen += _step(new)
        except StopIteration:
            break
    return seen


@pytest.mark.parametrize("counts", [(2, 4), (4, 1), (1, 2), (4, 2)])
def test_host_count_change_mid_epoch_reads_every_element_once(counts: tuple[int, int]) -> None:
    seen = _run_with_change(counts, steps_before=3)
    assert sorted(seen) == [x * 10 for x in range(N)]


def test_hosts_kth_batches_form_the_kth_global_batch() -> None:
    hosts = _hosts(MapDataset.range(16), 2, size=4)
    assert [next(hosts[0]).tolist(), next(hosts[1]).tolist()] == [[0, 2], [1, 3]]
    assert [next(hosts[0]).tolist(), next(hosts[1]).tolist()] == [[4, 6], [5, 7]]


def test_partial_last_global_batch_is_dropped_on_every_host() -> None:
    for i in range(2):
        batches = list(ElasticIterator(MapDataset.range(10), 4, ShardOptions(i, 2)))
        assert len(batches) == 2


def test_global_batch_size_not_divisible_raises() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        ElasticIterator(MapDataset.range(10), 6, ShardOptions(0, 4))


def test_filter_is_rejected() -> None:
    with pytest.raises(ValueError, match="filter"):
        ElasticIterator(MapDataset.range(10).filter(lambda x: x > 2), 2, ShardOptions(0, 1))


def test_bad_arguments_raise_type_error() -> None:
    with pytest.raises(TypeError):
        ElasticIterator(MapDataset.range(4).to_iter_dataset(), 2, ShardOptions(0, 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ElasticIterator(MapDataset.range(4), 2, None)  # type: ignore[arg-type]


def test_checkpoint_conformance_of_one_host() -> None:
    ds = MapDataset.range(40).shuffle(seed=1)
    assert_equal_output_after_checkpoint(ElasticIterator(ds, 4, ShardOptions(1, 2)))


def test_default_iterator_like_grain() -> None:
    it = ElasticIterator(MapDataset.range(8), 4, ShardOptions(0, 2))
    assert next(it).tolist() == [0, 2]
    state = it.get_state()
    assert next(it).tolist() == [4, 6]
    it.set_state(state)
    assert next(it).tolist() == [4, 6]
    it.close()


def test_state_from_another_stage_is_refused() -> None:
    it = iter(ElasticIterator(MapDataset.range(8), 4, ShardOptions(0, 2)))
    with pytest.raises(CheckpointError):
        it.set_state(iter(MapDataset.range(3).to_iter_dataset()).get_state())


@pytest.mark.slow
def test_multiprocessing_host_restores_into_other_count() -> None:
    ds = MapDataset.range(24)
    options = MultiprocessingOptions(num_workers=2)
    first = iter(ElasticIterator(ds, 4, ShardOptions(0, 2), multiprocessing_options=options))
    assert next(first).tolist() == [0, 2]
    state = first.get_state()
    first.close()
    again = iter(ElasticIterator(ds, 4, ShardOptions(1, 4), multiprocessing_options=options))
    again.set_state(state)
    assert [b.tolist() for b in again] == [[5], [9], [13], [17], [21]]
    again.close()
