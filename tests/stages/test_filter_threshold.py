"""The check on how much an IterDataset filter drops, per window of 1,000 inputs.

Where a count of elements is asserted, it was observed from Grain 0.2.18
running the same pipeline (``grain.experimental.WithOptionsIterDataset``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from chute import FilterThresholdError, MapDataset
from chute._core.dataset_options import DatasetOptions
from chute._stages.conformance import assert_equal_output_after_checkpoint
from chute._stages.with_options import WithOptionsIterDataset


def _filtered(n: int, keep: Callable[[int], bool], **options: Any) -> WithOptionsIterDataset:
    ds = MapDataset.range(n).to_iter_dataset().filter(keep)
    return WithOptionsIterDataset(ds, DatasetOptions(**options))


def _read_until_error(ds: Any) -> tuple[list[Any], BaseException | None]:
    out: list[Any] = []
    try:
        for x in ds:
            out.append(x)
    except FilterThresholdError as exc:
        return out, exc
    return out, None


def test_raises_when_a_window_reaches_the_ratio() -> None:
    # Grain: raised after 50 elements (x % 20 == 0 keeps 5%).
    out, exc = _read_until_error(
        _filtered(5000, lambda x: x % 20 == 0, filter_raise_threshold_ratio=0.5)
    )
    assert len(out) == 50 and out[-1] == 980
    assert isinstance(exc, ValueError)
    message = str(exc)
    assert "stage filter(" in message and "<lambda>) dropped 95.00%" in message
    assert "filter_raise_threshold_ratio" in message and "WithOptionsIterDataset" in message


def test_the_ratio_is_reached_at_equality() -> None:
    # Grain raises with exactly 900 of 1000 dropped at 0.9 (after 99 elements) and
    # not with 499 of 1000 dropped at 0.5.
    out, exc = _read_until_error(
        _filtered(5000, lambda x: x % 1000 >= 900, filter_raise_threshold_ratio=0.9)
    )
    assert exc is not None and "90.00%" in str(exc)
    assert out[:2] == [900, 901] and len(out) == 100  # the window's kept elements all arrive
    out, exc = _read_until_error(
        _filtered(5000, lambda x: x % 1000 >= 499, filter_raise_threshold_ratio=0.5)
    )
    assert exc is None and len(out) == 2505


def test_windows_do_not_overlap_and_short_ones_are_not_checked() -> None:
    # Grain: 999 elements all dropped pass; 1000 raise before any element.
    assert _read_until_error(_filtered(999, lambda x: False, filter_raise_threshold_ratio=0.1)) == (
        [],
        None,
    )
    out, exc = _read_until_error(_filtered(1000, lambda x: False, filter_raise_threshold_ratio=0.1))
    assert out == [] and exc is not None
    # 40% dropped in 0-999, 50% in 1000-1999: raised in the second window, after 1100.
    out, exc = _read_until_error(
        _filtered(3000, lambda x: 500 <= x < 1500 or x < 100, filter_raise_threshold_ratio=0.5)
    )
    assert exc is not None and len(out) == 1100 and out[-1] == 1499


def test_zero_means_any_drop_and_none_means_off() -> None:
    # chute's choice: Grain treats 0.0 as "off"; here it fires on a single drop.
    out, exc = _read_until_error(
        _filtered(2000, lambda x: x != 1500, filter_raise_threshold_ratio=0.0)
    )
    assert exc is not None and "0.10%" in str(exc) and len(out) == 1999
    assert _read_until_error(_filtered(2000, lambda x: True, filter_raise_threshold_ratio=0.0)) == (
        list(range(2000)),
        None,
    )
    out, exc = _read_until_error(
        _filtered(2000, lambda x: False, filter_raise_threshold_ratio=None)
    )
    assert out == [] and exc is None


def test_the_iterator_goes_on_after_the_error_without_losing_elements() -> None:
    ds = _filtered(3000, lambda x: x % 20 == 19, filter_raise_threshold_ratio=0.5)
    it = iter(ds)
    got = []
    with pytest.raises(FilterThresholdError):
        while True:
            got.append(next(it))
    assert got[-1] == 999  # the window's last kept element came before the error
    state = it.get_state()
    rest = [next(it) for _ in range(3)]
    assert rest == [1019, 1039, 1059]
    restored = iter(ds)
    restored.set_state(state)
    assert [next(restored) for _ in range(3)] == rest


def test_a_state_saved_at_a_window_end_checks_that_window_on_restore() -> None:
    ds = _filtered(2000, lambda x: x % 20 == 19, filter_raise_threshold_ratio=0.5)
    it = iter(ds)
    for _ in range(50):
        last = next(it)
    assert last == 999
    restored = iter(ds)
    restored.set_state(it.get_state())
    with pytest.raises(FilterThresholdError):
        next(restored)


def test_default_warns_once_per_iterator(caplog: pytest.LogCaptureFixture) -> None:
    ds = MapDataset.range(5000).to_iter_dataset().filter(lambda x: x % 20 == 0)
    with caplog.at_level(logging.WARNING, logger="chute"):
        assert len(list(ds)) == 250
        assert len(list(ds)) == 250
    warnings = [r for r in caplog.records if "filter_warn_threshold_ratio=0.9" in r.getMessage()]
    assert len(warnings) == 2  # five bad windows each time, one warning per iterator


def test_warning_threshold_can_be_changed_or_turned_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="chute"):
        list(_filtered(3000, lambda x: x % 3 == 0, filter_warn_threshold_ratio=0.5))
        assert any("filter_warn_threshold_ratio=0.5" in r.getMessage() for r in caplog.records)
        caplog.clear()
        list(_filtered(3000, lambda x: False, filter_warn_threshold_ratio=None))
        list(MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 2 == 0))
    assert not caplog.records


def test_checkpoints_restore_exactly_with_the_drop_count() -> None:
    ds = _filtered(2600, lambda x: x % 4 == 0, filter_raise_threshold_ratio=0.8)
    assert_equal_output_after_checkpoint(ds, max_steps=None, restore_points=12)
    state = iter(ds).get_state()
    assert state["stage"] == "filter" and state["dropped"] == 0


def test_a_predicate_error_at_a_window_end_keeps_the_count() -> None:
    def picky(x: int) -> bool:
        if x == 999:
            raise KeyError(x)
        return x % 20 == 0

    it = iter(_filtered(2000, picky, filter_raise_threshold_ratio=0.5))
    assert [next(it) for _ in range(50)][-1] == 980
    with pytest.raises(KeyError) as info:
        next(it)
    assert "element index 999" in info.value.__notes__[0]
    with pytest.raises(FilterThresholdError, match="94.90%"):
        next(it)  # 949 of 0-999 dropped; the failing element counts as read, not dropped
    assert next(it) == 1000


def _errors_and_output(it: Any) -> tuple[list[int], list[Any]]:
    """Reads ``it`` to the end, noting after how many elements each threshold error came."""
    out: list[Any] = []
    raised: list[int] = []
    while True:
        try:
            out.append(next(it))
        except FilterThresholdError:
            raised.append(len(out))
        except StopIteration:
            return raised, out


def _map_filtered(n: int, read_options: Any, **options: Any) -> WithOptionsIterDataset:
    ds = MapDataset.range(n).filter(lambda x: x % 20 == 0).to_iter_dataset(read_options)
    return WithOptionsIterDataset(ds, DatasetOptions(**options))


def test_map_dataset_filter_holes_are_checked_after_each_whole_window(read_options: Any) -> None:
    ds = _map_filtered(3500, read_options, filter_raise_threshold_ratio=0.5)
    raised, out = _errors_and_output(iter(ds))
    assert raised == [50, 100, 150]  # after indices 999, 1999, 2999; 3000-3499 is short
    assert out == list(range(0, 3500, 20))


def test_map_dataset_filter_check_counts_only_whole_windows_after_a_restore() -> None:
    ds = _map_filtered(3000, None, filter_raise_threshold_ratio=0.5)
    it = iter(ds)
    read: list[int] = []
    while len(read) < 60:  # into the second window: up to index 1180
        try:
            read.append(next(it))
        except FilterThresholdError:
            pass
    restored = iter(ds)
    restored.set_state(it.get_state())
    raised, out = _errors_and_output(restored)
    assert raised == [90]  # window 1000-1999 is partial here; 2000-2999 (after 2980) is whole
    assert out == list(range(1200, 3000, 20))


def test_failed_reads_are_not_counted_as_filtered() -> None:
    def shaky(x: int) -> int:
        if x % 2:
            raise KeyError(x)
        return x

    ds = MapDataset.range(2000).map(shaky).to_iter_dataset()
    it = iter(WithOptionsIterDataset(ds, DatasetOptions(filter_raise_threshold_ratio=0.0)))
    out, failures = [], 0
    while True:
        try:
            out.append(next(it))
        except KeyError:
            failures += 1
        except StopIteration:
            break
    assert failures == 1000 and out == list(range(0, 2000, 2))
