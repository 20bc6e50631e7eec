"""WithOptionsIterDataset: options reach the whole pipeline; error budgets as options.

The propagation cases mirror ones run on Grain 0.2.18, whose observed outcome
(raised or not, and after how many elements) is asserted here.
"""

from __future__ import annotations

from typing import Any

import pytest

from chute import ErrorBudgetExceededError, MapDataset
from chute._core.dataset_options import DatasetOptions
from chute._core.pipeline_context import join
from chute._stages.conformance import assert_equal_output_after_checkpoint
from chute._stages.error_budget import ErrorBudgetIterDataset, skip_errors
from chute._stages.filter import FilterThresholdError
from chute._stages.with_options import WithOptionsIterDataset

RAISE_HALF = DatasetOptions(filter_raise_threshold_ratio=0.5)


def _sparse(n: int = 3000) -> Any:
    """An IterDataset whose filter keeps 1 element in 20."""
    return MapDataset.range(n).to_iter_dataset().filter(lambda x: x % 20 == 0)


def _count_until_error(ds: Any) -> tuple[int, bool]:
    count = 0
    try:
        for _ in ds:
            count += 1
    except FilterThresholdError:
        return count, True
    return count, False


def test_options_after_the_filter_reach_it() -> None:
    assert _count_until_error(WithOptionsIterDataset(_sparse(), RAISE_HALF)) == (50, True)


def test_options_before_the_filter_reach_it() -> None:
    ds = WithOptionsIterDataset(MapDataset.range(3000).to_iter_dataset(), RAISE_HALF)
    assert _count_until_error(ds.filter(lambda x: x % 20 == 0)) == (50, True)


def test_options_reach_through_other_stages() -> None:
    ds = WithOptionsIterDataset(_sparse().batch(3).map(lambda b: b), RAISE_HALF)
    assert _count_until_error(ds) == (16, True)
    after = WithOptionsIterDataset(_sparse(), RAISE_HALF).map(lambda x: x).batch(2)
    assert _count_until_error(after) == (25, True)


def test_options_on_one_branch_reach_a_filter_on_the_other() -> None:
    from chute.experimental import ZipIterDataset

    dense = MapDataset.range(3000).to_iter_dataset()
    zipped = ZipIterDataset([_sparse(), WithOptionsIterDataset(dense, RAISE_HALF)])
    assert _count_until_error(zipped) == (50, True)


def _dense(n: int = 3000) -> Any:
    return MapDataset.range(n).to_iter_dataset()


def test_options_after_an_interleave_reach_the_datasets_it_opens() -> None:
    from chute.experimental import InterleaveIterDataset

    chained = InterleaveIterDataset([_sparse(), _dense()], cycle_length=1)
    assert _count_until_error(WithOptionsIterDataset(chained, RAISE_HALF)) == (50, True)
    # Opened ahead on threads, each with read-ahead: 50 of each of the first two, then
    # the sparse one's window check.
    threaded = InterleaveIterDataset(
        [_sparse(), _dense(), _sparse()],
        cycle_length=2,
        num_make_iter_threads=2,
        iter_buffer_size=2,
    )
    assert _count_until_error(WithOptionsIterDataset(threaded, RAISE_HALF)) == (100, True)


def test_options_inside_an_interleave_stay_inside_and_lose_to_those_after() -> None:
    from chute.experimental import InterleaveIterDataset

    inside = WithOptionsIterDataset(_dense(), RAISE_HALF)
    chained = InterleaveIterDataset([inside, _dense()], cycle_length=1)
    assert _count_until_error(chained.filter(lambda x: x % 20 == 0)) == (300, False)
    off = WithOptionsIterDataset(_sparse(), DatasetOptions(filter_raise_threshold_ratio=None))
    chained = InterleaveIterDataset([off, _dense()], cycle_length=1)
    assert _count_until_error(WithOptionsIterDataset(chained, RAISE_HALF)) == (50, True)


