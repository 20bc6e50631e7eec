"""IterDataset.mix(on_exhausted=...): Grain's stop, or going on without a dataset that ran out."""

from __future__ import annotations

import json

import pytest

import chute
from chute.experimental import WeightSchedule


def _three() -> list[chute.IterDataset[int]]:
    return [
        chute.MapDataset.range(0, 3).to_iter_dataset(),
        chute.MapDataset.range(10, 20).to_iter_dataset(),
        chute.MapDataset.range(100, 105).to_iter_dataset(),
    ]


def test_the_default_stops_with_the_first_dataset_that_runs_out_as_grain() -> None:
    a, b, _ = _three()
    assert list(chute.IterDataset.mix([a, b])) == [0, 10, 1, 11, 2, 12]


def test_continue_goes_on_with_the_others_and_loses_nothing() -> None:
    mixed = chute.IterDataset.mix(_three(), [1, 2, 1], on_exhausted="continue")
    out = list(mixed)
    assert out == [0, 10, 11, 100, 1, 12, 13, 101, 2, 14, 15, 102, 16, 17, 103, 18, 19, 104]
    assert sorted(out) == [*range(3), *range(10, 20), *range(100, 105)]


@pytest.mark.parametrize("weights", [[1, 2, 1], WeightSchedule({0: [1, 1, 1], 7: [1, 3, 2]})])
def test_a_state_saved_anywhere_resumes_exactly_after_datasets_ran_out(weights: object) -> None:
    mixed = chute.IterDataset.mix(_three(), weights, on_exhausted="continue")
    whole = list(mixed)
    for k in range(len(whole) + 1):
        with iter(mixed) as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
        with iter(mixed) as again:
            again.set_state(state)
            assert list(again) == whole[k:], f"resumed after {k}"


def test_the_state_names_the_datasets_that_ran_out_only_once_one_has() -> None:
    mixed = chute.IterDataset.mix(_three(), on_exhausted="continue")
    with iter(mixed) as it:
        next(it)
        assert "exhausted" not in it.get_state()  # Grain's shape until then
        for _ in range(9):
            next(it)
        assert it.get_state()["exhausted"] == [True, False, False]


def test_a_bad_on_exhausted_and_a_bad_saved_list_are_refused() -> None:
    with pytest.raises(ValueError, match="on_exhausted must be 'stop'"):
        chute.IterDataset.mix(_three(), on_exhausted="skip")
    mixed = chute.IterDataset.mix(_three(), on_exhausted="continue")
    with iter(mixed) as it:
        state = it.get_state()
        state["exhausted"] = [True, True, True]
        with pytest.raises(chute.CheckpointError, match="exhausted"):
            it.set_state(state)
        assert next(it) == 0  # nothing changed


def test_a_state_with_chute_only_mix_fields_is_refused_for_grain() -> None:
    from chute.checkpoint import to_grain_state
    from chute.experimental import set_mix_weights

    a, b, _ = _three()
    with iter(chute.IterDataset.mix([a, b])) as it:
        next(it)
        assert to_grain_state(it)["index"] == 1  # Grain's shape crosses
        set_mix_weights(it, [1, 3])
        with pytest.raises(chute.CheckpointError, match="weights .* Grain's mix"):
            to_grain_state(it)
