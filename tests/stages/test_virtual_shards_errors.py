"""virtual_shards: bad input is refused before anything changes, and the checker can fail.

Issue 36, items 5 and 6: states from another number of virtual shards, another
pipeline or another data set, a host's state restored elsewhere without
``merge_states``, merges of states that do not belong together, bad
``make_shard`` results; and ``chute.testing.assert_resumes_exactly`` raising on a
pipeline whose resume is wrong, naming the first element that differs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from chute import (
    ArrayRecordDataSource,
    DatasetIterator,
    IterDataset,
    MapDataset,
    MultiprocessingOptions,
    ShardOptions,
)
from chute._core.errors import CheckpointError
from chute.experimental import merge_states, virtual_shards, write_array_record
from chute.testing import Topology, assert_resumes_exactly

V = 8


def _triple(x: int) -> int:
    return 3 * x


def _quadruple(x: int) -> int:
    return 4 * x


def _pipeline(
    length: int = 64, fn: Any = _triple, seed: int = 1, num_shards: int = V, **kw: Any
) -> IterDataset[Any]:
    def shard(opts: ShardOptions) -> IterDataset[Any]:
        ds = MapDataset.range(length)[opts.shard_index :: opts.shard_count].shuffle(seed=seed)
        return ds.map(fn).to_iter_dataset().batch(2)

    return virtual_shards(shard, num_shards, **kw)


def _lists(it: Any, n: int | None = None) -> list[list[int]]:
    out = []
    for x in it:
        out.append(x.tolist())
        if n is not None and len(out) == n:
            break
    return out


def _saved(ds: IterDataset[Any], steps: int) -> dict[str, Any]:
    with iter(ds) as it:
        for _ in range(steps):
            next(it)
        return it.get_state()


# -- 5. a state from elsewhere is refused, and the iterator goes on as before -----------


def _refused_then_unchanged(ds: IterDataset[Any], state: Any, match: str) -> None:
    """``state`` is refused by an iterator of ``ds`` that read 3 elements, which then yields
    what it would have yielded."""
    expected = _lists(ds)
    with iter(ds) as it:
        head = _lists(it, 3)
        with pytest.raises(CheckpointError, match=match):
            it.set_state(state)
        assert head + _lists(it) == expected


def test_a_state_from_another_number_of_virtual_shards_is_refused() -> None:
    state = _saved(_pipeline(num_shards=8), 5)
    _refused_then_unchanged(_pipeline(num_shards=4), state, r"num_shards=8.*num_shards=4")


@pytest.mark.parametrize(
    ("other", "differs"),
    [
        ({"fn": _quadruple}, "map function"),
        ({"seed": 2}, "shuffle seed"),
    ],
)
def test_a_state_from_another_pipeline_is_refused(other: dict[str, Any], differs: str) -> None:
    state = _saved(_pipeline(), 5)
    _refused_then_unchanged(_pipeline(**other), state, "different pipeline")


def test_a_state_from_a_source_of_another_length_is_refused() -> None:
    state = _saved(_pipeline(length=64), 5)
    _refused_then_unchanged(_pipeline(length=72), state, "different pipeline")


def test_a_state_from_other_files_is_refused(tmp_path: Path) -> None:
    def files(name: str) -> list[str]:
        return write_array_record([f"{name}{i}" for i in range(32)], str(tmp_path / name))

    def over(paths: list[str]) -> IterDataset[Any]:
        def shard(opts: ShardOptions) -> MapDataset[Any]:
            source = MapDataset.source(ArrayRecordDataSource(paths))
            return source[opts.shard_index :: opts.shard_count].map(bytes.decode)

        return virtual_shards(shard, V)

    train, evaluation = files("train"), files("eval")
    state = _saved(over(train), 5)
    with iter(over(evaluation)) as it:
        assert _lists_of_str(it, 3) == ["eval0", "eval1", "eval2"]
        with pytest.raises(CheckpointError, match="different pipeline"):
            it.set_state(state)
        assert next(it) == "eval3"


def _lists_of_str(it: Any, n: int) -> list[str]:
    return [next(it) for _ in range(n)]


def test_the_refusal_names_what_differs() -> None:
    state = _saved(_pipeline(num_shards=8), 5)
    with iter(_pipeline(num_shards=4)) as it, pytest.raises(CheckpointError) as caught:
        it.set_state(state)
    message = str(caught.value)
    assert "virtual_shards(num_shards=8)" in message
    assert "virtual_shards(num_shards=4)" in message


# -- a host's state on another topology ---------------------------------------------------


def _host_states(steps: int = 3, hosts: int = 2) -> list[dict[str, Any]]:
    return [_saved(_pipeline(shard_options=ShardOptions(h, hosts)), steps) for h in range(hosts)]


@pytest.mark.parametrize(
    ("host", "workers"),
    [
        (ShardOptions(0, 1), 0),
        (ShardOptions(1, 4), 0),
        (ShardOptions(1, 2), 0),
        (ShardOptions(0, 1), 2),
    ],
    ids=["one-host", "host-1-of-4", "the-other-host", "one-host-2-workers"],
)
def test_a_host_state_restored_elsewhere_without_merging_names_merge_states(
    host: ShardOptions, workers: int
) -> None:
    state = _host_states()[0]  # host 0 of 2: shards 0, 2, 4, 6 only
    ds = _pipeline(shard_options=host).mp_prefetch(MultiprocessingOptions(num_workers=workers))
    expected = _lists(ds)
    with iter(ds) as it:
        with pytest.raises(CheckpointError, match=r"merge_states") as caught:
            it.set_state(state)
        assert _lists(it) == expected
    assert "it was saved by one host of several" in str(caught.value)


def test_a_host_state_holding_every_shard_of_the_new_host_restores_without_merging() -> None:
    """Host 0 of 4 runs shards 0 and 4, both in host 0 of 2's state: no merge is needed."""
    states = _host_states()
    merged = merge_states(states)
    rests = []
    for state in (states[0], merged):
        with iter(_pipeline(shard_options=ShardOptions(0, 4))) as it:
            it.set_state(state)
            rests.append(_lists(it))
    assert rests[0] == rests[1]
    # 2 shards x 4 batches; host 0 of 2 read one of each in its 3 steps (shards 0, 2, 4)
    assert len(rests[0]) == 2 * 4 - 2


