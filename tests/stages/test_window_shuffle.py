"""WindowShuffleMapDataset and WindowShuffleIterDataset."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute import MapDataset
from chute._core.index_shuffle import index_shuffle_array
from chute._stages.window_shuffle import window_permutation
from chute.experimental import (
    WindowShuffleIterDataset,
    WindowShuffleMapDataset,
    assert_equal_output_after_checkpoint,
)


def _indices(n: int) -> MapDataset[int]:
    """range(n), but each element is the global index it was read at."""
    return MapDataset.range(n).map_with_index(lambda i, x: i)


# Grain's output for WindowShuffleMapDataset(_indices(40), window_size=8, seed=2024),
# indices 0..79: 40 % 8 == 0, so no window straddles an epoch and chute matches it.
GRAIN_MAP_40_8 = [
    0, 7, 6, 3, 5, 1, 4, 2, 11, 12, 15, 8, 14, 9, 10, 13, 19, 21, 22, 23,
    17, 20, 18, 16, 29, 31, 25, 24, 27, 30, 26, 28, 33, 38, 36, 37, 39, 34, 32, 35,
    40, 44, 42, 41, 43, 45, 47, 46, 48, 49, 52, 53, 51, 50, 55, 54, 60, 58, 63, 57,
    61, 62, 56, 59, 67, 71, 69, 68, 65, 70, 66, 64, 74, 75, 79, 77, 76, 78, 72, 73,
]  # fmt: skip

# Grain's output for WindowShuffleIterDataset(range(43), window_size=8, seed=2024).
GRAIN_ITER_43_8 = [
    2, 4, 1, 5, 3, 6, 7, 0, 13, 10, 9, 14, 8, 15, 12, 11, 16, 18, 20, 17, 23, 22,
    21, 19, 28, 26, 30, 27, 24, 25, 31, 29, 35, 32, 34, 39, 37, 36, 38, 33, 42, 41, 40,
]  # fmt: skip


def test_map_window_shuffle_matches_grain_when_windows_fit_the_epoch() -> None:
    ds = WindowShuffleMapDataset(_indices(40), window_size=8, seed=2024)
    assert ds._getitems(list(range(80))) == GRAIN_MAP_40_8
    assert [ds[i] for i in (0, 1, 79)] == [0, 7, 73]
    squares = WindowShuffleMapDataset(
        MapDataset.range(10).map(lambda x: x * x), window_size=5, seed=9
    )
    assert list(squares) == [1, 0, 16, 9, 4, 81, 25, 36, 64, 49]  # Grain's output
    ds = WindowShuffleMapDataset(_indices(12), window_size=4, seed=0)
    assert list(ds) == [0, 3, 1, 2, 5, 6, 7, 4, 8, 11, 9, 10]  # Grain's output


def test_map_window_shuffle_cuts_windows_at_the_epoch_boundary() -> None:
    # Grain reads [0, 2, 1, 4, 5, 3, 6, 8, 7, 11, 10, 9, 13, 12, 14, 16, 15, 17, 20, 19,
    # 18, 23, 21, ...]: its window [9, 12) straddles the epoch end, so its first epoch
    # repeats element 1 (index 11) and drops element 9.  chute shuffles [9] and [10, 12)
    # apart and matches Grain in every window that lies inside one epoch.
    ds = WindowShuffleMapDataset(_indices(10), window_size=3, seed=0)
    got = ds._getitems(list(range(24)))
    assert got[:9] == [0, 2, 1, 4, 5, 3, 6, 8, 7]
    assert got[9] == 9 and sorted(got[10:12]) == [10, 11]
    assert got[12:18] == [13, 12, 14, 16, 15, 17]
    assert sorted(got[18:20]) == [18, 19] and got[20] == 20
    assert got[21:24] == [23, 21, 22]


def test_map_window_shuffle_uses_the_large_block_past_two_to_the_sixteen() -> None:
    ds = WindowShuffleMapDataset(_indices(140000), window_size=70000, seed=5)
    picks = [0, 1, 2, 69999, 70000, 139999]
    assert ds._getitems(picks) == [11331, 69609, 49331, 16886, 93400, 78629]  # Grain's


def test_iter_window_shuffle_matches_grain() -> None:
    # Grain's outputs for WindowShuffleIterDataset(range(n).to_iter_dataset(), ...).
    def run(n: int, window: int, seed: int) -> list[int]:
        source = MapDataset.range(n).to_iter_dataset()
        return list(WindowShuffleIterDataset(source, window_size=window, seed=seed))

    assert run(43, 8, 2024) == GRAIN_ITER_43_8
    assert run(10, 3, 0) == [1, 2, 0, 3, 5, 4, 7, 8, 6, 9]
    assert run(10, 4, 0) == [2, 1, 3, 0, 4, 7, 6, 5, 9, 8]
    assert run(7, 10, 0) == [1, 3, 5, 2, 6, 4, 0]
    assert run(5, 1, 0) == [0, 1, 2, 3, 4]
    assert run(0, 3, 0) == []
    it = iter(WindowShuffleIterDataset(MapDataset.range(70001), window_size=70000, seed=5))
    assert [next(it) for _ in range(5)] == [16886, 46389, 2770, 31491, 58300]


def test_window_shuffle_seeds_from_marks_and_wraps_around() -> None:
    marked = WindowShuffleMapDataset(MapDataset.range(20).seed(7), window_size=6)
    assert sorted(marked) == list(range(20))
    assert list(marked) == list(
        WindowShuffleMapDataset(MapDataset.range(20).seed(7), window_size=6)
    )
    source = MapDataset.range(20).seed(7).to_iter_dataset()
    assert sorted(WindowShuffleIterDataset(source, window_size=6)) == list(range(20))
    # Grain raises once seed + window reaches 2**32; chute wraps around.
    wrapped = WindowShuffleMapDataset(_indices(8), window_size=4, seed=2**32 - 1)
    assert wrapped._getitems([4, 5, 6, 7]) == [4 + int(p) for p in window_permutation(4, 0)]


def test_window_shuffle_rejects_bad_arguments() -> None:
    for cls, parent in [
        (WindowShuffleMapDataset, MapDataset.range(5)),
        (WindowShuffleIterDataset, MapDataset.range(5).to_iter_dataset()),
    ]:
        for bad in [0, -2]:
            with pytest.raises(ValueError, match="window_size must be >= 1"):
                cls(parent, window_size=bad, seed=0)
        with pytest.raises(TypeError, match="window_size must be an int"):
            cls(parent, window_size=2.5, seed=0)
        with pytest.raises(ValueError, match="needs a seed"):
            cls(parent, window_size=2)
        with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*32\)"):
            cls(parent, window_size=2, seed=-1)
        with pytest.raises(TypeError):
            cls(parent, 2, 0)  # keyword-only, as in Grain


@pytest.mark.parametrize("seed", [2**32, 2**40, -1])
def test_window_shuffle_seed_out_of_range_is_a_type_error_as_in_grain(seed: int) -> None:
    for cls, parent in [
        (WindowShuffleMapDataset, MapDataset.range(5)),
        (WindowShuffleIterDataset, MapDataset.range(5).to_iter_dataset()),
    ]:
        # Grain 0.2.18 raises TypeError; chute's is also the ValueError it raised before.
        with pytest.raises(TypeError, match=r"seed must be an int in \[0, 2\*\*32\)") as info:
            cls(parent, window_size=2, seed=seed)
        assert isinstance(info.value, ValueError)


def test_window_shuffle_restores_from_every_checkpoint() -> None:
    source = MapDataset.range(23).shuffle(seed=1)
    for window in [1, 4, 23, 30]:
        iter_ds = WindowShuffleIterDataset(source.to_iter_dataset(), window_size=window, seed=3)
        assert_equal_output_after_checkpoint(iter_ds)
        map_ds = WindowShuffleMapDataset(source, window_size=window, seed=3)
        assert_equal_output_after_checkpoint(map_ds.to_iter_dataset())
    assert_equal_output_after_checkpoint(map_ds.repeat(3).to_iter_dataset(), max_steps=None)


def test_iter_window_shuffle_loses_nothing_when_the_parent_raises() -> None:
    def fail_on_three(x: int) -> int:
        if x == 3:
            raise KeyError("bad element")
        return x

    source = MapDataset.range(9).to_iter_dataset().map(fail_on_three)
    ds = WindowShuffleIterDataset(source, window_size=4, seed=0)
    it = iter(ds)
    with pytest.raises(KeyError, match="bad element"):
        next(it)  # 0, 1 and 2 stay in the window
    state = it.get_state()
    rest = list(it)
    assert sorted(rest) == [0, 1, 2, 4, 5, 6, 7, 8]
    assert sorted(rest[:4]) == [0, 1, 2, 4]
    restored = iter(ds)
    restored.set_state(state)
    assert list(restored) == rest


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    window=st.integers(1, 25),
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 2),
)
def test_every_epoch_of_a_window_shuffle_is_a_permutation(
    n: int, window: int, seed: int, epoch: int
) -> None:
    ds = WindowShuffleMapDataset(_indices(n), window_size=window, seed=seed)
    got = ds._getitems(list(range(epoch * n, (epoch + 1) * n)))
    assert sorted(got) == list(range(epoch * n, (epoch + 1) * n))
    # Elements move only within their window.
    assert all(abs(g - (epoch * n + i)) < window for i, g in enumerate(got))
    iter_ds = WindowShuffleIterDataset(
        MapDataset.range(n).to_iter_dataset(), window_size=window, seed=seed
    )
    assert sorted(iter_ds) == list(range(n))


@pytest.mark.parametrize("length", [1, 2, 3, 7, 100, 4096, 65535, 65536, 65537])
def test_window_permutation_is_index_shuffle(length: int) -> None:
    for seed in [0, 12345, 2**32 - 1]:
        expected = index_shuffle_array(np.arange(length), length - 1, seed)
        assert window_permutation(length, seed).tolist() == expected.tolist()
