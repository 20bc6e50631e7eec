"""Packing outputs on ragged data, against goldens observed from Grain 0.2.18.

Each golden lists, per output bin in Grain's order, the element index of each
segment (``None``: an empty sequence).  The test rebuilds the full expected
arrays from it (tokens, segment ids, positions, padding, alignment gaps) and
compares them with chute's whole output, keys and dtypes included.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chute import MapDataset
from chute._stages.packing_fit import BestFitPackIterDataset, FirstFitPackIterDataset

# fmt: off
# Lengths drawn once with random.Random(2024).lognormvariate (16 and 12 at most).
LENS_A = [4, 3, 3, 11, 3, 12, 8, 0, 4, 9, 2, 1, 4, 16, 3, 2, 3, 9, 9, 4, 16, 3, 4, 2, 1, 10, 1,
    7, 2, 2, 3, 6, 2, 2, 5, 2, 13, 16, 6, 5, 4, 7, 2, 7, 5, 3, 8, 6, 3, 2, 11, 1, 4, 2, 8, 6,
    14, 8, 4, 10]
LENS_B = [(1, 0), (4, 3), (4, 1), (1, 1), (10, 0), (1, 5), (4, 1), (5, 12), (3, 4), (8, 3),
    (9, 2), (6, 4), (3, 1), (6, 8), (10, 3), (2, 3), (14, 4), (7, 12), (8, 0), (1, 1), (2, 8),
    (3, 0), (1, 2), (6, 4), (16, 3), (4, 3), (3, 3), (4, 0), (4, 2), (12, 1), (6, 12), (6, 2),
    (5, 12), (9, 4), (6, 5), (7, 5), (3, 1), (3, 1), (14, 2), (6, 1), (4, 1), (2, 6), (3, 3),
    (13, 12), (1, 9), (12, 12), (8, 12), (9, 1), (7, 2), (5, 7)]
# fmt: on

CASES: dict[str, tuple[type, bool, dict[str, Any]]] = {
    "ff_shuffled": (
        FirstFitPackIterDataset,
        False,
        {"length_struct": {"inputs": 16}, "num_packing_bins": 4, "seed": 7},
    ),
    "bf_shuffled": (
        BestFitPackIterDataset,
        False,
        {"length_struct": {"inputs": 16}, "num_packing_bins": 4, "seed": 7},
    ),
    "ff_two_features": (
        FirstFitPackIterDataset,
        True,
        {
            "length_struct": {"inputs": 16, "targets": 12},
            "num_packing_bins": 3,
            "shuffle_bins": False,
        },
    ),
    "bf_two_features_aligned": (
        BestFitPackIterDataset,
        True,
        {
            "length_struct": {"inputs": 16, "targets": 12},
            "num_packing_bins": 3,
            "seed": 1,
            "pack_alignment_struct": {"inputs": 4, "targets": 1},
            "max_sequences_per_bin": 3,
        },
    ),
    "ff_grouped": (
        FirstFitPackIterDataset,
        False,
        {
            "length_struct": {"inputs": 16},
            "num_packing_bins": 5,
            "seed": 3,
            "shuffle_bins_group_by_feature": "inputs",
        },
    ),
    "bf_many_bins": (
        BestFitPackIterDataset,
        False,
        {"length_struct": {"inputs": 16}, "num_packing_bins": 9, "seed": 11},
    ),
}

# fmt: off
GOLDEN: dict[str, list[list[int | None]]] = {
    'ff_shuffled': [[0, 1, 2, 4], [5], [3, 8], [6], [17], [13], [9, 10, 11, 12], [14, 15, 16],
        [18, 19, 21], [22, 23, 24, 26, 27], [25, 28, 29], [20], [37], [34, 38, 39],
        [30, 31, 32, 33, 35], [36], [46, 47, 49], [50, 52], [43, 44, 48, 51], [40, 41, 42, 45],
        [59], [53, 54, 55], [57, 58], [56]],
    'bf_shuffled': [[0, 1, 2], [5, 8], [3, 4], [6], [17], [13], [9, 10, 11, 12], [14, 15, 16],
        [18, 19, 21], [22, 23, 24, 27, 28], [25, 26, 29, 30], [20], [38, 39, 40], [35, 36],
        [31, 32, 33, 34], [37], [47, 48, 49, 51, 52], [50, 53], [44, 45, 46], [41, 42, 43],
        [59], [54, 55], [57, 58], [56]],
    'ff_two_features': [[0, 1, 2, 3, 5, 6], [4, 7], [8, 9], [10, 11], [12, 13, 15], [14],
        [16, 19, 22], [17, 18], [20, 21, 23], [24], [25, 26, 27, 28], [29], [30], [31, 33],
        [32], [34, 35, 36], [37, 39, 40, 41], [38], [42, 44], [43], [45], [46], [47, 48], [49]],
    'bf_two_features_aligned': [[0, 1, 2], [3, 4], [5, 6], [7], [8, 9], [10], [11, 12, 15],
        [14], [13], [19, 20, 21], [17, 18], [16], [26, 27, 28], [24], [22, 23, 25], [30], [29],
        [31], [32], [33, 36], [34, 35], [38], [41, 42], [37, 39, 40], [44], [45], [43], [47],
        [48, 49], [46]],
    'ff_grouped': [[0, 1, 2, 4, None, 10, 11], [3, 8], [6], [5, 12], [9], [13],
        [14, 15, 16, 19, 21, 24], [18], [17, 22, 23], [20], [25, 26, 28, 29], [27, 30, 31],
        [32, 33, 34, 35], [36], [37], [38, 39, 40, 51], [41, 42, 43], [44, 45, 46],
        [47, 48, 49, 52], [50, 53], [54, 55], [56], [57, 58], [59]],
    'bf_many_bins': [[13], [17, 21, 22], [3, 4, None, 10], [20], [6, 16, 19], [9, 14, 15, 23],
        [5, 8], [18], [0, 1, 2, 11, 12, 24], [45, 46, 48], [41, 43, 49], [37], [25, 26, 28, 29],
        [47], [36, 42], [32, 33, 34, 35, 39], [27, 30, 31], [38, 40, 44], [57, 58], [59], [56],
        [50, 51, 52], [53, 54, 55]],
}
# fmt: on


def _data(two: bool) -> list[dict[str, np.ndarray]]:
    if not two:
        return [
            {"inputs": np.arange(n, dtype=np.int32) + 1000 * (i + 1)} for i, n in enumerate(LENS_A)
        ]
    return [
        {
            "inputs": np.arange(a, dtype=np.int32) + 1000 * (i + 1),
            "targets": np.arange(b, dtype=np.int32) + 1000 * (i + 1) + 500,
        }
        for i, (a, b) in enumerate(LENS_B)
    ]


def _expected(
    bins: list[list[int | None]], data: list[dict[str, np.ndarray]], kw: dict[str, Any]
) -> list[dict[str, np.ndarray]]:
    lengths, aligns = kw["length_struct"], kw.get("pack_alignment_struct", {})
    out = []
    for segments in bins:
        row: dict[str, np.ndarray] = {}
        ids: dict[str, np.ndarray] = {}
        for f, length in lengths.items():
            values = np.zeros(length, np.int32)
            seg, pos = np.zeros(length, np.int32), np.zeros(length, np.int32)
            offset, align = 0, aligns.get(f, 1)
            for s, i in enumerate(segments, 1):
                seq = data[i][f] if i is not None else np.zeros(0, np.int32)
                n = len(seq)
                values[offset : offset + n] = seq
                seg[offset : offset + n] = s
                pos[offset : offset + n] = np.arange(n)
                offset += -(-n // align) * align
            row[f] = values
            ids[f"{f}_segment_ids"], ids[f"{f}_positions"] = seg, pos
        ordered = dict(row)
        for f in lengths:
            ordered[f"{f}_segment_ids"] = ids[f"{f}_segment_ids"]
            ordered[f"{f}_positions"] = ids[f"{f}_positions"]
        out.append(ordered)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_packs_ragged_data_exactly_like_grain(name: str) -> None:
    cls, two, kw = CASES[name]
    data = _data(two)
    got = list(cls(MapDataset.source(data).to_iter_dataset(), **kw))
    want = _expected(GOLDEN[name], data, kw)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert list(g) == list(w), f"output {k} keys"
        for key in w:
            assert g[key].dtype == w[key].dtype, f"output {k}, {key}"
            assert g[key].tolist() == w[key].tolist(), f"output {k}, {key}"


def test_every_token_comes_out_once() -> None:
    for name, (cls, two, kw) in CASES.items():
        data = _data(two)
        got = list(cls(MapDataset.source(data).to_iter_dataset(), **kw))
        for f in kw["length_struct"]:
            tokens = np.concatenate([x[f][x[f"{f}_segment_ids"] > 0] for x in got])
            assert sorted(tokens.tolist()) == sorted(
                np.concatenate([d[f] for d in data]).tolist()
            ), name