# -- merge_states of states that do not belong together -------------------------------


def test_merging_two_positions_of_one_shard_is_refused() -> None:
    ds = _pipeline(shard_options=ShardOptions(0, 2))
    with pytest.raises(CheckpointError, match=r"two different positions of virtual shard 0"):
        merge_states([_saved(ds, 1), _saved(ds, 5)])  # shard 0: 1 and 2 turns


def test_merging_states_of_two_runs_of_one_shard_is_refused() -> None:
    first = _saved(_pipeline(seed=1, shard_options=ShardOptions(0, 2)), 2)
    second = _saved(_pipeline(seed=2, shard_options=ShardOptions(1, 2)), 2)
    with pytest.raises(CheckpointError, match="different pipelines"):
        merge_states([first, second])
    again = _saved(_pipeline(seed=2, shard_options=ShardOptions(0, 2)), 2)
    with pytest.raises(CheckpointError):
        merge_states([first, again])


def test_merging_states_of_different_numbers_of_shards_or_none_is_refused() -> None:
    eight = _saved(_pipeline(num_shards=8, shard_options=ShardOptions(0, 2)), 2)
    four = _saved(_pipeline(num_shards=4, shard_options=ShardOptions(1, 2)), 2)
    with pytest.raises(CheckpointError):
        merge_states([eight, four])
    with pytest.raises(CheckpointError, match="got none"):
        merge_states([])


def test_merging_states_saved_at_different_steps_is_refused() -> None:
    hosts = [_pipeline(shard_options=ShardOptions(h, 2)) for h in (0, 1)]
    with pytest.raises(CheckpointError, match=r"different steps \(1, 3\)"):
        merge_states([_saved(hosts[0], 1), _saved(hosts[1], 3)])


# -- bad make_shard results -------------------------------------------------------------


def test_make_shard_returning_no_dataset_raises_type_error_naming_the_shard() -> None:
    with pytest.raises(TypeError, match=r"virtual shard 0 .*list"):
        virtual_shards(lambda opts: [1, 2, 3], V)
    with pytest.raises(TypeError, match="virtual shard 3"):
        virtual_shards(lambda opts: None if opts.shard_index == 3 else MapDataset.range(4), V)


