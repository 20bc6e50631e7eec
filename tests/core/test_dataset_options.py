"""DatasetOptions: defaults, explicit fields, merge precedence, validation."""

from __future__ import annotations

import pickle

import pytest

from chute._core.dataset_options import DatasetOptions, ExecutionTrackingMode


def test_defaults_match_grain() -> None:
    options = DatasetOptions()
    assert options.filter_warn_threshold_ratio == 0.9
    assert options.filter_raise_threshold_ratio is None
    assert options.execution_tracking_mode is ExecutionTrackingMode.DISABLED
    assert options.min_shm_size == 0
    # chute's own error-budget fields are off by default.
    assert options.max_errors is None
    assert options.max_error_ratio is None
    assert options.error_min_elements == 100


def test_execution_tracking_mode_members_match_grain() -> None:
    # Observed from Grain 0.2.18: DISABLED = 1, STAGE_TIMING = 2.
    assert [(m.name, m.value) for m in ExecutionTrackingMode] == [
        ("DISABLED", 1),
        ("STAGE_TIMING", 2),
    ]


def test_merge_prefers_explicit_fields_of_self_then_other() -> None:
    # The example of Grain's merge() docstring, and its observed result.
    merged = DatasetOptions(min_shm_size=1024).merge(
        DatasetOptions(min_shm_size=512, filter_warn_threshold_ratio=None)
    )
    assert merged.min_shm_size == 1024
    assert merged.filter_warn_threshold_ratio is None
    assert merged == DatasetOptions(min_shm_size=1024, filter_warn_threshold_ratio=None)


def test_a_field_set_to_its_default_still_wins_a_merge() -> None:
    merged = DatasetOptions(filter_warn_threshold_ratio=0.9).merge(
        DatasetOptions(filter_warn_threshold_ratio=0.5)
    )
    assert merged.filter_warn_threshold_ratio == 0.9
    unset = DatasetOptions().merge(DatasetOptions(filter_warn_threshold_ratio=0.5))
    assert unset.filter_warn_threshold_ratio == 0.5


def test_merge_with_none_returns_the_same_options() -> None:
    options = DatasetOptions(min_shm_size=3)
    assert options.merge(None) is options


def test_equality_tells_explicit_from_default_values() -> None:
    # As in Grain: options that set a field to its default differ from unset ones.
    assert DatasetOptions() == DatasetOptions()
    assert DatasetOptions() != DatasetOptions(filter_warn_threshold_ratio=0.9)
    assert hash(DatasetOptions(min_shm_size=2)) == hash(DatasetOptions(min_shm_size=2))


def test_repr_shows_the_explicit_fields_and_round_trips() -> None:
    options = DatasetOptions(
        max_errors=3, execution_tracking_mode=ExecutionTrackingMode.STAGE_TIMING
    )
    assert repr(DatasetOptions()) == "DatasetOptions()"
    text = repr(options)
    assert "max_errors=3" in text and "STAGE_TIMING" in text
    assert "min_shm_size" not in text


def test_options_are_immutable_and_pickle() -> None:
    options = DatasetOptions(filter_raise_threshold_ratio=0.5, max_error_ratio=0.1)
    with pytest.raises(AttributeError, match="immutable"):
        options.min_shm_size = 5  # type: ignore[misc]
    restored = pickle.loads(pickle.dumps(options))
    assert restored == options
    assert restored.merge(DatasetOptions(min_shm_size=7)).min_shm_size == 7


def test_options_take_keywords_only() -> None:
    with pytest.raises(TypeError):
        DatasetOptions(0.5)  # type: ignore[misc]
    with pytest.raises(TypeError):
        DatasetOptions(unknown=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        ("filter_warn_threshold_ratio", 1.5, ValueError, r"must be in \[0, 1\]"),
        ("filter_warn_threshold_ratio", -0.1, ValueError, r"must be in \[0, 1\]"),
        ("filter_warn_threshold_ratio", float("nan"), ValueError, r"must be in \[0, 1\]"),
        ("filter_raise_threshold_ratio", "0.5", TypeError, "must be a number"),
        ("filter_raise_threshold_ratio", True, TypeError, "must be a number"),
        ("execution_tracking_mode", 2, TypeError, "ExecutionTrackingMode"),
        ("execution_tracking_mode", "STAGE_TIMING", TypeError, "ExecutionTrackingMode"),
        ("min_shm_size", -1, ValueError, "must be >= 0"),
        ("min_shm_size", 1.5, TypeError, "must be an int"),
        ("max_errors", -1, ValueError, "must be >= 0"),
        ("max_errors", 2.0, TypeError, "must be an int"),
        ("max_error_ratio", 2, ValueError, r"must be in \[0, 1\]"),
        ("error_min_elements", 0, ValueError, "must be >= 1"),
        ("error_min_elements", None, TypeError, "must be an int"),
    ],
)
def test_bad_values_are_refused_with_the_field_name(
    field: str, value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message) as info:
        DatasetOptions(**{field: value})  # type: ignore[arg-type]
    assert field in str(info.value)


def test_ratios_accept_the_ends_of_the_range_and_none() -> None:
    options = DatasetOptions(
        filter_warn_threshold_ratio=0, filter_raise_threshold_ratio=1, max_error_ratio=None
    )
    assert options.filter_warn_threshold_ratio == 0.0
    assert options.filter_raise_threshold_ratio == 1.0


def test_merge_refuses_other_types() -> None:
    with pytest.raises(TypeError, match="DatasetOptions or None"):
        DatasetOptions().merge({"min_shm_size": 1})  # type: ignore[arg-type]
