"""User errors: raised unchanged with a note, nothing lost, exact state after."""

from __future__ import annotations

import pytest

from chute import ErrorBudgetExceededError, MapDataset, ReadOptions
from chute.experimental import (
    ErrorBudgetIterDataset,
    assert_equal_output_after_checkpoint,
    skip_errors,
)


class BadRecord(Exception):
    pass


def fragile(x: int) -> int:
    if x in (3, 7):
        raise BadRecord(f"record {x} is corrupt")
    return x


def _drain(it) -> tuple[list[int], list[BaseException]]:  # type: ignore[no-untyped-def]
    values, failures = [], []
    while True:
        try:
            values.append(next(it))
        except StopIteration:
            return values, failures
        except BadRecord as exc:
            failures.append(exc)


def test_user_exception_reaches_caller_unchanged_with_a_note(read_options: ReadOptions) -> None:
    it = iter(MapDataset.range(10).map(fragile).to_iter_dataset(read_options))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(BadRecord, match="record 3 is corrupt") as info:
        next(it)
    assert any("map(fragile)" in n and "element index 3" in n for n in info.value.__notes__)
    assert next(it) == 4  # next() carries on with the following element


def test_every_good_element_arrives_in_order(read_options: ReadOptions) -> None:
    values, failures = _drain(
        iter(MapDataset.range(12).shuffle(seed=0).map(fragile).to_iter_dataset(read_options))
    )
    assert sorted(values) == [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]
    assert len(failures) == 2
    expected = [x for x in MapDataset.range(12).shuffle(seed=0) if x not in (3, 7)]
    assert values == expected


def test_state_after_an_error_is_exact(read_options: ReadOptions) -> None:
    ds = MapDataset.range(10).map(fragile).to_iter_dataset(read_options)
    it = iter(ds)
    for _ in range(3):
        next(it)
    with pytest.raises(BadRecord):
        next(it)
    state = it.get_state()
    rest, _ = _drain(it)
    restored = iter(ds)
    restored.set_state(state)
    again, failures = _drain(restored)
    assert again == rest == [4, 5, 6, 8, 9]
    assert len(failures) == 1  # only element 7 fails after the restore


def test_iter_map_errors_note_the_position() -> None:
    it = iter(MapDataset.range(10).to_iter_dataset().map(fragile))
    values, failures = _drain(it)
    assert values == [0, 1, 2, 4, 5, 6, 8, 9]
    assert "element index 7" in failures[1].__notes__[0]


def test_elements_already_in_a_batch_stay_in_it(read_options: ReadOptions) -> None:
    ds = MapDataset.range(10).map(fragile).to_iter_dataset(read_options).batch(4)
    it = iter(ds)
    with pytest.raises(BadRecord):
        next(it)  # 0, 1, 2 pulled, then 3 fails
    state = it.get_state()
    first = next(it)
    assert first.tolist() == [0, 1, 2, 4]
    restored = iter(ds)
    restored.set_state(state)
    assert next(restored).tolist() == [0, 1, 2, 4]
    with pytest.raises(BadRecord):
        next(restored)  # 7 fails while filling the second batch
    assert next(restored).tolist() == [5, 6, 8, 9]


def test_source_errors_name_the_source() -> None:
    class Flaky:
        def __len__(self) -> int:
            return 5

        def __getitem__(self, index: int) -> int:
            if index == 2:
                raise OSError("disk hiccup")
            return index

    it = iter(MapDataset.source(Flaky()).to_iter_dataset())
    values = []
    with pytest.raises(OSError, match="disk hiccup") as info:
        while True:
            values.append(next(it))
    assert values == [0, 1]
    assert "source Flaky" in info.value.__notes__[0]
    assert list(it) == [3, 4]


def test_error_budget_skips_and_records_failures(read_options: ReadOptions) -> None:
    ds = skip_errors(MapDataset.range(10).map(fragile).to_iter_dataset(read_options), max_errors=2)
    it = iter(ds)
    assert list(it) == [0, 1, 2, 4, 5, 6, 8, 9]
    assert [(e["position"], e["index"], e["stage"]) for e in it.skipped] == [
        (3, 3, "map(fragile)"),
        (7, 7, "map(fragile)"),
    ]


def test_error_budget_raises_once_spent() -> None:
    ds = MapDataset.range(10).map(fragile).to_iter_dataset().pipe(skip_errors, max_errors=1)
    it = iter(ds)
    with pytest.raises(
        ErrorBudgetExceededError, match=r"2 of 8 elements failed.*max_errors=1"
    ) as info:
        list(it)
    assert isinstance(info.value.__cause__, BadRecord)


def test_error_budget_by_ratio() -> None:
    ds = ErrorBudgetIterDataset(
        MapDataset.range(10).map(fragile), max_error_ratio=0.1, min_elements=5
    )
    with pytest.raises(ErrorBudgetExceededError, match="max_error_ratio=0.1"):
        list(ds)
    assert (
        len(
            list(
                ErrorBudgetIterDataset(
                    MapDataset.range(10).map(fragile), max_error_ratio=0.3, min_elements=5
                )
            )
        )
        == 8
    )


def test_error_budget_carries_over_a_resume() -> None:
    ds = skip_errors(MapDataset.range(10).map(fragile).to_iter_dataset(), max_errors=1)
    it = iter(ds)
    assert [next(it) for _ in range(4)] == [0, 1, 2, 4]
    state = it.get_state()
    restored = iter(ds)
    restored.set_state(state)
    assert restored.skipped == it.skipped and len(it.skipped) == 1
    with pytest.raises(ErrorBudgetExceededError):
        list(restored)  # the second failure (7) spends the budget, as it would have


def test_error_budget_checkpoints_and_validation() -> None:
    ds = skip_errors(MapDataset.range(30).map(fragile).to_iter_dataset(), max_errors=5).batch(4)
    assert_equal_output_after_checkpoint(ds)
    with pytest.raises(ValueError, match="needs a budget"):
        skip_errors(MapDataset.range(3))
    with pytest.raises(ValueError, match=r"max_error_ratio must be in \[0, 1\]"):
        skip_errors(MapDataset.range(3), max_error_ratio=2.0)
