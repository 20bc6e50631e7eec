"""set_slice: Grain's in-place sharding of sources, to_iter_dataset, interleave and Parquet."""

from __future__ import annotations

import pytest

from chute import MapDataset, MultiprocessingOptions
from chute.experimental import InterleaveIterDataset, ParquetIterDataset


def _shards(make, count: int) -> list[list]:
    out = []
    for shard in range(count):
        ds = make()
        ds.set_slice(slice(shard, None, count), sequential_slice=True)
        out.append(list(ds))
    return out


def test_range_shards_are_contiguous_blocks_with_the_remainder_first() -> None:
    assert _shards(lambda: MapDataset.range(10), 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert _shards(lambda: MapDataset.range(2, 20, 3), 2) == [[2, 5, 8], [11, 14, 17]]


def test_source_shards_cover_every_record_once_and_reshard_from_the_original() -> None:
    records = [f"r{i}" for i in range(11)]
    shards = _shards(lambda: MapDataset.source(records), 3)
    assert [len(s) for s in shards] == [4, 4, 3]
    assert [r for shard in shards for r in shard] == records
    ds = MapDataset.source(records)
    ds.set_slice(slice(0, None, 2), sequential_slice=True)
    ds.set_slice(slice(1, None, 2), sequential_slice=True)  # of the 11, not of the first 6
    assert list(ds) == records[6:]
    assert ds[0] == "r6" and len(ds) == 5


def test_stages_above_a_sliced_source_see_only_its_block() -> None:
    source = MapDataset.range(8)
    ds = source.map(lambda x: x * 10)
    source.set_slice(slice(1, None, 2), sequential_slice=True)
    assert list(ds) == [40, 50, 60, 70]


@pytest.mark.parametrize("make", [lambda: MapDataset.range(5), lambda: MapDataset.source([1, 2])])
def test_a_non_sequential_slice_of_a_source_is_refused_as_in_grain(make) -> None:
    with pytest.raises(AssertionError, match="Only sequential slicing is supported"):
        make().set_slice(slice(0, None, 2))
    with pytest.raises(ValueError, match="Only sequential slicing is supported"):
        make().set_slice(slice(0, None, 2))
    with pytest.raises(ValueError, match="shard_index, None, shard_count"):
        make().set_slice(slice(0, 4, 2), sequential_slice=True)
    with pytest.raises(ValueError, match="not below 2 shards"):
        make().set_slice(slice(2, None, 2), sequential_slice=True)


def test_to_iter_dataset_takes_an_interleaved_or_a_sequential_slice() -> None:
    ds = MapDataset.range(10).map(lambda x: x + 100).to_iter_dataset()
    ds.set_slice(slice(1, None, 3))
    assert list(ds) == [101, 104, 107]
    ds.set_slice(slice(2, None, 3), sequential_slice=True)  # the block under the slice
    assert list(ds) == [108]  # Grain 0.2.18: [108, 108, 108] (its slice keeps 3 positions)
    ds.set_slice(slice(0, None, 3), sequential_slice=True)  # another block of the whole source
    assert list(ds) == [101]


def test_slices_of_a_to_iter_dataset_compose_as_in_grain() -> None:
    ds = MapDataset.range(12).to_iter_dataset()
    ds.set_slice(slice(0, None, 2))
    ds.set_slice(slice(1, None, 3))
    assert list(ds) == [2, 8]  # Grain 0.2.18 gives [2, 8]


def test_workers_share_out_what_set_slice_kept_as_grains_do() -> None:
    ds = MapDataset.range(24).map(lambda x: x * 10).to_iter_dataset()
    ds.set_slice(slice(0, None, 2))
    ds.set_slice(slice(1, None, 3))
    assert list(ds) == [20, 80, 140, 200]
    workers = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    assert list(workers) == [20, 80, 140, 200]  # Grain 0.2.18 gives the same
    it = iter(workers)
    assert next(it) == 20
    state = it.get_state()
    three = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=3)))
    three.set_state(state)  # another worker count resumes the same sliced stream
    assert list(three) == [80, 140, 200]
    it.close()


def test_interleave_shards_its_datasets() -> None:
    files = [MapDataset.range(i * 10, i * 10 + 2).to_iter_dataset() for i in range(4)]
    ds = InterleaveIterDataset(files, cycle_length=2)
    ds.set_slice(slice(1, None, 2))
    assert list(ds) == [10, 30, 11, 31]
    ds.set_slice(slice(1, None))  # of the datasets kept, as in Grain
    assert list(ds) == [30, 31]


def test_parquet_shards_by_file(tmp_path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"part{i}.parquet"))
        pq.write_table(pa.table({"x": [i * 10, i * 10 + 1]}), paths[-1])
    ds = ParquetIterDataset(paths, cycle_length=1)
    ds.set_slice(slice(1, None))
    assert [row["x"] for row in ds] == [10, 11, 20, 21]
    ds.set_slice(slice(1, None))  # of the files kept, as in Grain
    assert [row["x"] for row in ds] == [20, 21]
    with pytest.raises(ValueError, match="leaves no file"):
        ds.set_slice(slice(5, None))