def test_mp_prefetch_before_other_stages_in_a_shard_raises_value_error() -> None:
    def shard(opts: ShardOptions) -> IterDataset[Any]:
        ds = MapDataset.range(64)[opts.shard_index :: opts.shard_count].to_iter_dataset()
        return ds.mp_prefetch(MultiprocessingOptions(num_workers=2)).map(_triple)

    with pytest.raises(ValueError, match="mp_prefetch before other stages"):
        virtual_shards(shard, V)


def test_mp_prefetch_ending_only_some_shards_raises_value_error() -> None:
    def shard(opts: ShardOptions) -> IterDataset[Any]:
        ds = MapDataset.range(64)[opts.shard_index :: opts.shard_count].to_iter_dataset()
        if opts.shard_index % 2:
            return ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
        return ds

    with pytest.raises(ValueError, match="some shards' pipelines end with mp_prefetch"):
        virtual_shards(shard, V)


# -- 6. the checker fails when the resume is wrong --------------------------------------


class Counter(IterDataset[int]):
    """``start, start + 1, ..., stop - 1``; ``skip_on_restore``: the ``k``-th restore
    (counted in the state) skips an element, as a buggy resume would."""

    def __init__(self, start: int, stop: int, skip_on_restore: int = 0) -> None:
        super().__init__()
        self._start, self._stop, self._skip = start, stop, skip_on_restore

    def __iter__(self) -> DatasetIterator[int]:
        return _CounterIterator(self._start, self._stop, self._skip)


class _CounterIterator(DatasetIterator[int]):
    def __init__(self, start: int, stop: int, skip: int) -> None:
        super().__init__()
        self._next, self._stop, self._skip, self._restores = start, stop, skip, 0

    def __next__(self) -> int:
        if self._next >= self._stop:
            raise StopIteration
        self._next += 1
        return self._next - 1

    def get_state(self) -> dict[str, Any]:
        return {"next": self._next, "restores": self._restores}

    def set_state(self, state: dict[str, Any]) -> None:
        self._restores = state["restores"] + 1
        self._next = state["next"] + (1 if self._restores == self._skip else 0)


def _counters(skip_on_restore: int) -> IterDataset[int]:
    def shard(opts: ShardOptions) -> IterDataset[int]:
        start = 100 * opts.shard_index
        return Counter(start, start + 6, skip_on_restore)

    return virtual_shards(shard, 4)


TOPOLOGIES = [Topology(1, 0), Topology(2, 1), Topology(4, 0), Topology(1, 2)]


def test_the_checker_passes_a_pipeline_that_resumes_exactly() -> None:
    report = assert_resumes_exactly(
        lambda: _counters(skip_on_restore=0), topologies=TOPOLOGIES, resumes=5, seed=1
    )
    assert report.elements == 24
    assert len(report.parts) == 6


@pytest.mark.parametrize("skip_on_restore", [1, 2])
def test_the_checker_names_the_first_element_a_wrong_resume_changes(
    skip_on_restore: int,
) -> None:
    """A resume that skips one element, at the first resume or only at the second."""
    with pytest.raises(AssertionError, match=r"element \d+ differs after resume") as caught:
        assert_resumes_exactly(
            lambda: _counters(skip_on_restore), topologies=TOPOLOGIES, resumes=5, seed=1
        )
    message = str(caught.value)
    assert f"after resume {skip_on_restore} " in message
    found = re.search(
        r"got (\d+) \(virtual shard (\d+), its element (\d+)\), "
        r"the uninterrupted run has (\d+) \(virtual shard (\d+), its element (\d+)\)",
        message,
    )
    assert found is not None, message
    got, got_shard, got_n, want, want_shard, want_n = map(int, found.groups())
    # the first element after the wrong resume: its shard's next one, one too far
    assert (got_shard, got_n) == (want_shard, want_n)
    assert want == 100 * want_shard + want_n
    assert got == want + 1


def test_the_checker_fails_a_plain_pipeline_whose_resume_skips() -> None:
    with pytest.raises(AssertionError, match=r"element \d+ differs after resume 1"):
        assert_resumes_exactly(lambda: Counter(0, 20, skip_on_restore=1), resumes=3, seed=2)
    report = assert_resumes_exactly(lambda: Counter(0, 20), resumes=3, seed=2)
    assert report.elements == 20
