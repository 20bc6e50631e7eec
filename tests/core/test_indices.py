"""What an index means, stage by stage: Grain 0.2.18's answers, measured and pinned.

Every integer is an index: ``i`` reads position ``i % len`` of epoch ``i // len``
(``chute._core.indexing``).  The literals below were measured by running Grain
0.2.18 on the same pipelines (``ds[i]``, ``ds._getitems(list)``, ``ds[-3:]`` and
``ds[::-1]``); Grain itself is never imported here.  Where Grain's answer is an
accident, chute's deliberate answer is tested at the end (README: "Where chute
differs from Grain on purpose").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from chute import MapDataset, ReadOptions
from chute.experimental import (
    FlatMapMapDataset,
    FlatMapTransform,
    WindowShuffleMapDataset,
    ZipMapDataset,
)


class Split(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x: int) -> list[int]:
        return [x, x + 100][: 1 + x % 2]


class Alternate:
    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> tuple[int, int]:
        return i % 2, i // 2


class Echo:
    """A source whose records are computed from the index it is handed."""

    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int) -> int:
        return i * 10


def _even(x: int) -> bool:
    return x % 2 == 0


R = MapDataset.range
STAGES: dict[str, Callable[[], MapDataset[Any]]] = {
    "range": lambda: R(10),
    "range_step": lambda: R(2, 20, 3),
    "source_list": lambda: MapDataset.source(list("abcdefg")),
    "source_array": lambda: MapDataset.source(np.arange(7) * 10),
    "source_echo": lambda: MapDataset.source(Echo()),
    "shuffle": lambda: R(10).shuffle(seed=5),
    "shuffle_twice": lambda: R(6).shuffle(seed=1).shuffle(seed=2),
    "repeat_forever": lambda: R(4).repeat(),
    "repeat_3": lambda: R(4).repeat(3),
    "repeat_same_epochs": lambda: R(4).shuffle(seed=1).repeat(3, reseed_each_epoch=False),
    "shuffle_repeat": lambda: R(4).shuffle(seed=3).repeat(2),
    "slice": lambda: R(10)[2:8],
    "slice_reversed": lambda: R(10)[::-1],
    "slice_tail": lambda: R(10)[-3:],
    "shuffle_slice": lambda: R(10).shuffle(seed=5)[1:9:2],
    "map": lambda: R(10).map(lambda x: x * 10),
    "map_with_index": lambda: R(10).map_with_index(lambda i, x: (i, x)),
    "shuffle_map_with_index": lambda: R(5).shuffle(seed=4).map_with_index(lambda i, x: (i, x)),
    "filter": lambda: R(10).filter(_even),
    "concatenate": lambda: MapDataset.concatenate([R(3), R(10, 15)]),
    "mix": lambda: MapDataset.mix([R(3), R(10, 13)]),
    "mix_weighted": lambda: MapDataset.mix([R(4), R(10, 12)], weights=[2, 1]),
    "select_from_datasets": lambda: MapDataset.select_from_datasets([R(3), R(10, 13)], Alternate()),
    "zip": lambda: ZipMapDataset([R(5), R(10, 15).shuffle(seed=2)]),
    "flat_map": lambda: FlatMapMapDataset(R(5), Split()),
    "batch": lambda: R(10).batch(3),
    "batch_drop_remainder": lambda: R(10).batch(3, drop_remainder=True),
    "shuffle_batch": lambda: R(10).shuffle(seed=5).batch(4),
    "repeat_batch": lambda: R(4).repeat(3).batch(5),
}

# ds[index] -> Grain's element, for index in -1, -2, -len, -len - 1, 0, len, len + 3,
# 2 * len and numpy integers (np.int32 only where Grain does not raise; see below).
GRAIN_ANSWERS = {
    "range": [
        (-1, 9),
        (-2, 8),
        (-10, 0),
        (-11, 9),
        (0, 0),
        (10, 0),
        (13, 3),
        (20, 0),
        (np.int64(3), np.int64(3)),
        (np.int64(-1), np.int64(9)),
        (np.int32(3), np.int32(3)),
        (np.int32(-1), np.int32(9)),
    ],
    "range_step": [
        (-1, 17),
        (-2, 14),
        (-6, 2),
        (-7, 17),
        (0, 2),
        (6, 2),
        (9, 11),
        (12, 2),
        (np.int64(3), np.int64(11)),
        (np.int64(-1), np.int64(17)),
        (np.int32(3), np.int32(11)),
        (np.int32(-1), np.int32(17)),
    ],
    "source_list": [
        (-1, "g"),
        (-2, "f"),
        (-7, "a"),
        (-8, "g"),
        (0, "a"),
        (7, "a"),
        (10, "d"),
        (14, "a"),
        (np.int64(3), "d"),
        (np.int64(-1), "g"),
        (np.int32(3), "d"),
        (np.int32(-1), "g"),
    ],
    "source_array": [
        (-1, np.int64(60)),
        (-2, np.int64(50)),
        (-7, np.int64(0)),
        (-8, np.int64(60)),
        (0, np.int64(0)),
        (7, np.int64(0)),
        (10, np.int64(30)),
        (14, np.int64(0)),
        (np.int64(3), np.int64(30)),
        (np.int64(-1), np.int64(60)),
        (np.int32(3), np.int64(30)),
        (np.int32(-1), np.int64(60)),
    ],
    "source_echo": [
        (-1, 40),
        (-2, 30),
        (-5, 0),
        (-6, 40),
        (0, 0),
        (5, 0),
        (8, 30),
        (10, 0),
        (np.int64(3), np.int64(30)),
        (np.int64(-1), np.int64(40)),
        (np.int32(3), np.int32(30)),
        (np.int32(-1), np.int32(40)),
    ],
    "shuffle": [
        (-1, 5),
        (-2, 7),
        (-10, 6),
        (-11, 9),
        (0, 4),
        (10, 2),
        (13, 3),
        (20, 4),
        (np.int64(3), np.int64(3)),
        (np.int64(-1), np.int64(5)),
    ],
    "shuffle_twice": [
        (-1, 4),
        (-2, 5),
        (-6, 3),
        (-7, 3),
        (0, 5),
        (6, 3),
        (9, 4),
        (12, 5),
        (np.int64(3), np.int64(3)),
        (np.int64(-1), np.int64(4)),
    ],
    "repeat_forever": [
        (-1, 3),
        (-2, 2),
        (-4, 0),
        (-5, 3),
        (0, 0),
        (7, 3),
        (np.int64(3), np.int64(3)),
        (np.int64(-1), np.int64(3)),
        (np.int32(3), np.int32(3)),
        (np.int32(-1), np.int32(3)),
    ],
    "repeat_3": [
        (-1, 3),
        (-2, 2),
        (-12, 0),
        (-13, 3),
        (0, 0),
        (12, 0),
        (15, 3),
        (24, 0),
        (np.int64(3), np.int64(3)),
        (np.int64(-1), np.int64(3)),
        (np.int32(3), np.int32(3)),
        (np.int32(-1), np.int32(3)),
    ],
    "repeat_same_epochs": [
        (-1, 0),
        (-2, 3),
        (-12, 1),
        (-13, 0),
        (0, 1),
        (12, 1),
        (15, 0),
        (24, 1),
        (np.int64(3), np.int64(0)),
        (np.int64(-1), np.int64(0)),
    ],
    "shuffle_repeat": [
        (-1, 2),
        (-2, 1),
        (-8, 1),
        (-9, 2),
        (0, 2),
        (8, 1),
        (11, 3),
        (16, 2),
        (np.int64(3), np.int64(1)),
        (np.int64(-1), np.int64(2)),
    ],
    "slice": [
        (-1, 7),
        (-2, 6),
        (-6, 2),
        (-7, 7),
        (0, 2),
        (6, 2),
        (9, 5),
        (12, 2),
        (np.int64(3), np.int64(5)),
        (np.int64(-1), np.int64(7)),
        (np.int32(3), np.int32(5)),
        (np.int32(-1), np.int32(7)),
    ],
    "slice_reversed": [
        (-1, 0),
        (-2, 1),
        (-10, 9),
        (-11, 0),
        (0, 9),
        (10, 9),
        (13, 6),
        (20, 9),
        (np.int64(3), np.int64(6)),
        (np.int64(-1), np.int64(0)),
        (np.int32(3), np.int32(6)),
        (np.int32(-1), np.int32(0)),
    ],
    "slice_tail": [
        (-1, 9),
        (-2, 8),
        (-3, 7),
        (-4, 9),
        (0, 7),
        (3, 7),
        (6, 7),
        (np.int64(0), np.int64(7)),
        (np.int64(-1), np.int64(9)),
        (np.int32(0), np.int32(7)),
        (np.int32(-1), np.int32(9)),
    ],
    "shuffle_slice": [
        (-1, 8),
        (-2, 1),
        (-4, 0),
        (-5, 6),
        (0, 0),
        (4, 7),
        (7, 5),
        (8, 0),
        (np.int64(3), np.int64(1)),
        (np.int64(-1), np.int64(8)),
    ],
    "map": [
        (-1, 90),
        (-2, 80),
        (-10, 0),
        (-11, 90),
        (0, 0),
        (10, 0),
        (13, 30),
        (20, 0),
        (np.int64(3), np.int64(30)),
        (np.int64(-1), np.int64(90)),
        (np.int32(3), np.int32(30)),
        (np.int32(-1), np.int32(90)),
    ],
    "map_with_index": [
        (
            -1,
            (
                -1,
                9,
            ),
        ),
        (
            -2,
            (
                -2,
                8,
            ),
        ),
        (
            -10,
            (
                -10,
                0,
            ),
        ),
        (
            -11,
            (
                -11,
                9,
            ),
        ),
        (
            0,
            (
                0,
                0,
            ),
        ),
        (
            10,
            (
                10,
                0,
            ),
        ),
        (
            13,
            (
                13,
                3,
            ),
        ),
        (
            20,
            (
                20,
                0,
            ),
        ),
        (
            np.int64(3),
            (
                np.int64(3),
                np.int64(3),
            ),
        ),
        (
            np.int64(-1),
            (
                np.int64(-1),
                np.int64(9),
            ),
        ),
        (
            np.int32(3),
            (
                np.int32(3),
                np.int32(3),
            ),
        ),
        (
            np.int32(-1),
            (
                np.int32(-1),
                np.int32(9),
            ),
        ),
    ],
    "shuffle_map_with_index": [
        (
            -1,
            (
                -1,
                2,
            ),
        ),
        (
            -2,
            (
                -2,
                1,
            ),
        ),
        (
            -5,
            (
                -5,
                4,
            ),
        ),
        (
            -6,
            (
                -6,
                3,
            ),
        ),
        (
            0,
            (
                0,
                1,
            ),
        ),
        (
            5,
            (
                5,
                4,
            ),
        ),
        (
            8,
            (
                8,
                3,
            ),
        ),
        (
            10,
            (
                10,
                2,
            ),
        ),
        (
            np.int64(3),
            (
                np.int64(3),
                np.int64(3),
            ),
        ),
        (
            np.int64(-1),
            (
                np.int64(-1),
                np.int64(2),
            ),
        ),
    ],
    "filter": [
        (-1, None),
        (-2, 8),
        (-10, 0),
        (-11, None),
        (0, 0),
        (10, 0),
        (13, None),
        (20, 0),
        (np.int64(3), None),
        (np.int64(-1), None),
        (np.int32(3), None),
        (np.int32(-1), None),
    ],
    "concatenate": [
        (-1, 14),
        (-2, 13),
        (-8, 0),
        (-9, 14),
        (0, 0),
        (8, 0),
        (11, 10),
        (16, 0),
        (np.int64(3), np.int64(10)),
        (np.int64(-1), np.int64(14)),
        (np.int32(3), np.int32(10)),
        (np.int32(-1), np.int32(14)),
    ],
    "mix": [
        (-1, 12),
        (-2, 2),
        (-6, 0),
        (-7, 12),
        (0, 0),
        (6, 0),
        (9, 11),
        (12, 0),
        (np.int64(3), np.int64(11)),
        (np.int64(-1), np.int64(12)),
        (np.int32(3), np.int32(11)),
        (np.int32(-1), np.int32(12)),
    ],
    "mix_weighted": [
        (-1, 11),
        (-2, 3),
        (-6, 0),
        (-7, 11),
        (0, 0),
        (6, 0),
        (9, 2),
        (12, 0),
        (np.int64(3), np.int64(2)),
        (np.int64(-1), np.int64(11)),
        (np.int32(3), np.int32(2)),
        (np.int32(-1), np.int32(11)),
    ],
    "select_from_datasets": [
        (-1, 12),
        (-2, 2),
        (-6, 0),
        (-7, 12),
        (0, 0),
        (6, 0),
        (9, 11),
        (12, 0),
        (np.int64(3), np.int64(11)),
        (np.int64(-1), np.int64(12)),
        (np.int32(3), np.int32(11)),
        (np.int32(-1), np.int32(12)),
    ],
    "zip": [
        (
            -1,
            (
                4,
                14,
            ),
        ),
        (
            -2,
            (
                3,
                10,
            ),
        ),
        (
            -5,
            (
                0,
                11,
            ),
        ),
        (
            -6,
            (
                4,
                13,
            ),
        ),
        (
            0,
            (
                0,
                10,
            ),
        ),
        (
            5,
            (
                0,
                14,
            ),
        ),
        (
            8,
            (
                3,
                11,
            ),
        ),
        (
            10,
            (
                0,
                11,
            ),
        ),
        (
            np.int64(3),
            (
                np.int64(3),
                np.int64(12),
            ),
        ),
        (
            np.int64(-1),
            (
                np.int64(4),
                np.int64(14),
            ),
        ),
    ],
    "flat_map": [
        (-1, None),
        (-2, 4),
        (-10, 0),
        (-11, None),
        (0, 0),
        (10, 0),
        (13, 101),
        (20, 0),
        (np.int64(3), np.int64(101)),
        (np.int64(-1), None),
        (np.int32(3), np.int32(101)),
        (np.int32(-1), None),
    ],
    "batch": [
        (-1, np.array([9], dtype=np.int64)),
        (-2, np.array([6, 7, 8], dtype=np.int64)),
        (-4, np.array([0, 1, 2], dtype=np.int64)),
        (-5, np.array([9], dtype=np.int64)),
        (0, np.array([0, 1, 2], dtype=np.int64)),
        (4, np.array([0, 1, 2], dtype=np.int64)),
        (7, np.array([9], dtype=np.int64)),
        (8, np.array([0, 1, 2], dtype=np.int64)),
        (np.int64(3), np.array([9], dtype=np.int64)),
        (np.int64(-1), np.array([9], dtype=np.int64)),
        (np.int32(3), np.array([9], dtype=np.int64)),
        (np.int32(-1), np.array([9], dtype=np.int64)),
    ],
    "batch_drop_remainder": [
        (-1, np.array([6, 7, 8], dtype=np.int64)),
        (-2, np.array([3, 4, 5], dtype=np.int64)),
        (-3, np.array([0, 1, 2], dtype=np.int64)),
        (-4, np.array([6, 7, 8], dtype=np.int64)),
        (0, np.array([0, 1, 2], dtype=np.int64)),
        (3, np.array([0, 1, 2], dtype=np.int64)),
        (6, np.array([0, 1, 2], dtype=np.int64)),
        (np.int64(0), np.array([0, 1, 2], dtype=np.int64)),
        (np.int64(-1), np.array([6, 7, 8], dtype=np.int64)),
        (np.int32(0), np.array([0, 1, 2], dtype=np.int64)),
        (np.int32(-1), np.array([6, 7, 8], dtype=np.int64)),
    ],
    "shuffle_batch": [
        (-1, np.array([7, 5], dtype=np.int64)),
        (-2, np.array([2, 1, 9, 8], dtype=np.int64)),
        (-3, np.array([6, 0, 4, 3], dtype=np.int64)),
        (-4, np.array([1, 9], dtype=np.int64)),
        (0, np.array([4, 0, 5, 3], dtype=np.int64)),
        (3, np.array([2, 7, 0, 3], dtype=np.int64)),
        (6, np.array([4, 0, 3, 7], dtype=np.int64)),
        (np.int64(0), np.array([4, 0, 5, 3], dtype=np.int64)),
        (np.int64(-1), np.array([7, 5], dtype=np.int64)),
        (np.int32(0), np.array([4, 0, 5, 3], dtype=np.int64)),
        (np.int32(-1), np.array([7, 5], dtype=np.int64)),
    ],
    "repeat_batch": [
        (-1, np.array([2, 3], dtype=np.int64)),
        (-2, np.array([1, 2, 3, 0, 1], dtype=np.int64)),
        (-3, np.array([0, 1, 2, 3, 0], dtype=np.int64)),
        (-4, np.array([2, 3], dtype=np.int64)),
        (0, np.array([0, 1, 2, 3, 0], dtype=np.int64)),
        (3, np.array([0, 1, 2, 3, 0], dtype=np.int64)),
        (6, np.array([0, 1, 2, 3, 0], dtype=np.int64)),
        (np.int64(0), np.array([0, 1, 2, 3, 0], dtype=np.int64)),
        (np.int64(-1), np.array([2, 3], dtype=np.int64)),
        (np.int32(0), np.array([0, 1, 2, 3, 0], dtype=np.int64)),
        (np.int32(-1), np.array([2, 3], dtype=np.int64)),
    ],
}

GRAIN_BATCHED = {
    "range": ([-1, 0, 10, -11, 3], [9, 0, 0, 9, 3]),
    "range_step": ([-1, 0, 6, -7, 3], [17, 2, 2, 17, 11]),
    "source_list": ([-1, 0, 7, -8, 3], ["g", "a", "a", "g", "d"]),
    "source_array": (
        [-1, 0, 7, -8, 3],
        [np.int64(60), np.int64(0), np.int64(0), np.int64(60), np.int64(30)],
    ),
    "source_echo": ([-1, 0, 5, -6, 3], [40, 0, 0, 40, 30]),
    "shuffle": ([-1, 0, 10, -11, 3], [5, 4, 2, 9, 3]),
    "shuffle_twice": ([-1, 0, 6, -7, 3], [4, 5, 3, 3, 3]),
    "repeat_forever": ([-1, 0, -5, 3, 9], [3, 0, 3, 3, 1]),
    "repeat_3": ([-1, 0, 12, -13, 3], [3, 0, 0, 3, 3]),
    "repeat_same_epochs": ([-1, 0, 12, -13, 3], [0, 1, 1, 0, 0]),
    "shuffle_repeat": ([-1, 0, 8, -9, 3], [2, 2, 1, 2, 1]),
    "slice": ([-1, 0, 6, -7, 3], [7, 2, 2, 7, 5]),
    "slice_reversed": ([-1, 0, 10, -11, 3], [0, 9, 9, 0, 6]),
    "slice_tail": ([-1, 0, 3, -4, 0], [9, 7, 7, 9, 7]),
    "shuffle_slice": ([-1, 0, 4, -5, 3], [8, 0, 7, 6, 1]),
    "map": ([-1, 0, 10, -11, 3], [90, 0, 0, 90, 30]),
    "map_with_index": (
        [-1, 0, 10, -11, 3],
        [
            (
                -1,
                9,
            ),
            (
                0,
                0,
            ),
            (
                10,
                0,
            ),
            (
                -11,
                9,
            ),
            (
                3,
                3,
            ),
        ],
    ),
    "shuffle_map_with_index": (
        [-1, 0, 5, -6, 3],
        [
            (
                -1,
                2,
            ),
            (
                0,
                1,
            ),
            (
                5,
                4,
            ),
            (
                -6,
                3,
            ),
            (
                3,
                3,
            ),
        ],
    ),
    "filter": ([-1, 0, 10, -11, 3], [None, 0, 0, None, None]),
    "concatenate": ([-1, 0, 8, -9, 3], [14, 0, 0, 14, 10]),
    "mix": ([-1, 0, 6, -7, 3], [12, 0, 0, 12, 11]),
    "mix_weighted": ([-1, 0, 6, -7, 3], [11, 0, 0, 11, 2]),
    "select_from_datasets": ([-1, 0, 6, -7, 3], [12, 0, 0, 12, 11]),
    "zip": (
        [-1, 0, 5, -6, 3],
        [
            (
                4,
                14,
            ),
            (
                0,
                10,
            ),
            (
                0,
                14,
            ),
            (
                4,
                13,
            ),
            (
                3,
                12,
            ),
        ],
    ),
    "flat_map": ([-1, 0, 10, -11, 3], [None, 0, 0, None, 101]),
    "batch": (
        [-1, 0, 4, -5, 3],
        [
            np.array([9], dtype=np.int64),
            np.array([0, 1, 2], dtype=np.int64),
            np.array([0, 1, 2], dtype=np.int64),
            np.array([9], dtype=np.int64),
            np.array([9], dtype=np.int64),
        ],
    ),
    "batch_drop_remainder": (
        [-1, 0, 3, -4, 0],
        [
            np.array([6, 7, 8], dtype=np.int64),
            np.array([0, 1, 2], dtype=np.int64),
            np.array([0, 1, 2], dtype=np.int64),
            np.array([6, 7, 8], dtype=np.int64),
            np.array([0, 1, 2], dtype=np.int64),
        ],
    ),
    "shuffle_batch": (
        [-1, 0, 3, -4, 0],
        [
            np.array([7, 5], dtype=np.int64),
            np.array([4, 0, 5, 3], dtype=np.int64),
            np.array([2, 7, 0, 3], dtype=np.int64),
            np.array([1, 9], dtype=np.int64),
            np.array([4, 0, 5, 3], dtype=np.int64),
        ],
    ),
    "repeat_batch": (
        [-1, 0, 3, -4, 0],
        [
            np.array([2, 3], dtype=np.int64),
            np.array([0, 1, 2, 3, 0], dtype=np.int64),
            np.array([0, 1, 2, 3, 0], dtype=np.int64),
            np.array([2, 3], dtype=np.int64),
            np.array([0, 1, 2, 3, 0], dtype=np.int64),
        ],
    ),
}

GRAIN_SLICES = {
    "range": ([7, 8, 9], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
    "range_step": ([11, 14, 17], [17, 14, 11, 8, 5, 2]),
    "source_list": (["e", "f", "g"], ["g", "f", "e", "d", "c", "b", "a"]),
    "source_array": (
        [np.int64(40), np.int64(50), np.int64(60)],
        [
            np.int64(60),
            np.int64(50),
            np.int64(40),
            np.int64(30),
            np.int64(20),
            np.int64(10),
            np.int64(0),
        ],
    ),
    "source_echo": ([20, 30, 40], [40, 30, 20, 10, 0]),
    "shuffle": ([1, 2, 6], [6, 2, 1, 8, 9, 7, 3, 5, 0, 4]),
    "shuffle_twice": ([3, 0, 1], [1, 0, 3, 2, 4, 5]),
    "repeat_3": ([1, 2, 3], [3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0]),
    "repeat_same_epochs": ([2, 3, 0], [0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1]),
    "shuffle_repeat": ([0, 2, 3], [3, 2, 0, 1, 1, 0, 3, 2]),
    "slice": ([5, 6, 7], [7, 6, 5, 4, 3, 2]),
    "slice_reversed": ([2, 1, 0], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    "slice_tail": ([7, 8, 9], [9, 8, 7]),
    "shuffle_slice": ([3, 9, 1], [1, 9, 3, 0]),
    "map": ([70, 80, 90], [90, 80, 70, 60, 50, 40, 30, 20, 10, 0]),
    "map_with_index": (
        [
            (
                7,
                7,
            ),
            (
                8,
                8,
            ),
            (
                9,
                9,
            ),
        ],
        [
            (
                9,
                9,
            ),
            (
                8,
                8,
            ),
            (
                7,
                7,
            ),
            (
                6,
                6,
            ),
            (
                5,
                5,
            ),
            (
                4,
                4,
            ),
            (
                3,
                3,
            ),
            (
                2,
                2,
            ),
            (
                1,
                1,
            ),
            (
                0,
                0,
            ),
        ],
    ),
    "shuffle_map_with_index": (
        [
            (
                2,
                4,
            ),
            (
                3,
                3,
            ),
            (
                4,
                2,
            ),
        ],
        [
            (
                4,
                2,
            ),
            (
                3,
                3,
            ),
            (
                2,
                4,
            ),
            (
                1,
                0,
            ),
            (
                0,
                1,
            ),
        ],
    ),
    "filter": ([8], [8, 6, 4, 2, 0]),
    "concatenate": ([12, 13, 14], [14, 13, 12, 11, 10, 2, 1, 0]),
    "mix": ([11, 2, 12], [12, 2, 11, 1, 10, 0]),
    "mix_weighted": ([2, 3, 11], [11, 3, 2, 10, 1, 0]),
    "select_from_datasets": ([11, 2, 12], [12, 2, 11, 1, 10, 0]),
    "zip": (
        [
            (
                2,
                11,
            ),
            (
                3,
                12,
            ),
            (
                4,
                13,
            ),
        ],
        [
            (
                4,
                13,
            ),
            (
                3,
                12,
            ),
            (
                2,
                11,
            ),
            (
                1,
                14,
            ),
            (
                0,
                10,
            ),
        ],
    ),
    "flat_map": ([103, 4], [4, 103, 3, 2, 101, 1, 0]),
    "batch": (
        [
            np.array([3, 4, 5], dtype=np.int64),
            np.array([6, 7, 8], dtype=np.int64),
            np.array([9], dtype=np.int64),
        ],
        [
            np.array([9], dtype=np.int64),
            np.array([6, 7, 8], dtype=np.int64),
            np.array([3, 4, 5], dtype=np.int64),
            np.array([0, 1, 2], dtype=np.int64),
        ],
    ),
    "batch_drop_remainder": (
        [
            np.array([0, 1, 2], dtype=np.int64),
            np.array([3, 4, 5], dtype=np.int64),
            np.array([6, 7, 8], dtype=np.int64),
        ],
        [
            np.array([6, 7, 8], dtype=np.int64),
            np.array([3, 4, 5], dtype=np.int64),
            np.array([0, 1, 2], dtype=np.int64),
        ],
    ),
    "shuffle_batch": (
        [
            np.array([4, 0, 5, 3], dtype=np.int64),
            np.array([7, 9, 8, 1], dtype=np.int64),
            np.array([2, 6], dtype=np.int64),
        ],
        [
            np.array([2, 6], dtype=np.int64),
            np.array([7, 9, 8, 1], dtype=np.int64),
            np.array([4, 0, 5, 3], dtype=np.int64),
        ],
    ),
    "repeat_batch": (
        [
            np.array([0, 1, 2, 3, 0], dtype=np.int64),
            np.array([1, 2, 3, 0, 1], dtype=np.int64),
            np.array([2, 3], dtype=np.int64),
        ],
        [
            np.array([2, 3], dtype=np.int64),
            np.array([1, 2, 3, 0, 1], dtype=np.int64),
            np.array([0, 1, 2, 3, 0], dtype=np.int64),
        ],
    ),
}


def _same(got: Any, want: Any) -> bool:
    """Equal values of the same types (arrays: same dtype), all the way down."""
    if isinstance(want, np.ndarray):
        return isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)
    if isinstance(want, (tuple, list)):
        return (
            type(got) is type(want)
            and len(got) == len(want)
            and all(_same(g, w) for g, w in zip(got, want))
        )
    return type(got) is type(want) and got == want


def _cases() -> list[Any]:
    return [
        pytest.param(name, index, want, id=f"{name}[{index!r}]")
        for name, answers in GRAIN_ANSWERS.items()
        for index, want in answers
    ]


@pytest.mark.parametrize(("stage", "index", "want"), _cases())
def test_an_index_reads_what_grain_reads(stage: str, index: Any, want: Any) -> None:
    ds = STAGES[stage]()
    assert _same(ds[index], want)


@pytest.mark.parametrize(("stage", "index", "want"), _cases())
def test_the_batched_read_agrees_with_the_single_read(stage: str, index: Any, want: Any) -> None:
    ds = STAGES[stage]()
    got = ds._getitems([int(index)])[0]
    if isinstance(index, np.integer):  # the batched path gives Python ints (README)
        assert np.array_equal(got, want)
    else:
        assert _same(got, want)


@pytest.mark.parametrize("stage", list(GRAIN_BATCHED))
def test_a_batched_read_of_any_indices_reads_what_grain_reads(stage: str) -> None:
    indices, want = GRAIN_BATCHED[stage]
    ds = STAGES[stage]()
    assert _same(list(ds._getitems(indices)), want)
    assert _same(list(ds._getitems(np.asarray(indices, dtype=np.int64))), want)


@pytest.mark.parametrize("stage", list(GRAIN_SLICES))
def test_negative_slices_read_what_grain_reads(stage: str) -> None:
    tail, reversed_ = GRAIN_SLICES[stage]
    ds = STAGES[stage]()
    assert _same(list(ds[-3:]), tail)
    assert _same(list(ds[::-1]), reversed_)


def test_a_negative_index_of_a_slice_is_an_earlier_epoch_of_the_slice() -> None:
    ds = R(10).shuffle(seed=5)
    assert list(ds[-3:]) == [1, 2, 6]
    assert (ds[-3:][-1], ds[-3:][2]) == (5, 6)  # Grain's answers


def test_iteration_and_workers_read_the_first_epoch_as_python_ints() -> None:
    ds = R(10).shuffle(seed=5)
    assert [type(x) for x in ds.to_iter_dataset()] == [int] * 10
    assert list(ds.to_iter_dataset()) == [ds[i] for i in range(10)]
    threads = ds.to_iter_dataset(ReadOptions(num_threads=2, prefetch_buffer_size=4))
    assert list(threads) == list(ds) == [ds[i] for i in range(10)]
    earlier = [ds[i] for i in range(-10, 0)]  # epoch -1: another permutation
    assert sorted(earlier) == list(range(10)) and earlier != list(ds)
    batches = [b.tolist() for b in ds.batch(4)]
    assert batches == [[ds[i] for i in range(j, min(j + 4, 10))] for j in (0, 4, 8)]


# Where Grain's answer is an accident, chute answers deliberately.


@pytest.mark.parametrize("index", [3.0, np.float64(3), "3", None])
def test_an_index_that_is_not_an_integer_is_refused(index: Any) -> None:
    # Grain: range gives 3.0, a list source raises TypeError, a shuffle a pybind error.
    with pytest.raises(TypeError, match="indices must be integers or slices"):
        R(10).shuffle(seed=5)[index]


def test_a_bool_index_is_the_int_it_stands_for() -> None:
    # Grain hands map_with_index True itself.
    assert R(10).map_with_index(lambda i, x: (i, x))[True] == (1, 1)


@pytest.mark.parametrize("stage", ["shuffle", "shuffle_twice", "zip", "shuffle_slice"])
def test_an_int32_index_through_a_shuffle_keeps_its_type(stage: str) -> None:
    # Grain raises OverflowError (the epoch's seed is computed in int32); chute reads
    # as np.int64 does and gives the index's type, as every other stage does.
    ds = STAGES[stage]()
    got, want = ds[np.int32(3)], ds[np.int64(3)]
    assert np.array_equal(got, want)
    leaves = got if isinstance(got, tuple) else (got,)
    assert {type(x) for x in leaves} == {np.int32}


def test_a_value_that_does_not_fit_the_index_type_raises_overflow() -> None:
    ds = R(3_000_000_000, 3_000_000_010)
    assert ds[np.int64(1)] == np.int64(3_000_000_001)
    with pytest.raises(OverflowError) as info:  # Grain raises it too
        ds[np.int32(1)]
    assert "index with an int or np.int64" in "".join(info.value.__notes__)
    past_int32 = R(5 * 10**9).map_with_index(lambda i, x: i)[4 * 10**9 :]
    assert past_int32[np.int64(1)] == np.int64(4 * 10**9 + 1)
    with pytest.raises(OverflowError):  # never wrapped round
        past_int32[np.int32(1)]


@pytest.mark.parametrize("index", [-1, -10, np.int64(-1)])
def test_random_map_refuses_negative_elements(index: Any) -> None:
    # Grain: OverflowError for an int, and a draw at counter 2**64 - 1 for np.int64(-1).
    ds = R(10).random_map(lambda x, rng: int(rng.integers(1000)), seed=3)
    with pytest.raises(IndexError, match=r"element -\d+ has no random numbers"):
        ds[index]
    with pytest.raises(IndexError, match="has no random numbers"):
        ds._getitems([0, int(index)])
    assert ds[len(ds) + int(index)] == ds._getitems([len(ds) + int(index)])[0]


def test_window_shuffle_reads_earlier_epochs_as_permutations() -> None:
    # Grain raises TypeError for a negative index (its window's seed goes negative).
    ds = WindowShuffleMapDataset(R(8), window_size=3, seed=0)
    earlier = [ds[i] for i in range(-8, 0)]
    assert sorted(earlier) == list(range(8))
    assert earlier == ds._getitems(list(range(-8, 0)))


@pytest.mark.parametrize("ds", [R(0), MapDataset.source([]), R(0).shuffle(seed=1)])
@pytest.mark.parametrize("index", [-1, 0, np.int64(1)])
def test_reading_an_empty_dataset_raises_index_error(ds: MapDataset[Any], index: Any) -> None:
    # Grain: ZeroDivisionError, or an element (np.int64(0)) for a numpy index of an empty range.
    with pytest.raises(IndexError, match="empty"):
        ds[index]


def test_a_nested_int_read_inside_a_numpy_read_gives_ints() -> None:
    inner = R(5)
    outer = R(3).map(lambda x: (x, inner[int(x)]))
    assert _same(outer[np.int64(2)], (np.int64(2), 2))
