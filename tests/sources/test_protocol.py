"""The RandomAccessDataSource protocol, the index checks sources share, chute.sources."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import chute.sources
from chute import MapDataset
from chute._sources.protocol import as_index, check_indices, out_of_range
from chute.sources import RandomAccessDataSource, RangeDataSource, SharedMemoryDataSource


class _Squares:
    """A source with a batched read that counts its calls."""

    def __init__(self, n: int) -> None:
        self.n, self.batched_calls = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index * index

    def __getitems__(self, indices: list[int]) -> list[int]:
        self.batched_calls += 1
        return [i * i for i in indices]


def test_sequences_and_chute_sources_satisfy_the_protocol() -> None:
    with SharedMemoryDataSource([1, 2]) as shared:
        for source in ([1, 2], (1, 2), np.arange(3), RangeDataSource(0, 3), shared, _Squares(2)):
            assert isinstance(source, RandomAccessDataSource)


def test_objects_without_len_or_getitem_do_not_satisfy_it() -> None:
    class OnlyLen:
        def __len__(self) -> int:
            return 0

    assert not isinstance(OnlyLen(), RandomAccessDataSource)
    assert not isinstance(7, RandomAccessDataSource)
    assert not isinstance(iter([1]), RandomAccessDataSource)


def test_protocol_is_generic() -> None:
    alias: Any = RandomAccessDataSource[int]
    assert alias is not None


def test_map_dataset_reads_sources_through_getitems() -> None:
    source = _Squares(10)
    ds = MapDataset.source(source).batch(4)
    assert [b.tolist() for b in ds] == [[0, 1, 4, 9], [16, 25, 36, 49], [64, 81]]
    assert source.batched_calls > 0


def test_as_index_takes_ints_and_numpy_ints_only() -> None:
    assert as_index(3, "S") == 3
    assert as_index(np.int32(4), "S") == 4
    for bad in (1.0, "1", True, None):
        with pytest.raises(TypeError, match="S: index must be an int"):
            as_index(bad, "S")


def test_out_of_range_names_index_length_and_valid_indices() -> None:
    assert "index 5 is out of range for length 3 (valid indices: 0 to 2)" in str(
        out_of_range(5, 3, "S", negative=False)
    )
    assert "valid indices: -3 to 2" in str(out_of_range(-4, 3, "S", negative=True))
    assert "the source is empty" in str(out_of_range(0, 0, "S", negative=False))


def test_check_indices_wraps_negatives_only_when_allowed() -> None:
    assert check_indices([0, -1], 3, "S", negative=True).tolist() == [0, 2]
    with pytest.raises(IndexError, match="index -1 is out of range for length 3"):
        check_indices([0, -1], 3, "S", negative=False)
    with pytest.raises(IndexError, match="index 7 is out of range"):
        check_indices(np.array([1, 7, 9]), 3, "S", negative=True)
    assert check_indices([], 3, "S", negative=True).tolist() == []


def test_check_indices_rejects_non_integer_or_nested_indices() -> None:
    with pytest.raises(TypeError, match="flat sequence of ints"):
        check_indices([0.5], 3, "S", negative=False)
    with pytest.raises(TypeError, match="flat sequence of ints"):
        check_indices([[0, 1]], 3, "S", negative=False)


def test_public_module_exports_grain_names() -> None:
    assert chute.sources.__all__ == sorted(chute.sources.__all__)
    assert {"RandomAccessDataSource", "RangeDataSource", "SharedMemoryDataSource"} <= set(
        chute.sources.__all__
    )
    for name in chute.sources.__all__:
        assert hasattr(chute.sources, name)