def test_options_after_mp_prefetch_reach_its_workers() -> None:
    from chute import MultiprocessingOptions

    workers = _sparse().mp_prefetch(MultiprocessingOptions(num_workers=2))
    # Worker 1 reads odd numbers only: its filter drops its whole first window.
    assert _count_until_error(WithOptionsIterDataset(workers, RAISE_HALF)) == (1, True)


def test_workers_run_under_the_options_without_a_stage_of_their_own() -> None:
    from chute import MultiprocessingOptions
    from chute._core.pipeline_context import carried

    workers = _sparse().mp_prefetch(MultiprocessingOptions(num_workers=2))
    with iter(WithOptionsIterDataset(workers, RAISE_HALF)) as it:
        shares = [worker._dataset for worker in it._parents]
    assert all(not isinstance(share, WithOptionsIterDataset) for share in shares)
    assert [carried(share) for share in shares] == [RAISE_HALF, RAISE_HALF]
    assert carried(workers._parent) is None  # the user's pipeline is left as it was


def test_options_before_mp_prefetch_reach_the_stages_after_it() -> None:
    from chute import MultiprocessingOptions

    ds = WithOptionsIterDataset(_dense(), RAISE_HALF)
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2)).filter(lambda x: x % 20 == 0)
    assert _count_until_error(ds) == (50, True)


def test_a_restarted_mix_branch_reads_the_pipeline_options() -> None:
    from chute import IterDataset

    mixed = IterDataset.mix({"sparse": _sparse(), "dense": _dense()}, [1.0, 1.0])
    ds = WithOptionsIterDataset(mixed, RAISE_HALF)
    it = iter(ds)
    state = it.get_state()
    del state["parents"]["sparse"]  # a branch the checkpoint does not name starts anew
    it.set_state(state)
    assert _count_until_error(it) == (100, True)


@pytest.mark.parametrize(
    ("inner", "outer", "raises"),
    [
        (RAISE_HALF, DatasetOptions(filter_raise_threshold_ratio=None), False),
        (DatasetOptions(filter_raise_threshold_ratio=None), RAISE_HALF, True),
        (RAISE_HALF, DatasetOptions(min_shm_size=3), True),
        (DatasetOptions(min_shm_size=3), RAISE_HALF, True),
    ],
)
def test_later_options_win_field_by_field(
    inner: DatasetOptions, outer: DatasetOptions, raises: bool
) -> None:
    ds = WithOptionsIterDataset(WithOptionsIterDataset(_sparse(), inner), outer)
    assert _count_until_error(ds) == ((50, True) if raises else (150, False))


def test_without_a_budget_the_node_adds_no_stage() -> None:
    parent = MapDataset.range(5).to_iter_dataset()
    ds = WithOptionsIterDataset(parent, DatasetOptions(min_shm_size=64))
    it = iter(ds)
    assert next(it) == 0
    fingerprint = ["range over 5 elements", "to_iter_dataset"]
    assert it.get_state() == {
        "version": 1,
        "stage": "to_iter_dataset",
        "next_index": 1,
        "fingerprint": fingerprint,
    }
    assert ds.options == DatasetOptions(min_shm_size=64)
    assert_equal_output_after_checkpoint(ds)


def test_the_pipeline_context_merges_later_options_over_earlier() -> None:
    it = iter(
        WithOptionsIterDataset(
            WithOptionsIterDataset(
                MapDataset.range(3), DatasetOptions(min_shm_size=1, max_errors=2)
            ),
            DatasetOptions(min_shm_size=2),
        )
    )
    options = join(it).options
    assert (options.min_shm_size, options.max_errors) == (2, 2)


def fragile(x: int) -> int:
    if x % 5 == 3:
        raise KeyError(x)
    return x


GOOD = [x for x in range(30) if x % 5 != 3]


