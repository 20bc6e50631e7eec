"""FirstFitPackIterDataset and BestFitPackIterDataset: what they produce.

Unless a test says otherwise, the expected outputs were observed from Grain
0.2.18 (``grain.experimental.FirstFitPackIterDataset`` /
``BestFitPackIterDataset``) on the same inputs and written here as literals.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chute import MapDataset
from chute._stages.packing_fit import BestFitPackIterDataset, FirstFitPackIterDataset

FF, BF = FirstFitPackIterDataset, BestFitPackIterDataset


def _rows(lens: list[Any], feats: tuple[str, ...] = ("inputs",)) -> list[dict[str, Any]]:
    """Element ``i`` holds, per feature ``j``, the tokens ``1000 * (i + 1) + 100 * j + k``."""
    rows = []
    for i, n in enumerate(lens):
        sizes = n if isinstance(n, tuple) else (n,) * len(feats)
        rows.append(
            {
                f: np.arange(size, dtype=np.int32) + 1000 * (i + 1) + 100 * j
                for j, (f, size) in enumerate(zip(feats, sizes))
            }
        )
    return rows


def _pack(cls: type, rows: list[Any], **kw: Any) -> list[dict[str, Any]]:
    kw.setdefault("shuffle_bins", False)
    return list(cls(MapDataset.source(rows).to_iter_dataset(), **kw))


def _lists(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in x.items()} for x in out
    ]


def _elements(out: list[dict[str, Any]], feature: str = "inputs") -> list[list[int | None]]:
    """Per output, the element index of each segment (None for an empty sequence)."""
    result = []
    for x in out:
        ids, values = x[f"{feature}_segment_ids"], x[feature]
        segs: list[int | None] = []
        for s in range(1, int(ids.max(initial=0)) + 1):
            hit = values[ids == s]
            segs.append(int(hit[0]) // 1000 - 1 if hit.size else None)
        result.append(segs)
    return result


@pytest.mark.parametrize("cls", [FF, BF])
def test_packs_sequences_into_bins_round_by_round(cls: type) -> None:
    out = _pack(cls, _rows([3, 5, 2, 4, 1, 6]), length_struct={"inputs": 8}, num_packing_bins=2)
    assert _lists(out) == [
        {
            "inputs": [1000, 1001, 1002, 2000, 2001, 2002, 2003, 2004],
            "inputs_segment_ids": [1, 1, 1, 2, 2, 2, 2, 2],
            "inputs_positions": [0, 1, 2, 0, 1, 2, 3, 4],
        },
        {
            "inputs": [3000, 3001, 4000, 4001, 4002, 4003, 5000, 0],
            "inputs_segment_ids": [1, 1, 2, 2, 2, 2, 3, 0],
            "inputs_positions": [0, 1, 0, 1, 2, 3, 0, 0],
        },
        {
            "inputs": [6000, 6001, 6002, 6003, 6004, 6005, 0, 0],
            "inputs_segment_ids": [1, 1, 1, 1, 1, 1, 0, 0],
            "inputs_positions": [0, 1, 2, 3, 4, 5, 0, 0],
        },
    ]
    assert {v.dtype for x in out for v in x.values()} == {np.dtype(np.int32)}


def test_a_round_ends_when_an_element_fits_no_bin() -> None:
    lens = [5, 5, 5, 2, 2, 2, 7, 1, 1, 3, 3, 8, 4]
    out = _pack(FF, _rows(lens), length_struct={"inputs": 8}, num_packing_bins=3)
    assert _elements(out) == [[0, 3], [1, 4], [2, 5], [6, 7], [8, 9, 10], [11], [12]]


def test_rounds_are_emitted_after_the_element_that_overflows_is_read() -> None:
    pulled: list[int] = []
    rows = _rows([8, 8, 8, 8])
    ds = MapDataset.source(rows).to_iter_dataset().map(lambda x: pulled.append(1) or x)
    it = iter(FF(ds, length_struct={"inputs": 8}, num_packing_bins=2, shuffle_bins=False))
    next(it)
    assert len(pulled) == 3  # two bins filled, then the element that fit neither
    next(it)
    assert len(pulled) == 3


def test_best_fit_takes_the_tightest_bin_and_first_fit_the_first() -> None:
    kw: dict[str, Any] = {"length_struct": {"inputs": 8}, "num_packing_bins": 3}
    assert _elements(_pack(FF, _rows([5, 7, 1]), **kw)) == [[0, 2], [1]]
    assert _elements(_pack(BF, _rows([5, 7, 1]), **kw)) == [[0], [1, 2]]
    # Ties go to the first bin.
    assert _elements(_pack(BF, _rows([6, 6, 2, 1, 1, 5]), **kw)) == [[0, 2], [1, 3, 4], [5]]


@pytest.mark.parametrize(
    ("lens", "expected"),
    [  # rooms after the first two: (1, 9) and (5, 3); best fit sums them: 10 > 8
        ([(7, 7), (3, 13), (1, 1)], [[0], [1, 2]]),
        ([(3, 13), (7, 7), (1, 1)], [[0, 2], [1]]),
        ([(2, 14), (6, 11), (1, 1)], [[0], [1, 2]]),  # (6, 2) vs (2, 5): 8 > 7
    ],
)
def test_best_fit_ranks_bins_by_room_summed_over_features(lens: list[Any], expected: Any) -> None:
    out = _pack(
        BF,
        _rows(lens, ("inputs", "targets")),
        length_struct={"inputs": 8, "targets": 16},
        num_packing_bins=3,
    )
    assert _elements(out) == expected


def test_an_element_fits_only_where_every_feature_fits() -> None:
    lens = [(3, 2), (5, 6), (2, 1), (4, 4), (1, 5), (6, 1), (2, 2)]
    out = _pack(
        FF,
        _rows(lens, ("inputs", "targets")),
        length_struct={"inputs": 8, "targets": 6},
        num_packing_bins=2,
    )
    assert _lists(out)[3] == {
        "inputs": [5000, 6000, 6001, 6002, 6003, 6004, 6005, 0],
        "targets": [5100, 5101, 5102, 5103, 5104, 6100],
        "inputs_segment_ids": [1, 2, 2, 2, 2, 2, 2, 0],
        "inputs_positions": [0, 0, 1, 2, 3, 4, 5, 0],
        "targets_segment_ids": [1, 1, 1, 1, 1, 2],
        "targets_positions": [0, 1, 2, 3, 4, 0],
    }
    assert _elements(out) == [[0, 2], [1], [3, 6], [4, 5]]


def test_keys_follow_length_struct_then_meta_features_then_ids() -> None:
    row = {"id": 1, "targets": np.array([1]), "w": np.array([7]), "inputs": np.array([2, 3])}
    lengths = {"inputs": 4, "w": 4, "targets": 4}
    for meta in (["w", "id"], ["id", "w"]):
        (out,) = _pack(FF, [row], length_struct=lengths, num_packing_bins=2, meta_features=meta)
        assert list(out) == [
            "inputs",
            "w",
            "targets",
            "id",
            "inputs_segment_ids",
            "inputs_positions",
            "targets_segment_ids",
            "targets_positions",
        ]


def test_meta_features_are_packed_or_listed() -> None:
    rows = [
        {"inputs": np.arange(1, 4), "id": np.int64(7), "w": np.array([0.5, 0.5, 0.5], np.float32)},
        {"inputs": np.arange(4, 6), "id": np.int64(8), "w": np.array([1.0, 2.0], np.float32)},
        {"inputs": np.arange(6, 13), "id": np.int64(9), "w": np.array([3.0] * 7, np.float32)},
    ]
    packed = _pack(
        FF, rows, length_struct={"inputs": 8, "w": 8}, num_packing_bins=2, meta_features=["w"]
    )
    assert list(packed[0]) == ["inputs", "w", "inputs_segment_ids", "inputs_positions"]
    assert packed[0]["w"].tolist() == [0.5, 0.5, 0.5, 1.0, 2.0, 0.0, 0.0, 0.0]
    listed = _pack(FF, rows, length_struct={"inputs": 8}, num_packing_bins=2, meta_features=["id"])
    assert [x["id"] for x in listed] == [[7, 8], [9]]
    assert "w" not in listed[0]  # named nowhere: dropped
    (first, _) = _pack(
        FF, rows, length_struct={"inputs": 8}, num_packing_bins=2, meta_features=["w"]
    )
    assert [w.tolist() for w in first["w"]] == [[0.5, 0.5, 0.5], [1.0, 2.0]]


def _nested_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(7):
        nested = {"a": np.full((2,), i), "b": np.arange(1 + i % 2) + 100 * i, "z": np.array([9])}
        rows.append({"row": np.arange(1 + i % 3) + 10 * i, "nested": nested, "tag": i})
    return rows


def _nested_lists(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**x, "nested": {k: v.tolist() for k, v in x["nested"].items()}} for x in _lists(out)]


@pytest.mark.parametrize("cls", [FF, BF])
def test_a_nested_meta_feature_is_packed_leaf_by_leaf_like_grain(cls: type) -> None:
    out = list(
        cls(
            MapDataset.source(_nested_rows()).to_iter_dataset(),
            length_struct={"row": 6, "nested": {"a": 6, "b": 4}},
            num_packing_bins=2,
            meta_features=["nested", "tag"],
            padding_struct={"row": -1, "nested": {"a": -2, "b": -3}},
        )
    )
    # Grain 0.2.18's output (shuffled bins, seed 0); the unnamed nested['z'] is dropped.
    assert _nested_lists(out) == [
        {
            "row": [0, 10, 11, 20, 21, 22],
            "nested": {"a": [0, 0, 1, 1, 2, 2], "b": [0, 100, 101, 200]},
            "tag": [0, 1, 2],
            "row_segment_ids": [1, 2, 2, 3, 3, 3],
            "row_positions": [0, 0, 1, 0, 1, 2],
        },
        {
            "row": [30, 40, 41, -1, -1, -1],
            "nested": {"a": [3, 3, 4, 4, -2, -2], "b": [300, 301, 400, -3]},
            "tag": [3, 4],
            "row_segment_ids": [1, 2, 2, 0, 0, 0],
            "row_positions": [0, 0, 1, 0, 0, 0],
        },
        {
            "row": [50, 51, 52, 60, -1, -1],
            "nested": {"a": [5, 5, 6, 6, -2, -2], "b": [500, 501, 600, -3]},
            "tag": [5, 6],
            "row_segment_ids": [1, 1, 1, 2, 0, 0],
            "row_positions": [0, 1, 2, 0, 0, 0],
        },
    ]


def test_a_nested_meta_feature_counts_for_the_fit_and_its_alignment() -> None:
    out = _pack(
        FF,
        _nested_rows(),
        length_struct={"row": 6, "nested": {"a": 6, "b": 4}},
        num_packing_bins=2,
        meta_features=["nested"],
        pack_alignment_struct={"row": 2, "nested": {"b": 4}},
        shuffle_bins=True,
    )
    # Grain 0.2.18: nested['b'] aligned to 4 fills its bin, so each bin holds one element.
    assert [x["row"].tolist() for x in out] == [
        [0, 0, 0, 0, 0, 0],
        [10, 11, 0, 0, 0, 0],
        [20, 21, 22, 0, 0, 0],
        [30, 0, 0, 0, 0, 0],
        [50, 51, 52, 0, 0, 0],
        [40, 41, 0, 0, 0, 0],
        [60, 0, 0, 0, 0, 0],
    ]
    assert [x["nested"]["b"].tolist() for x in out][:2] == [[0, 0, 0, 0], [100, 101, 0, 0]]


@pytest.mark.parametrize("cls", [FF, BF])
def test_an_unmarked_nested_feature_raises_grains_error_when_iterated(cls: type) -> None:
    ds = cls(
        MapDataset.source(_nested_rows()).to_iter_dataset(),
        length_struct={"row": 6, "nested": {"a": 6}},
        num_packing_bins=2,
    )
    with pytest.raises(ValueError) as info:
        next(iter(ds))
    message = str(info.value)
    assert message.startswith(
        "Failed to extract segment ids for 'nested', which has type <class 'dict'> rather "
        "than np.ndarray. Perhaps it should be marked as a meta feature? chute: "
    )
    assert "meta_features" in message.split("chute: ")[1]


def test_alignment_starts_each_sequence_on_a_multiple() -> None:
    rows = [
        {"inputs": np.arange(10 * i + 1, 10 * i + 1 + n)} for i, n in enumerate([3, 2, 5, 1, 4])
    ]
    out = _pack(
        FF,
        rows,
        length_struct={"inputs": 10},
        num_packing_bins=2,
        pack_alignment_struct={"inputs": 4},
    )
    assert _lists(out) == [
        {
            "inputs": [1, 2, 3, 0, 11, 12, 0, 0, 31, 0],
            "inputs_segment_ids": [1, 1, 1, 0, 2, 2, 0, 0, 3, 0],
            "inputs_positions": [0, 1, 2, 0, 0, 1, 0, 0, 0, 0],
        },
        {
            "inputs": [21, 22, 23, 24, 25, 0, 0, 0, 0, 0],
            "inputs_segment_ids": [1, 1, 1, 1, 1, 0, 0, 0, 0, 0],
            "inputs_positions": [0, 1, 2, 3, 4, 0, 0, 0, 0, 0],
        },
        {
            "inputs": [41, 42, 43, 44, 0, 0, 0, 0, 0, 0],
            "inputs_segment_ids": [1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
            "inputs_positions": [0, 1, 2, 3, 0, 0, 0, 0, 0, 0],
        },
    ]


def test_alignment_rounds_the_room_best_fit_compares() -> None:
    # Element 0 uses 8 of 12 (5 rounded up), element 1 too (8): a tie, so the first bin.
    rows = _rows([5, 8, 1])
    kw: dict[str, Any] = {"num_packing_bins": 3, "pack_alignment_struct": {"inputs": 4}}
    assert _elements(_pack(BF, rows, length_struct={"inputs": 12}, **kw)) == [[0, 2], [1]]
    # A bin whose rounded use passed its length takes nothing more, not even empty sequences.
    rows = [{"inputs": np.zeros(n, np.int32), "id": i} for i, n in enumerate([9, 5, 0])]
    for cls in (FF, BF):
        out = _pack(cls, rows, length_struct={"inputs": 10}, meta_features=["id"], **kw)
        assert [x["id"] for x in out] == [[0], [1, 2]]


def test_padding_struct_fills_the_padding() -> None:
    rows = [
        {"inputs": np.array([1, 2], np.int32), "targets": np.array([3], np.int32)},
        {"inputs": np.array([4], np.int32), "targets": np.array([5, 6, 7], np.int32)},
    ]
    (out,) = _pack(
        FF,
        rows,
        length_struct={"inputs": 4, "targets": 4},
        num_packing_bins=2,
        padding_struct={"inputs": -1, "targets": -2},
    )
    assert out["inputs"].tolist() == [1, 2, 4, -1]
    assert out["targets"].tolist() == [3, 5, 6, 7]
    assert out["inputs_segment_ids"].tolist() == [1, 1, 2, 0]
    floats = [{"inputs": np.array([1.0, 2.0], np.float32)}]
    (out,) = _pack(
        FF, floats, length_struct={"inputs": 4}, num_packing_bins=1, padding_struct={"inputs": 0.5}
    )
    assert out["inputs"].tolist() == [1.0, 2.0, 0.5, 0.5]


def test_max_sequences_per_bin_caps_each_bin() -> None:
    kw: dict[str, Any] = {"length_struct": {"inputs": 8}, "num_packing_bins": 2}
    one_each = _pack(FF, _rows([1, 1, 1, 1, 1, 1]), max_sequences_per_bin=2, **kw)
    assert _elements(one_each) == [[0, 1], [2, 3], [4, 5]]
    best = _pack(BF, _rows([4, 2, 3, 1, 1, 1]), max_sequences_per_bin=2, **kw)
    assert _elements(best) == [[0, 1], [2, 3], [4, 5]]
    # Empty sequences count too. (Grain's best fit lets them into a full bin: all five
    # in one bin; chute keeps the cap, as its first fit and Grain's first fit do.)
    empties = [{"inputs": np.zeros(0, np.int32), "id": i} for i in range(5)]
    for cls in (FF, BF):
        out = _pack(cls, empties, max_sequences_per_bin=2, meta_features=["id"], **kw)
        assert [x["id"] for x in out] == [[0, 1], [2, 3], [4]]


def test_empty_sequences_take_a_segment_id() -> None:
    (out,) = _pack(FF, _rows([3, 0, 2, 0, 0]), length_struct={"inputs": 8}, num_packing_bins=2)
    assert out["inputs"].tolist() == [1000, 1001, 1002, 3000, 3001, 0, 0, 0]
    assert out["inputs_segment_ids"].tolist() == [1, 1, 1, 3, 3, 0, 0, 0]
    (only,) = _pack(FF, _rows([0, 0]), length_struct={"inputs": 4}, num_packing_bins=3)
    assert only["inputs_segment_ids"].tolist() == [0, 0, 0, 0]


def test_dtypes_and_trailing_axes_are_kept() -> None:
    def one(value: Any, length: int = 4) -> list[Any]:
        return _pack(FF, [{"inputs": value}], length_struct={"inputs": length}, num_packing_bins=1)

    (x,) = one(np.array([1, 2, 3], np.int64))
    assert x["inputs"].dtype == np.int64 and x["inputs_segment_ids"].dtype == np.int32
    (x,) = one(np.array([True, False]))
    assert x["inputs"].tolist() == [True, False, False, False]
    (x,) = one(np.array(["a", "bc"]))
    assert x["inputs"].tolist() == ["a", "bc", "", ""]
    (x,) = one(np.arange(6).reshape(3, 2))
    assert x["inputs"].tolist() == [[0, 1], [2, 3], [4, 5], [0, 0]]
    (x,) = one(np.int32(3))  # a scalar is a sequence of one, as in Grain
    assert x["inputs"].tolist() == [3, 0, 0, 0]


def test_each_bin_takes_the_dtype_of_its_first_sequence() -> None:
    mixed = [{"inputs": np.array([1, 2], np.int32)}, {"inputs": np.array([4.5])}]
    (x,) = _pack(FF, mixed, length_struct={"inputs": 8}, num_packing_bins=2)
    assert x["inputs"].tolist() == [1, 2, 4, 0, 0, 0, 0, 0] and x["inputs"].dtype == np.int32
    (x,) = _pack(FF, mixed[::-1], length_struct={"inputs": 8}, num_packing_bins=2)
    assert x["inputs"].tolist() == [4.5, 1.0, 2.0, 0, 0, 0, 0, 0] and x["inputs"].dtype == float


@pytest.mark.parametrize(
    ("seed", "bins", "expected"),
    [  # Per round, which bin comes out k-th (Grain: default_rng(seed + bins before).permutation).
        (0, 2, [[0, 1], [0, 1], [1, 0], [1, 0]]),
        (0, 3, [[2, 0, 1], [2, 1, 0], [0, 1, 2], [2, 0, 1]]),
        (0, 5, [[2, 4, 3, 0, 1], [4, 3, 1, 2, 0], [3, 2, 4, 1, 0], [2, 0, 3, 4, 1]]),
        (
            1,
            8,
            [
                [5, 0, 1, 4, 2, 6, 3, 7],
                [3, 7, 5, 2, 4, 0, 6, 1],
                [1, 0, 6, 4, 2, 7, 5, 3],
                [6, 2, 1, 3, 5, 7, 0, 4],
            ],
        ),
        (42, 3, [[2, 1, 0], [2, 1, 0], [2, 0, 1], [1, 2, 0]]),
    ],
)
@pytest.mark.parametrize("cls", [FF, BF])
def test_shuffle_bins_orders_each_round_like_grain(
    cls: type, seed: int, bins: int, expected: list[list[int]]
) -> None:
    out = _pack(
        cls,
        _rows([8] * (4 * bins)),
        length_struct={"inputs": 8},
        num_packing_bins=bins,
        seed=seed,
        shuffle_bins=True,
    )
    order = [seg[0] for seg in _elements(out)]
    assert [[i - r * bins for i in order[r * bins : (r + 1) * bins]] for r in range(4)] == expected


def test_last_round_shuffles_only_its_used_bins() -> None:
    for seed, expected in [(0, [2, 0, 1]), (1, [0, 1, 2]), (3, [2, 1, 0]), (7, [0, 2, 1])]:
        out = _pack(
            FF, _rows([8, 8, 8]), length_struct={"inputs": 8}, num_packing_bins=5, seed=seed,
            shuffle_bins=True,
        )  # fmt: skip
        assert [seg[0] for seg in _elements(out)] == expected


def _grouped(groups: list[int], bins: int, seed: int) -> list[int]:
    rows = [{"inputs": np.full(8, i, np.int32), "g": np.int32(g)} for i, g in enumerate(groups)]
    out = _pack(
        FF,
        rows,
        length_struct={"inputs": 8},
        num_packing_bins=bins,
        meta_features=["g"],
        seed=seed,
        shuffle_bins=True,
        shuffle_bins_group_by_feature="g",
    )
    return [int(x["inputs"][0]) for x in out]


def test_group_by_feature_orders_bins_by_group_and_shuffles_within() -> None:
    groups = [3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2]
    assert _grouped(groups, 12, 0) == [6, 7, 4, 5, 11, 8, 10, 9, 1, 3, 2, 0]
    assert _grouped(groups, 12, 1) == [5, 6, 4, 7, 8, 11, 10, 9, 2, 3, 0, 1]
    assert _grouped([5, 4, 3, 2, 1, 0], 6, 1) == [5, 4, 3, 2, 1, 0]
    assert _grouped([-1, 2, -3, 0], 4, 0) == [2, 0, 3, 1]
    in_rounds = [0, 2, 1, 3, 4, 5, 6, 9, 7, 10, 8, 11]
    assert _grouped([0, 1, 0, 1, 2, 2, 0, 1, 2, 0, 1, 2], 6, 0) == in_rounds


def test_group_key_is_the_mean_of_the_distinct_nonzero_values() -> None:
    def first(a: list[int], b: list[int]) -> list[int]:
        rows = [{"inputs": np.array(a, np.int32)}, {"inputs": np.array(b, np.int32)}]
        out = _pack(
            FF, rows, length_struct={"inputs": 4}, num_packing_bins=2, max_sequences_per_bin=1,
            shuffle_bins=True, shuffle_bins_group_by_feature="inputs",
            padding_struct={"inputs": 7},
        )  # fmt: skip
        return out[0]["inputs"].tolist()

    # Distinct values {2, 7} (4.5) against {1, 7} (4): the second comes first, although
    # the plain means are 3.25 and 5.5.
    assert first([2, 2, 2], [1]) == [1, 7, 7, 7]
    assert first([3, 3, 3, 3], [1]) == [3, 3, 3, 3]  # {3} (3) before {1, 7} (4)


def test_without_shuffle_group_by_feature_changes_nothing() -> None:
    rows = [{"inputs": np.full(8, i, np.int32)} for i in (3, 1, 2)]
    out = _pack(
        FF, rows, length_struct={"inputs": 8}, num_packing_bins=3,
        shuffle_bins_group_by_feature="inputs",
    )  # fmt: skip
    assert [int(x["inputs"][0]) for x in out] == [3, 1, 2]
