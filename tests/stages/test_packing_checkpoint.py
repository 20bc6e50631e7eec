"""Packing stages: checkpoints, invariants against a reference, and bad input."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute import MapDataset, ReadOptions
from chute._stages.conformance import assert_equal_output_after_checkpoint
from chute._stages.packing_fit import BestFitPackIterDataset, FirstFitPackIterDataset

FF, BF = FirstFitPackIterDataset, BestFitPackIterDataset
INLINE = ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _ragged(count: int, seed: int = 0, top: int = 9) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "inputs": np.arange(n, dtype=np.int32) + 100 * i,
            "targets": np.arange(n // 2 + 1, dtype=np.int64) + 100 * i,
        }
        for i, n in enumerate(rng.integers(0, top, count).tolist())
    ]


def _ds(rows: list[Any], read_options: ReadOptions | None = None) -> Any:
    return MapDataset.source(rows).to_iter_dataset(read_options)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("cls", [FF, BF])
def test_restores_anywhere_mid_round(cls: type, shuffle: bool, read_options: ReadOptions) -> None:
    ds = cls(
        _ds(_ragged(60), read_options),
        length_struct={"inputs": 8, "targets": 5},
        num_packing_bins=3,
        shuffle_bins=shuffle,
        seed=4,
    )
    assert_equal_output_after_checkpoint(ds, max_steps=None)


@pytest.mark.parametrize("cls", [FF, BF])
def test_restores_with_every_option(cls: type) -> None:
    rows = [{**r, "id": k} for k, r in enumerate(_ragged(50, seed=1))]
    ds = cls(
        _ds(rows),
        length_struct={"inputs": 8, "targets": 5},
        num_packing_bins=4,
        seed=2,
        shuffle_bins_group_by_feature="targets",
        meta_features=["id", "targets"],
        pack_alignment_struct={"inputs": 2},
        padding_struct={"inputs": -1},
        max_sequences_per_bin=3,
    )
    assert_equal_output_after_checkpoint(ds, max_steps=None)


@pytest.mark.parametrize("cls", [FF, BF])
def test_restores_anywhere_with_a_nested_meta_feature(cls: type) -> None:
    rows = [
        {
            "row": np.arange(1 + i % 3) + 10 * i,
            "nested": {"a": np.full(2, i), "b": np.arange(i % 2)},
        }
        for i in range(23)
    ]
    ds = cls(
        MapDataset.source(rows).to_iter_dataset(),
        length_struct={"row": 6, "nested": {"a": 6, "b": 4}},
        num_packing_bins=2,
        meta_features=["nested"],
    )
    assert_equal_output_after_checkpoint(ds, max_steps=None)


def test_state_is_small_positions_not_buffers() -> None:
    rows = [{"inputs": np.arange(500, dtype=np.int32)} for _ in range(40)]
    it = iter(FF(_ds(rows), length_struct={"inputs": 1000}, num_packing_bins=8))
    next(it)
    state = it.get_state()
    assert len(json.dumps(state)) < 400
    assert state["stage"] == "first_fit_pack" and state["closed"] is True


def test_restoring_a_state_of_another_stage_is_refused() -> None:
    kw: dict[str, Any] = {"length_struct": {"inputs": 8}, "num_packing_bins": 2}
    state = iter(FF(_ds(_ragged(5)), **kw)).get_state()
    with pytest.raises(ValueError, match="best_fit_pack"):
        iter(BF(_ds(_ragged(5)), **kw)).set_state(state)


def test_parent_errors_pass_through_and_are_not_replayed() -> None:
    def explode(x: dict[str, Any]) -> dict[str, Any]:
        if int(x["inputs"][0]) == 300:
            raise KeyError("bad record")
        return x

    rows = [{"inputs": np.arange(4, dtype=np.int32) + 100 * i} for i in range(8)]
    ds = FF(_ds(rows).map(explode), length_struct={"inputs": 8}, num_packing_bins=2)
    it = iter(ds)
    with pytest.raises(KeyError, match="bad record") as info:
        next(it)
    assert "element index 3" in "".join(getattr(info.value, "__notes__", []))
    state = it.get_state()
    rest = [(x["inputs"].tolist(), x["inputs_segment_ids"].tolist()) for x in it]
    again = iter(ds)
    again.set_state(json.loads(json.dumps(state)))
    assert [(x["inputs"].tolist(), x["inputs_segment_ids"].tolist()) for x in again] == rest
    tokens = sorted(t for values, segs in rest for t, s in zip(values, segs) if s)
    assert tokens == sorted(t for i in (0, 1, 2, 4, 5, 6, 7) for t in range(100 * i, 100 * i + 4))


def _reference(lens: list[int], length: int, bins: int, best: bool) -> list[list[int]]:
    """Element indices per output bin, by a plain-Python packer (no shuffling)."""
    out: list[list[int]] = []
    room: list[int] = [length] * bins
    held: list[list[int]] = [[] for _ in range(bins)]
    for i, n in enumerate(lens):
        fits = [b for b in range(bins) if room[b] >= n]
        if not fits:
            out += [h for h in held if h]
            room, held = [length] * bins, [[] for _ in range(bins)]
            fits = list(range(bins))
        b = min(fits, key=lambda b: (room[b], b)) if best else fits[0]
        room[b] -= n
        held[b].append(i)
    return out + [h for h in held if h]


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(0, 12), max_size=40),
    bins=st.integers(1, 6),
    best=st.booleans(),
)
def test_packing_matches_a_plain_reference(lens: list[int], bins: int, best: bool) -> None:
    rows = [{"inputs": np.full(n, i + 1, np.int32), "id": i} for i, n in enumerate(lens)]
    cls = BF if best else FF
    out = list(
        cls(
            _ds(rows, INLINE),
            length_struct={"inputs": 12},
            num_packing_bins=bins,
            shuffle_bins=False,
            meta_features=["id"],
        )
    )
    assert [x["id"] for x in out] == _reference(lens, 12, bins, best)
    for x in out:
        expected = np.concatenate([np.full(lens[i], s, np.int32) for s, i in enumerate(x["id"], 1)])
        segs = x["inputs_segment_ids"]
        assert segs[: len(expected)].tolist() == expected.tolist()
        assert not segs[len(expected) :].any()
        assert (
            x["inputs"][segs > 0] == np.repeat(np.array(x["id"]) + 1, [lens[i] for i in x["id"]])
        ).all()


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length_struct": {"inputs": -4}}, ValueError, r"length_struct\['inputs'\] must be >= 0"),
        ({"length_struct": {"inputs": 4.0}}, TypeError, "must be an int"),
        ({"length_struct": 8}, TypeError, "non-empty dict"),
        ({"length_struct": {}}, TypeError, "non-empty dict"),
        ({"length_struct": {"a": {"x": 4.0}}}, TypeError, r"length_struct\['a'\]\['x'\]"),
        ({"num_packing_bins": 0}, ValueError, "num_packing_bins must be >= 1"),
        ({"num_packing_bins": -1}, ValueError, "num_packing_bins must be >= 1"),
        ({"num_packing_bins": 2.0}, TypeError, "num_packing_bins must be an int"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"seed": None}, TypeError, "seed must be an int"),
        ({"shuffle_bins": "yes"}, TypeError, "shuffle_bins must be a bool"),
        ({"meta_features": "inputs"}, TypeError, "list of feature names"),
        ({"pack_alignment_struct": {"inputs": 0}}, ValueError, "must be >= 1"),
        ({"pack_alignment_struct": {"other": 2}}, ValueError, "names \\['other'\\]"),
        ({"padding_struct": {"inputs": [1]}}, TypeError, "scalar padding value"),
        ({"max_sequences_per_bin": 0}, ValueError, "max_sequences_per_bin must be >= 1"),
        ({"shuffle_bins_group_by_feature": "zzz"}, ValueError, "not a feature of the packed"),
    ],
)
@pytest.mark.parametrize("cls", [FF, BF])
def test_bad_arguments_fail_at_construction(
    cls: type, kwargs: dict[str, Any], error: type, match: str
) -> None:
    kw: dict[str, Any] = {"length_struct": {"inputs": 4}, "num_packing_bins": 2, **kwargs}
    with pytest.raises(error, match=match):
        cls(_ds(_ragged(3)), **kw)


def test_a_map_dataset_parent_is_refused() -> None:
    with pytest.raises(TypeError, match="to_iter_dataset"):
        FF(MapDataset.range(3), length_struct={"inputs": 4}, num_packing_bins=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rows", "error", "match"),
    [
        ([{"inputs": np.arange(2)}, {"inputs": np.arange(9)}], ValueError,
         "element 1 has feature 'inputs' of length 9"),
        ([{"inputs": np.arange(2)}, {"other": np.arange(1)}], ValueError,
         r"element 1 lacks the features \['inputs'\]"),
        ([np.arange(3)], TypeError, "element 0 is a ndarray"),
        ([{"inputs": {"nested": 1}}], TypeError, "element 0, feature 'inputs'"),
        ([{"inputs": "text"}], TypeError, "element 0, feature 'inputs'"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("cls", [FF, BF])
def test_bad_elements_name_the_stage_and_index(
    cls: type, rows: list[Any], error: type, match: str
) -> None:
    ds = cls(_ds(rows), length_struct={"inputs": 4}, num_packing_bins=2)
    with pytest.raises(error, match=match) as info:
        list(ds)
    assert cls.__name__ in str(info.value)


def test_a_bad_element_is_skipped_and_the_rest_packed() -> None:
    rows = [{"inputs": np.arange(n) + 10 * k} for k, n in enumerate([2, 9, 3])]
    it = iter(FF(_ds(rows), length_struct={"inputs": 4}, num_packing_bins=2, shuffle_bins=False))
    with pytest.raises(ValueError, match="element 1"):
        next(it)
    assert [x["inputs"].tolist() for x in it] == [[0, 1, 0, 0], [20, 21, 22, 0]]


def test_missing_meta_feature_is_reported() -> None:
    ds = FF(_ds(_ragged(2)), length_struct={"inputs": 8}, num_packing_bins=1, meta_features=["id"])
    with pytest.raises(ValueError, match=r"element 0 lacks the features \['id'\]"):
        list(ds)


# -- failed pulls on restore ---------------------------------------------------------------


class _Flaky:
    """A map that raises ``ConnectionError`` once at element ``armed`` (once armed)."""

    def __init__(self, bad: tuple[int, ...] = ()) -> None:
        self.bad, self.armed = bad, None

    def __call__(self, x: dict[str, Any]) -> dict[str, Any]:
        i = int(x["id"])
        if i in self.bad:
            raise KeyError(f"bad record {i}")
        if i == self.armed:
            self.armed = None
            raise ConnectionError(f"the bucket did not answer for element {i}")
        return x


def _packed(fn: _Flaky) -> Any:
    rows = [{**r, "id": k} for k, r in enumerate(_ragged(40, seed=3))]
    return FF(
        _ds(rows, INLINE).map(fn),
        length_struct={"inputs": 8, "targets": 5},
        num_packing_bins=3,
        meta_features=["id"],
    )


def _ids(outputs: Any) -> list[list[int]]:
    return [[int(i) for i in x["id"]] for x in outputs]


def _drain_skipping(it: Any) -> list[Any]:
    out = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except KeyError:
            continue


@pytest.mark.parametrize("region", ["skip", "replay"])
def test_a_transient_error_while_restoring_raises_instead_of_dropping_an_element(
    region: str,
) -> None:
    it = iter(_packed(_Flaky()))
    for _ in range(4):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert state["skip"] > 0 and state["replay"] > 0  # both regions are replayed
    expected = _ids(it)
    base = state["index"] - state["skip"]  # the element the checkpoint's parent state is at
    fn = _Flaky()
    fn.armed = base + (0 if region == "skip" else state["skip"])
    again = iter(_packed(fn))
    with pytest.raises(ConnectionError, match="did not answer") as info:
        again.set_state(state)
    assert "did not fail in the run that saved the checkpoint" in "".join(info.value.__notes__)
    again.set_state(state)  # the cause has gone: the same state now restores in full
    assert _ids(again) == expected


def test_elements_that_failed_before_the_checkpoint_are_still_skipped_on_restore() -> None:
    bad = (2, 9, 10, 21)
    expected = _ids(_drain_skipping(iter(_packed(_Flaky(bad)))))
    assert all(i not in bad for b in expected for i in b)
    it, recorded = iter(_packed(_Flaky(bad))), 0
    for step in range(len(expected)):
        state = json.loads(json.dumps(it.get_state()))
        recorded += bool(state["failed"])
        again = iter(_packed(_Flaky(bad)))
        again.set_state(state)  # their errors again, now: passed over, as reported before
        assert _ids(_drain_skipping(again)) == expected[step:]
        _drain_skipping_one(it)
    assert recorded  # some states held failed pulls to pass over


def _drain_skipping_one(it: Any) -> Any:
    while True:
        try:
            return next(it)
        except KeyError:
            continue


def test_a_failed_pull_that_succeeds_on_restore_is_still_left_out() -> None:
    fn = _Flaky()
    rows_it = iter(_packed(fn))
    fn.armed = 5
    out = []
    while len(out) < 3:
        try:
            out.append(next(rows_it))
        except ConnectionError:
            pass
    state = json.loads(json.dumps(rows_it.get_state()))
    rest = _ids(rows_it)
    again = iter(_packed(_Flaky()))  # element 5 reads fine now
    again.set_state(state)
    assert _ids(again) == rest
    assert 5 not in [i for b in _ids(out) + rest for i in b]


def test_a_state_saved_without_failed_pulls_restores_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fn = _Flaky(bad=(4,))
    it = iter(_packed(fn))
    while True:
        try:
            next(it)
            break
        except KeyError:
            continue
    state = json.loads(json.dumps(it.get_state()))
    assert state["failed"]
    del state["failed"]  # as chute wrote it before it recorded failed pulls
    rest = _ids(_drain_skipping(it))
    again = iter(_packed(_Flaky(bad=(4,))))
    with caplog.at_level("WARNING", logger="chute"):
        again.set_state(state)
    assert _ids(again) == rest
    assert "does not record which pulls failed" in caplog.text


def test_an_error_after_a_restore_names_the_elements_own_index() -> None:
    it = iter(_packed(_Flaky()))
    for _ in range(4):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert state["skip"] > 0  # the round starts some pulls after the parent state
    again = iter(_packed(_Flaky(bad=(30,))))
    again.set_state(state)
    with pytest.raises(KeyError) as info:
        _ids(again)
    note = "chute: raised in stage FirstFitPackIterDataset while processing element index 30."
    assert note in info.value.__notes__