def test_max_errors_option_skips_failing_elements_like_skip_errors() -> None:
    base = MapDataset.range(30).map(fragile).to_iter_dataset()
    it = iter(WithOptionsIterDataset(base, DatasetOptions(max_errors=6)))
    assert list(it) == GOOD
    assert [e["index"] for e in it.skipped] == [3, 8, 13, 18, 23, 28]
    with pytest.raises(ErrorBudgetExceededError, match="max_errors=5"):
        list(WithOptionsIterDataset(base, DatasetOptions(max_errors=5)))
    assert list(skip_errors(base, max_errors=6)) == GOOD


def test_max_error_ratio_option_waits_for_min_elements() -> None:
    base = MapDataset.range(30).map(fragile).to_iter_dataset()
    lenient = DatasetOptions(max_error_ratio=0.1, error_min_elements=31)
    assert list(WithOptionsIterDataset(base, lenient)) == GOOD
    strict = DatasetOptions(max_error_ratio=0.1, error_min_elements=10)
    with pytest.raises(ErrorBudgetExceededError, match="max_error_ratio=0.1"):
        list(WithOptionsIterDataset(base, strict))


def test_a_later_budget_takes_over_an_earlier_one() -> None:
    base = MapDataset.range(30).map(fragile).to_iter_dataset()
    inner = skip_errors(base, max_errors=2).map(lambda x: x)
    it = iter(WithOptionsIterDataset(inner, DatasetOptions(max_errors=6)))
    assert list(it) == GOOD and len(it.skipped) == 6
    # Options without budget fields leave the earlier budget in charge.
    with pytest.raises(ErrorBudgetExceededError, match="max_errors=2"):
        list(WithOptionsIterDataset(skip_errors(base, max_errors=2), RAISE_HALF))
    # A later node's budget fields merge with the earlier node's.
    min_elements_only = WithOptionsIterDataset(
        skip_errors(base, max_errors=1), DatasetOptions(error_min_elements=5)
    )
    with pytest.raises(ErrorBudgetExceededError, match="max_errors=1"):
        list(min_elements_only)


def test_budget_checkpoints_carry_the_error_count() -> None:
    base = MapDataset.range(30).map(fragile).to_iter_dataset()
    ds = WithOptionsIterDataset(base, DatasetOptions(max_errors=7))
    it = iter(ds)
    assert [next(it) for _ in range(8)] == GOOD[:8]
    state = it.get_state()
    assert state["stage"] == "with_options" and state["tried"] == 10
    restored = iter(ds)
    restored.set_state(state)
    assert restored.skipped == it.skipped and len(restored.skipped) == 2
    assert_equal_output_after_checkpoint(ds.batch(4))
    assert_equal_output_after_checkpoint(
        WithOptionsIterDataset(base.filter(lambda x: x % 2 == 0), DatasetOptions(max_errors=6))
    )


def test_error_budget_dataset_is_with_options() -> None:
    ds = ErrorBudgetIterDataset(MapDataset.range(30).map(fragile), max_errors=6)
    assert isinstance(ds, WithOptionsIterDataset)
    assert ds.options.max_errors == 6 and ds.options.error_min_elements == 100
    assert iter(ds).get_state()["stage"] == "error_budget"


def test_filter_threshold_errors_are_not_skipped_by_a_budget() -> None:
    options = DatasetOptions(max_errors=100, filter_raise_threshold_ratio=0.5)
    assert _count_until_error(WithOptionsIterDataset(_sparse(), options)) == (50, True)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="DatasetOptions"):
        WithOptionsIterDataset(_sparse(), {"min_shm_size": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="DatasetOptions"):
        WithOptionsIterDataset(_sparse(), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="IterDataset or a MapDataset"):
        WithOptionsIterDataset([1, 2], DatasetOptions())  # type: ignore[arg-type]
    ds = WithOptionsIterDataset(MapDataset.range(3), DatasetOptions())
    assert list(ds) == [0, 1, 2]
