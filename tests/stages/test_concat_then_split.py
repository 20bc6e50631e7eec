"""ConcatThenSplitIterDataset and BOSHandling.

The literal outputs marked "Grain 0.2.18" were observed by running Grain
0.2.18's ``grain.experimental.ConcatThenSplitIterDataset`` on the same input;
a differential run over thousands of random configurations found chute equal
to Grain wherever Grain produced output, except where an element with several
cuttable features is cut more than once (Grain repeats and loses tokens
there; see test_cuts_an_element_many_times_without_repeating_tokens).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute import IterDataset, MapDataset
from chute._core.errors import CheckpointError
from chute._stages.concat_then_split import BOSHandling, ConcatThenSplitIterDataset
from chute._stages.conformance import assert_equal_output_after_checkpoint
from chute.checkpoint import allow_pipeline_change

BOS = BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS


def _source(elements: list[Any]) -> IterDataset[Any]:
    return MapDataset.source(elements).to_iter_dataset()


def _pack(elements: list[Any], **kwargs: Any) -> list[dict[str, Any]]:
    return list(ConcatThenSplitIterDataset(_source(elements), **kwargs))


def _lists(outputs: list[dict[str, Any]], key: str) -> list[Any]:
    return [o[key].tolist() for o in outputs]


def _xs(lens: list[int]) -> list[dict[str, np.ndarray]]:
    """Element i holds x = 10 * i + (1, 2, ..., n)."""
    return [{"x": np.arange(1, n + 1) + 10 * i} for i, n in enumerate(lens)]


def _xy(x_lens: list[int], y_lens: list[int]) -> list[dict[str, np.ndarray]]:
    """Like _xs, plus y = -(10 * i + (1, 2, ..., m))."""
    return [
        {"x": np.arange(1, a + 1) + 10 * i, "y": -(np.arange(1, b + 1) + 10 * i)}
        for i, (a, b) in enumerate(zip(x_lens, y_lens))
    ]


def _xm(x_lens: list[int], m_lens: list[int]) -> list[dict[str, np.ndarray]]:
    """Like _xs, plus a feature m = 100 + 10 * i + (0, 1, ...)."""
    return [
        {"x": np.arange(1, a + 1) + 10 * i, "m": 100 + np.arange(b) + 10 * i}
        for i, (a, b) in enumerate(zip(x_lens, m_lens))
    ]


# -- one feature ------------------------------------------------------------------


@pytest.mark.parametrize("split", [True, False])
def test_packs_ragged_sequences_into_fixed_lengths_like_grain(split: bool) -> None:
    out = _pack(_xs([3, 5, 2, 7, 1, 4]), length_struct={"x": 6}, split_full_length_features=split)
    # Grain 0.2.18.
    assert _lists(out, "x") == [
        [1, 2, 3, 11, 12, 13],
        [14, 15, 21, 22, 31, 32],
        [33, 34, 35, 36, 37, 41],
        [51, 52, 53, 54, 0, 0],
    ]
    assert _lists(out, "x_segment_ids") == [
        [1, 1, 1, 2, 2, 2],
        [1, 1, 2, 2, 3, 3],
        [1, 1, 1, 1, 1, 2],
        [1, 1, 1, 1, 0, 0],
    ]
    assert _lists(out, "x_positions") == [
        [0, 1, 2, 0, 1, 2],
        [0, 1, 0, 1, 0, 1],
        [0, 1, 2, 3, 4, 0],
        [0, 1, 2, 3, 0, 0],
    ]
    assert [list(o) for o in out] == [["x", "x_segment_ids", "x_positions"]] * 4
    assert {o["x"].dtype for o in out} == {np.dtype(np.int64)}
    assert {o["x_segment_ids"].dtype for o in out} == {np.dtype(np.int32)}
    assert {o["x_positions"].dtype for o in out} == {np.dtype(np.int32)}


def test_cuts_long_sequences_and_restarts_positions_like_grain() -> None:
    out = _pack(_xs([6, 3, 6, 14, 2]), length_struct={"x": 6})
    # Grain 0.2.18.
    assert _lists(out, "x") == [
        [1, 2, 3, 4, 5, 6],
        [11, 12, 13, 21, 22, 23],
        [24, 25, 26, 31, 32, 33],
        [34, 35, 36, 37, 38, 39],
        [40, 41, 42, 43, 44, 41],
        [42, 0, 0, 0, 0, 0],
    ]
    assert _lists(out, "x_segment_ids") == [
        [1] * 6,
        [1, 1, 1, 2, 2, 2],
        [1, 1, 1, 2, 2, 2],
        [1] * 6,
        [1, 1, 1, 1, 1, 2],
        [1, 0, 0, 0, 0, 0],
    ]
    assert _lists(out, "x_positions") == [
        [0, 1, 2, 3, 4, 5],
        [0, 1, 2, 0, 1, 2],
        [0, 1, 2, 0, 1, 2],
        [0, 1, 2, 3, 4, 5],
        [0, 1, 2, 3, 4, 0],
        [0] * 6,
    ]


def test_full_length_elements_come_out_alone_after_the_next_pack_like_grain() -> None:
    out = _pack(_xs([6, 3, 6, 14, 2]), length_struct={"x": 6}, split_full_length_features=False)
    # Grain 0.2.18: elements 0 and 2 wait until the buffer (1, 3) first packs.
    assert _lists(out, "x") == [
        [11, 12, 13, 31, 32, 33],
        [1, 2, 3, 4, 5, 6],
        [21, 22, 23, 24, 25, 26],
        [34, 35, 36, 37, 38, 39],
        [40, 41, 42, 43, 44, 41],
        [42, 0, 0, 0, 0, 0],
    ]
    assert _lists(out, "x_segment_ids")[:3] == [[1, 1, 1, 2, 2, 2], [1] * 6, [1] * 6]


def test_empty_sequences_take_a_segment_id_and_no_tokens() -> None:
    out = _pack(_xs([2, 0, 3, 0]), length_struct={"x": 4})
    assert _lists(out, "x") == [[1, 2, 21, 22], [23, 0, 0, 0]]
    assert _lists(out, "x_segment_ids") == [[1, 1, 3, 3], [1, 0, 0, 0]]
    # Only empty elements still make one padded output; no elements make none.
    (empty,) = _pack(_xs([0, 0]), length_struct={"x": 3})
    assert empty["x"].tolist() == [0, 0, 0] and empty["x_segment_ids"].tolist() == [0, 0, 0]
    assert _pack([], length_struct={"x": 3}) == []


# -- several features --------------------------------------------------------------


def test_several_features_are_cut_at_their_own_room_like_grain() -> None:
    out = _pack(_xy([3, 2, 4, 1], [1, 4, 2, 3]), length_struct={"x": 6, "y": 4})
    # Grain 0.2.18: element 1 overflows y and leaves an x-less tail behind.
    assert _lists(out, "x") == [[1, 2, 3, 11, 12, 0], [21, 22, 23, 24, 31, 0], [0] * 6]
    assert _lists(out, "x_segment_ids") == [[1, 1, 1, 2, 2, 0], [2, 2, 2, 2, 3, 0], [0] * 6]
    assert _lists(out, "x_positions") == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0], [0] * 6]
    assert _lists(out, "y") == [[-1, -11, -12, -13], [-14, -21, -22, -31], [-32, -33, 0, 0]]
    assert _lists(out, "y_segment_ids") == [[1, 2, 2, 2], [1, 2, 2, 3], [1, 1, 0, 0]]
    assert _lists(out, "y_positions") == [[0, 0, 1, 2], [0, 0, 1, 0], [0, 1, 0, 0]]
    keys = ["x", "x_segment_ids", "x_positions", "y", "y_segment_ids", "y_positions"]
    assert [list(o) for o in out] == [keys] * 3


def test_packs_only_once_a_feature_exceeds_its_length_like_grain() -> None:
    # Grain 0.2.18: x is exactly full after element 1, so element 2 is pulled,
    # cut to no x tokens, and its y still joins the first output.
    out = _pack(_xy([3, 3, 2], [1, 1, 2]), length_struct={"x": 6, "y": 4})
    assert _lists(out, "x") == [[1, 2, 3, 11, 12, 13], [21, 22, 0, 0, 0, 0]]
    assert _lists(out, "y") == [[-1, -11, -21, -22], [0, 0, 0, 0]]
    assert _lists(out, "y_segment_ids") == [[1, 2, 3, 3], [0, 0, 0, 0]]
    assert _lists(out, "x_segment_ids") == [[1, 1, 1, 2, 2, 2], [1, 1, 0, 0, 0, 0]]
    # Grain 0.2.18: empty elements still count as segments.
    out = _pack(_xy([3, 0, 2, 0, 4], [1, 0, 0, 2, 1]), length_struct={"x": 6, "y": 4})
    assert _lists(out, "x") == [[1, 2, 3, 21, 22, 41], [42, 43, 44, 0, 0, 0]]
    assert _lists(out, "x_segment_ids") == [[1, 1, 1, 3, 3, 5], [1, 1, 1, 0, 0, 0]]
    assert _lists(out, "y") == [[-1, -31, -32, -41], [0, 0, 0, 0]]
    assert _lists(out, "y_segment_ids") == [[1, 4, 4, 5], [0, 0, 0, 0]]
    assert _lists(out, "y_positions") == [[0, 0, 1, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize(
    ("x_lens", "y_lens", "xs", "ys"),
    [  # Grain 0.2.18, split_full_length_features=False, length_struct={"x": 6, "y": 4}.
        (
            [3, 2, 4, 1],
            [1, 4, 2, 3],  # element 1 fills y exactly: out alone after the first pack
            [[1, 2, 3, 21, 22, 23], [11, 12, 0, 0, 0, 0], [24, 31, 0, 0, 0, 0]],
            [[-1, -21, -22, 0], [-11, -12, -13, -14], [-31, -32, -33, 0]],
        ),
        (
            [6, 2, 4, 1],
            [5, 4, 2, 3],  # element 0 fills x but overflows y: it is packed and cut
            [[1, 2, 3, 4, 5, 6], [21, 22, 23, 24, 31, 0], [11, 12, 0, 0, 0, 0], [0] * 6],
            [[-1, -2, -3, -4], [-5, -21, -22, -31], [-11, -12, -13, -14], [-32, -33, 0, 0]],
        ),
        (
            [7, 2, 4, 1],
            [4, 4, 2, 3],
            [[1, 2, 3, 4, 5, 6], [7, 21, 22, 23, 24, 31], [11, 12, 0, 0, 0, 0], [0] * 6],
            [[-1, -2, -3, -4], [-21, -22, -31, -32], [-11, -12, -13, -14], [-33, 0, 0, 0]],
        ),
        (
            [3, 6],
            [1, 1],  # at the end, the last pack comes before the waiting element
            [[1, 2, 3, 0, 0, 0], [11, 12, 13, 14, 15, 16]],
            [[-1, 0, 0, 0], [-11, 0, 0, 0]],
        ),
        (
            [3, 6, 6, 6, 3, 3],
            [1] * 6,
            [
                [1, 2, 3, 41, 42, 43],
                [11, 12, 13, 14, 15, 16],
                [21, 22, 23, 24, 25, 26],
                [31, 32, 33, 34, 35, 36],
                [51, 52, 53, 0, 0, 0],
            ],
            [[-1, -41, -51, 0], [-11, 0, 0, 0], [-21, 0, 0, 0], [-31, 0, 0, 0], [0] * 4],
        ),
    ],
)
def test_full_length_elements_with_several_features_like_grain(
    x_lens: list[int], y_lens: list[int], xs: list[Any], ys: list[Any]
) -> None:
    out = _pack(
        _xy(x_lens, y_lens), length_struct={"x": 6, "y": 4}, split_full_length_features=False
    )
    assert _lists(out, "x") == xs
    assert _lists(out, "y") == ys


def test_outputs_follow_the_order_of_length_struct_like_grain() -> None:
    element = {"b": np.arange(1), "z": np.arange(2), "a": np.arange(3)}
    (out,) = _pack([element], length_struct={"z": 3, "b": 2, "a": 4}, meta_features=["b"])
    # Grain 0.2.18.
    assert list(out) == [
        "z",
        "z_segment_ids",
        "z_positions",
        "b",
        "a",
        "a_segment_ids",
        "a_positions",
    ]


# -- meta features ----------------------------------------------------------------


def test_meta_features_repeat_in_both_parts_of_a_cut_like_grain() -> None:
    out = _pack(_xm([3, 5, 2, 7, 1], [1] * 5), length_struct={"x": 6, "m": 3}, meta_features=["m"])
    # Grain 0.2.18.
    assert _lists(out, "x") == [
        [1, 2, 3, 11, 12, 13],
        [14, 15, 21, 22, 31, 32],
        [33, 34, 35, 36, 37, 41],
    ]
    assert _lists(out, "m") == [[100, 110, 0], [110, 120, 130], [130, 140, 0]]
    assert [list(o) for o in out] == [["x", "x_segment_ids", "x_positions", "m"]] * 3


def test_an_element_whose_meta_feature_does_not_fit_waits_like_grain() -> None:
    out = _pack(_xm([3, 1, 2, 7, 1], [1] * 5), length_struct={"x": 6, "m": 2}, meta_features=["m"])
    # Grain 0.2.18: element 2's x would fit, but its m does not.
    assert _lists(out, "x") == [
        [1, 2, 3, 11, 0, 0],
        [21, 22, 31, 32, 33, 34],
        [35, 36, 37, 41, 0, 0],
    ]
    assert _lists(out, "x_segment_ids") == [
        [1, 1, 1, 2, 0, 0],
        [1, 1, 2, 2, 2, 2],
        [1, 1, 1, 2, 0, 0],
    ]
    assert _lists(out, "m") == [[100, 110], [120, 130], [130, 140]]
    out = _pack(_xm([3, 2, 1], [1, 2, 1]), length_struct={"x": 6, "m": 2}, meta_features=["m"])
    assert _lists(out, "x") == [[1, 2, 3, 0, 0, 0], [11, 12, 0, 0, 0, 0], [21, 0, 0, 0, 0, 0]]
    assert _lists(out, "m") == [[100, 0], [110, 111], [120, 0]]


def test_an_element_cut_to_no_tokens_brings_no_meta_like_grain() -> None:
    out = _pack(_xm([6, 2], [1, 1]), length_struct={"x": 6, "m": 3}, meta_features=["m"])
    # Grain 0.2.18: element 1 gets no room in x, so it waits whole.
    assert _lists(out, "m") == [[100, 0, 0], [110, 0, 0]]
    with_y = [dict(e, y=-np.array([10 * i + 1])) for i, e in enumerate(_xm([6, 2], [1, 1]))]
    out = _pack(with_y, length_struct={"x": 6, "m": 3, "y": 4}, meta_features=["m"])
    # Grain 0.2.18: with room in y, element 1 joins the first output, m included.
    assert _lists(out, "m") == [[100, 110, 0], [110, 0, 0]]
    assert _lists(out, "y") == [[-1, -11, 0, 0], [0, 0, 0, 0]]
    assert _lists(out, "x") == [[1, 2, 3, 4, 5, 6], [11, 12, 0, 0, 0, 0]]


@pytest.mark.parametrize(
    ("m_lens", "ms"),
    [  # Grain 0.2.18; a meta feature filling its length also makes an element full.
        ([1, 1, 1, 1, 1], [[100, 120, 130], [110, 0, 0], [130, 0, 0], [140, 0, 0]]),
        ([1, 3, 1, 1, 1], [[100, 120, 130], [110, 111, 112], [130, 0, 0], [140, 0, 0]]),
    ],
)
def test_meta_features_with_full_length_elements_like_grain(
    m_lens: list[int], ms: list[Any]
) -> None:
    x_lens = [3, 6, 2, 7, 1] if m_lens[1] == 1 else [3, 2, 2, 7, 1]
    out = _pack(
        _xm(x_lens, m_lens),
        length_struct={"x": 6, "m": 3},
        meta_features=["m"],
        split_full_length_features=False,
    )
    assert _lists(out, "m") == ms
    assert _lists(out, "x")[0] == [1, 2, 3, 21, 22, 31]
    assert _lists(out, "x")[2:] == [[32, 33, 34, 35, 36, 37], [41, 0, 0, 0, 0, 0]]


# -- BOS --------------------------------------------------------------------------


def test_bos_replaces_the_first_token_of_every_segment_like_grain() -> None:
    kwargs = {"bos_handling": BOS, "bos_features": ["x"], "bos_token_id": 99}
    out = _pack(_xs([3, 5, 2, 7, 1, 4]), length_struct={"x": 6}, **kwargs)
    # Grain 0.2.18.
    assert _lists(out, "x") == [
        [99, 2, 3, 99, 12, 13],
        [99, 15, 99, 22, 99, 32],
        [99, 34, 35, 36, 37, 99],
        [99, 52, 53, 54, 0, 0],
    ]
    out = _pack(_xs([6, 3, 6, 14, 2]), length_struct={"x": 6}, **kwargs)
    assert _lists(out, "x") == [
        [99, 2, 3, 4, 5, 6],
        [99, 12, 13, 99, 22, 23],
        [99, 25, 26, 99, 32, 33],
        [99, 35, 36, 37, 38, 39],
        [99, 41, 42, 43, 44, 99],
        [99, 0, 0, 0, 0, 0],
    ]
    out = _pack(
        _xs([6, 3, 6, 14, 2]), length_struct={"x": 6}, split_full_length_features=False, **kwargs
    )
    assert _lists(out, "x")[:3] == [
        [99, 12, 13, 99, 32, 33],
        [99, 2, 3, 4, 5, 6],
        [99, 22, 23, 24, 25, 26],
    ]


def test_bos_applies_only_to_bos_features_like_grain() -> None:
    elements = [
        {"x": np.arange(1, 4) + 10 * i, "y": -np.arange(1, 3) - 10 * i, "m": np.array([5 + i])}
        for i in range(3)
    ]
    out = _pack(
        elements,
        length_struct={"x": 4, "y": 3, "m": 3},
        meta_features=["m"],
        bos_handling=BOS,
        bos_features=["y"],
        bos_token_id=7,
    )
    # Grain 0.2.18; the last y segment is empty and, as in Grain, marks the next slot.
    assert _lists(out, "x") == [[1, 2, 3, 11], [12, 13, 21, 22], [23, 0, 0, 0]]
    assert _lists(out, "y") == [[7, -2, 7], [7, 7, -22], [7, 0, 0]]
    assert _lists(out, "y_segment_ids") == [[1, 1, 2], [1, 2, 2], [0, 0, 0]]
    assert _lists(out, "m") == [[5, 6, 0], [6, 7, 0], [7, 0, 0]]


def test_bos_keeps_dtype_and_fills_whole_rows_like_grain() -> None:
    kwargs = {"bos_handling": BOS, "bos_features": ["x"], "bos_token_id": 7}
    floats = [{"x": np.arange(3, dtype=np.float32) + i} for i in range(3)]
    out = _pack(floats, length_struct={"x": 4}, **kwargs)
    # Grain 0.2.18.
    assert _lists(out, "x") == [[7.0, 1.0, 2.0, 7.0], [7.0, 3.0, 7.0, 3.0], [7.0, 0.0, 0.0, 0.0]]
    assert out[0]["x"].dtype == np.float32
    rows = [{"x": np.ones((3, 2), np.int64) * i} for i in (1, 2)]
    out = _pack(rows, length_struct={"x": 4}, **kwargs)
    assert _lists(out, "x") == [
        [[7, 7], [1, 1], [1, 1], [7, 7]],
        [[7, 7], [2, 2], [0, 0], [0, 0]],
    ]


def test_bos_of_an_empty_segment_marks_the_next_slot_like_grain() -> None:
    kwargs = {"bos_handling": BOS, "bos_features": ["x"], "bos_token_id": 7}
    (out,) = _pack([{"x": np.arange(0)}, {"x": np.arange(2) + 5}], length_struct={"x": 3}, **kwargs)
    assert out["x"].tolist() == [7, 6, 0]  # Grain 0.2.18
    elements = [
        {"x": np.arange(1, 4), "y": np.arange(0)},
        {"x": np.arange(11, 13), "y": np.arange(0)},
    ]
    out = _pack(
        elements,
        length_struct={"x": 3, "y": 2},
        split_full_length_features=False,
        bos_handling=BOS,
        bos_features=["x", "y"],
        bos_token_id=7,
    )
    # Grain 0.2.18: y has no tokens, yet its first (padding) slot gets the BOS.
    assert _lists(out, "x") == [[7, 12, 0], [7, 2, 3]]
    assert _lists(out, "y") == [[7, 0], [7, 0]]
    assert _lists(out, "y_segment_ids") == [[0, 0], [0, 0]]


def test_bos_of_an_empty_segment_in_a_full_feature_is_dropped() -> None:
    # Grain raises IndexError here; chute has no slot left to mark and writes none.
    elements = [
        {"x": np.arange(1, 4), "y": np.array([-1])},
        {"x": np.arange(0), "y": np.array([-11])},
        {"x": np.array([21]), "y": np.array([-21])},
    ]
    out = _pack(
        elements,
        length_struct={"x": 3, "y": 3},
        bos_handling=BOS,
        bos_features=["x", "y"],
        bos_token_id=7,
    )
    assert _lists(out, "x") == [[7, 2, 3], [7, 0, 0]]
    assert _lists(out, "y") == [[7, 7, 7], [7, 0, 0]]  # the tail's empty y marks a slot
    assert _lists(out, "y_segment_ids") == [[1, 2, 3], [0, 0, 0]]


# -- dtypes, shapes, scalars ------------------------------------------------------


def test_keeps_dtypes_and_trailing_dimensions_like_grain() -> None:
    elements = [
        {"x": np.arange(3, dtype=np.float32) + i, "e": np.ones((3, 2), np.int16) * i}
        for i in range(3)
    ]
    out = _pack(elements, length_struct={"x": 4, "e": 4})
    # Grain 0.2.18.
    assert _lists(out, "x") == [[0.0, 1.0, 2.0, 1.0], [2.0, 3.0, 2.0, 3.0], [4.0, 0.0, 0.0, 0.0]]
    assert _lists(out, "e") == [
        [[0, 0], [0, 0], [0, 0], [1, 1]],
        [[1, 1], [1, 1], [2, 2], [2, 2]],
        [[2, 2], [0, 0], [0, 0], [0, 0]],
    ]
    assert [(o["x"].dtype, o["e"].dtype) for o in out] == [(np.float32, np.int16)] * 3
    assert _lists(out, "e_segment_ids") == [[1, 1, 1, 2], [1, 1, 2, 2], [1, 0, 0, 0]]


def test_output_takes_the_dtype_of_its_first_element_like_grain() -> None:
    ints_first = [{"x": np.array([1, 2], np.int32)}, {"x": np.array([3.5, 4.5])}]
    out = _pack(ints_first, length_struct={"x": 3})
    # Grain 0.2.18: 3.5 is cast into the int32 output; the tail starts a float64 one.
    assert _lists(out, "x") == [[1, 2, 3], [4.5, 0.0, 0.0]]
    assert [o["x"].dtype for o in out] == [np.int32, np.float64]
    lists = _pack([{"x": [1, 2, 3]}, {"x": [4, 5]}], length_struct={"x": 4})
    assert _lists(lists, "x") == [[1, 2, 3, 4], [5, 0, 0, 0]]
    flags = _pack(
        [{"x": np.array([True, False, True])}, {"x": np.array([True])}], length_struct={"x": 3}
    )
    assert _lists(flags, "x") == [[True, False, True], [True, False, False]]
    words = _pack([{"x": np.array(["a", "b"])}, {"x": np.array(["ccc"])}], length_struct={"x": 4})
    assert _lists(words, "x") == [["a", "b", "c", ""]]


def test_scalars_count_as_one_token_that_every_part_repeats_like_grain() -> None:
    elements = [{"x": np.arange(3) + 10 * i, "s": i} for i in range(4)]
    out = _pack(elements, length_struct={"x": 2, "s": 3})
    # Grain 0.2.18.
    assert _lists(out, "x") == [[0, 1], [2, 10], [11, 12], [20, 21], [22, 30], [31, 32]]
    assert _lists(out, "s") == [[0, 0, 0], [0, 1, 0], [1, 2, 0], [2, 0, 0], [2, 3, 0], [3, 0, 0]]
    assert _lists(out, "s_segment_ids")[:3] == [[1, 0, 0], [1, 2, 0], [1, 2, 0]]
    out = _pack(elements[:3], length_struct={"x": 4, "s": 2}, meta_features=["s"])
    assert _lists(out, "s") == [[0, 1], [1, 2], [2, 0]]  # Grain 0.2.18
    (one,) = _pack([{"x": 5}, {"x": 6}], length_struct={"x": 2})
    assert one["x"].tolist() == [5, 6] and one["x_segment_ids"].tolist() == [1, 2]


def test_a_scalar_without_room_skips_that_part() -> None:
    # Grain raises an internal error here.
    elements = [{"x": np.arange(3) + 10 * i, "s": i} for i in range(3)]
    out = _pack(elements, length_struct={"x": 4, "s": 1})
    assert _lists(out, "x") == [[0, 1, 2, 10], [11, 12, 20, 21], [22, 0, 0, 0]]
    assert _lists(out, "s") == [[0], [1], [2]]


# -- where chute differs from Grain ------------------------------------------------


def test_cuts_an_element_many_times_without_repeating_tokens() -> None:
    # Grain 0.2.18 yields y = [-1, -2], [], [-2], [], [-2], [-3] here: an element
    # with several cuttable features loses track of y when cut a second time.
    out = _pack([{"x": np.arange(1, 12), "y": -np.arange(1, 4)}], length_struct={"x": 2, "y": 2})
    assert _lists(out, "x") == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 0]]
    assert _lists(out, "y") == [[-1, -2], [-3, 0], [0, 0], [0, 0], [0, 0], [0, 0]]
    assert _lists(out, "y_segment_ids") == [[1, 1], [1, 0], [0, 0], [0, 0], [0, 0], [0, 0]]


# -- invariants ---------------------------------------------------------------------


def _tokens(outputs: list[dict[str, Any]], key: str) -> list[int]:
    return [t for o in outputs for t in o[key][o[f"{key}_segment_ids"] > 0].tolist()]


@settings(max_examples=60, deadline=None)
@given(
    x_lens=st.lists(st.integers(0, 20), max_size=12),
    y_extra=st.lists(st.integers(0, 9), min_size=12, max_size=12),
    x_len=st.integers(1, 8),
    y_len=st.integers(1, 8),
)
def test_every_token_comes_out_once_in_order(
    x_lens: list[int], y_extra: list[int], x_len: int, y_len: int
) -> None:
    elements = _xy(x_lens, y_extra[: len(x_lens)])
    out = _pack(elements, length_struct={"x": x_len, "y": y_len})
    for key in ("x", "y"):
        assert _tokens(out, key) == [t for e in elements for t in e[key].tolist()]
        for o in out:
            ids, positions = o[f"{key}_segment_ids"], o[f"{key}_positions"]
            used = ids > 0
            assert not used[np.argmin(used) :].any() or used.all()  # padding only at the end
            assert (np.diff(ids[used]) >= 0).all()
            starts = np.r_[True, ids[used][1:] != ids[used][:-1]]
            assert ((positions[used] == 0) == starts).all()
    held = _pack(elements, length_struct={"x": x_len, "y": y_len}, split_full_length_features=False)
    for key in ("x", "y"):
        assert sorted(_tokens(held, key)) == sorted(t for e in elements for t in e[key].tolist())


# -- checkpoints --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elements", "kwargs"),
    [
        (_xs([3, 5, 2, 7, 1, 4, 0, 9]), {"length_struct": {"x": 6}}),
        (
            _xs([6, 3, 6, 14, 2, 6, 6, 1]),
            {"length_struct": {"x": 6}, "split_full_length_features": False},
        ),
        (_xs([1, 25, 2, 13]), {"length_struct": {"x": 4}}),
        (
            [
                dict(e, y=-e["x"][: i % 3])
                for i, e in enumerate(_xm([3, 5, 2, 7, 1, 6], [1, 2] * 3))
            ],
            {
                "length_struct": {"x": 6, "m": 3, "y": 2},
                "meta_features": ["m"],
                "bos_handling": BOS,
                "bos_features": ["x"],
                "bos_token_id": -1,
            },
        ),
        (
            _xy([3, 6, 2, 7, 1, 5], [4, 1, 0, 9, 2, 4]),
            {"length_struct": {"x": 6, "y": 4}, "split_full_length_features": False},
        ),
        (
            [{"x": np.arange(3) + 10 * i, "s": i} for i in range(5)],
            {"length_struct": {"x": 2, "s": 3}},
        ),
    ],
)
def test_restores_anywhere_mid_output(elements: list[Any], kwargs: dict[str, Any]) -> None:
    ds = ConcatThenSplitIterDataset(_source(elements), **kwargs)
    assert_equal_output_after_checkpoint(ds, max_steps=None)


def test_state_holds_positions_not_tokens() -> None:
    ds = ConcatThenSplitIterDataset(_source(_xs([1000, 3])), length_struct={"x": 4})
    it = iter(ds)
    for _ in range(100):
        next(it)
    state = it.get_state()
    assert state["pulls"] == 1 and state["start"] == {"x": 400}
    assert len(json.dumps(state)) < 400
    fresh = iter(ds)
    fresh.set_state(state)
    assert next(fresh)["x"].tolist() == [401, 402, 403, 404]


def test_restore_fails_loudly_when_the_parent_is_shorter() -> None:
    it = iter(ConcatThenSplitIterDataset(_source(_xs([3, 5, 2])), length_struct={"x": 6}))
    next(it)
    state = it.get_state()
    shorter = iter(ConcatThenSplitIterDataset(_source(_xs([3])), length_struct={"x": 6}))
    with pytest.raises(CheckpointError, match="different pipeline"):
        shorter.set_state(state)
    allow_pipeline_change(shorter)  # past the fingerprint, the replay itself notices
    with pytest.raises(CheckpointError, match="parent ended"):
        shorter.set_state(state)


# -- bad input ----------------------------------------------------------------------


def _fails_on_element_two(i: int) -> dict[str, np.ndarray]:
    if i == 2:
        raise RuntimeError("boom")
    return {"x": np.arange(3) + 10 * i}


def test_a_failing_parent_element_is_skipped_and_checkpoints_stay_exact() -> None:
    ds = ConcatThenSplitIterDataset(
        MapDataset.range(6).map(_fails_on_element_two).to_iter_dataset(), length_struct={"x": 4}
    )
    it = iter(ds)
    assert next(it)["x"].tolist() == [0, 1, 2, 10]
    with pytest.raises(RuntimeError, match="boom"):
        next(it)
    state = it.get_state()
    rest = [o["x"].tolist() for o in it]
    assert rest == [[11, 12, 30, 31], [32, 40, 41, 42], [50, 51, 52, 0]]
    fresh = iter(ds)
    fresh.set_state(state)
    assert [o["x"].tolist() for o in fresh] == rest


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ({"y": np.arange(2)}, ValueError, r"parent element 1 has the features"),
        ({"x": np.arange(2), "y": 1}, ValueError, r"parent element 1 has the features"),
        (np.arange(2), ValueError, r"parent element 1 is a ndarray"),
        ({"x": np.zeros((2, 2))}, ValueError, r"feature 'x' of parent element 1 has shape"),
    ],
)
def test_bad_elements_raise_naming_the_stage_and_index(bad: Any, error: type, match: str) -> None:
    elements = [{"x": np.arange(3)}, bad, {"x": np.arange(5) + 10}]
    it = iter(ConcatThenSplitIterDataset(_source(elements), length_struct={"x": 4}))
    with pytest.raises(error, match=f"ConcatThenSplitIterDataset: {match}"):
        next(it)
    # The bad element is dropped; the others still come out.
    assert [o["x"].tolist() for o in it] == [[0, 1, 2, 10], [11, 12, 13, 14]]


def test_a_meta_feature_longer_than_its_length_raises() -> None:
    elements = [{"x": np.arange(3), "m": np.arange(3)}]
    ds = ConcatThenSplitIterDataset(
        _source(elements), length_struct={"x": 4, "m": 2}, meta_features=["m"]
    )
    with pytest.raises(ValueError, match="parent element 0: meta feature 'm' has 3 entries"):
        list(ds)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length_struct": {"x": 0}}, ValueError, r"length_struct\['x'\] must be >= 1"),
        ({"length_struct": {"x": -2}}, ValueError, r"must be >= 1"),
        ({"length_struct": {"x": 2.0}}, TypeError, r"must be an int"),
        ({"length_struct": {}}, TypeError, "non-empty dict"),
        ({"length_struct": [("x", 3)]}, TypeError, "non-empty dict"),
        ({"length_struct": {"x": 3, "x_positions": 3}}, ValueError, "clash"),
        ({"length_struct": {"x": 3}, "meta_features": "x"}, TypeError, "collection of"),
        ({"length_struct": {"x": 3}, "meta_features": ["q"]}, ValueError, "not in length_struct"),
        ({"length_struct": {"x": 3}, "split_full_length_features": 0}, TypeError, "a bool"),
        ({"length_struct": {"x": 3}, "bos_handling": 2}, TypeError, "BOSHandling member"),
        ({"length_struct": {"x": 3}, "bos_features": ["x"]}, ValueError, "DO_NOTHING"),
        (
            {"length_struct": {"x": 3}, "bos_handling": BOS, "bos_features": ["x"]},
            ValueError,
            "needs both bos_token_id and bos_features",
        ),
        (
            {"length_struct": {"x": 3}, "bos_handling": BOS, "bos_token_id": 1},
            ValueError,
            "needs both bos_token_id and bos_features",
        ),
        (
            {
                "length_struct": {"x": 3},
                "bos_handling": BOS,
                "bos_features": ["z"],
                "bos_token_id": 1,
            },
            ValueError,
            "not in length_struct",
        ),
        (
            {
                "length_struct": {"x": 3, "m": 2},
                "meta_features": ["m"],
                "bos_handling": BOS,
                "bos_features": ["m"],
                "bos_token_id": 1,
            },
            ValueError,
            "overlap",
        ),
        (
            {
                "length_struct": {"x": 3},
                "bos_handling": BOS,
                "bos_features": ["x"],
                "bos_token_id": 1.5,
            },
            TypeError,
            "bos_token_id must be an int",
        ),
    ],
)
def test_rejects_bad_arguments_when_built(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ConcatThenSplitIterDataset(_source(_xs([3])), **kwargs)


def test_rejects_a_map_dataset_and_positional_lengths() -> None:
    with pytest.raises(TypeError, match="to_iter_dataset"):
        ConcatThenSplitIterDataset(MapDataset.source(_xs([3])), length_struct={"x": 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ConcatThenSplitIterDataset(_source(_xs([3])), {"x": 3})  # type: ignore[misc]


def test_bos_handling_members_match_grain() -> None:
    assert [(m.name, m.value) for m in BOSHandling] == [
        ("DO_NOTHING", 1),
        ("REPLACE_FIRST_TOKEN_WITH_BOS", 2),
    ]
    # Like Grain, a bos_token_id without BOS handling is refused, not silently unused.
    with pytest.raises(ValueError, match="indicates that BOS handling is not used"):
        _pack(_xs([2]), length_struct={"x": 3}, bos_token_id=5)
    assert "length_struct={'x': 3}" in repr(
        ConcatThenSplitIterDataset(_source([]), length_struct={"x": 3})
    )
