"""Parquet: ParquetIterDataset streams rows in Grain's order; ParquetDataSource reads any row."""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import chute as grain
from chute._sources.parquet import io as parquet_io
from chute._sources.parquet.iter import ParquetIterDataset
from chute._sources.parquet.source import ParquetDataSource
from chute.experimental import assert_equal_output_after_checkpoint

SIZES = (10, 7, 5)  # rows per file; row groups of 4 rows


def _table(file: int, rows: int) -> Any:
    ids = [100 * file + j for j in range(rows)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "f": [i / 2 for i in ids],
            "s": [None if i % 3 == 0 else f"row {i}" for i in ids],
            "l": [None if i % 4 == 1 else list(range(i % 3)) for i in ids],
            "b": [bytes([i % 256]) for i in ids],
        }
    )


@pytest.fixture
def paths(tmp_path: Path) -> list[str]:
    out = []
    for file, rows in enumerate(SIZES):
        path = str(tmp_path / f"part-{file}.parquet")
        pq.write_table(_table(file, rows), path, row_group_size=4)
        out.append(path)
    return out


def _expected(paths: list[str]) -> list[dict[str, Any]]:
    return [row for p in paths for row in pq.read_table(p).to_pylist()]


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    def value(v: Any) -> Any:
        return v.tolist() if isinstance(v, (np.ndarray, np.generic)) else v

    return {k: value(v) for k, v in row.items()}


def _ids(rows: Any) -> list[int]:
    return [int(row["id"]) for row in rows]


# -- ParquetIterDataset ------------------------------------------------------------------


def test_iter_reads_a_file_in_order_as_dicts(paths: list[str]) -> None:
    rows = list(ParquetIterDataset(paths[0]))
    assert [_plain(r) for r in rows] == _expected(paths[:1])
    assert type(rows[0]["id"]) is np.int64 and type(rows[1]["s"]) is str
    assert isinstance(rows[2]["l"], np.ndarray) and type(rows[2]["b"]) is bytes
    assert rows[0]["s"] is None and rows[1]["l"] is None


def test_iter_takes_files_in_turn_like_grain(tmp_path: Path) -> None:
    def write(sizes: list[int]) -> list[str]:
        out = []
        for k, n in enumerate(sizes):
            out.append(str(tmp_path / f"{len(sizes)}-{k}.parquet"))
            pq.write_table(pa.table({"id": list(range(1000 * k, 1000 * k + n))}), out[-1])
        return out

    assert _ids(ParquetIterDataset(write([5, 2, 4]))) == [
        *(0, 1000, 2000, 1, 1001, 2001, 2, 2002, 3, 2003, 4)
    ]
    # 18 files, 16 read in turn: an exhausted file's place goes to the next unopened file,
    # which first yields on the following round (the order Grain 0.2.18 yields).
    got = [
        (i // 1000, i % 1000)
        for i in _ids(ParquetIterDataset(write([k % 3 + 1 for k in range(18)])))
    ]
    assert got[16:] == [
        *((1, 1), (2, 1), (4, 1), (5, 1), (7, 1), (8, 1), (10, 1), (11, 1), (13, 1), (14, 1)),
        *((16, 0), (2, 2), (17, 0), (5, 2), (8, 2), (11, 2), (14, 2), (16, 1), (17, 1), (17, 2)),
    ]
    assert got[:16] == [(k, 0) for k in range(16)]


def test_cycle_length_one_reads_files_one_after_another(paths: list[str]) -> None:
    rows = list(ParquetIterDataset(paths, cycle_length=1))
    assert [_plain(r) for r in rows] == _expected(paths)


def test_values_convert_like_grain(tmp_path: Path) -> None:
    path = str(tmp_path / "types.parquet")
    table = pa.table(
        {
            "int_with_null": pa.array([1, None], pa.int32()),
            "u8": pa.array([1, 2], pa.uint8()),
            "flag": [True, False],
            "when": pa.array([datetime.datetime(2020, 1, 1), None], pa.timestamp("us")),
            "struct": [{"a": 1, "b": "x"}, None],
            "fixed": pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2)),
            "words": [["a", "b"], ["c"]],
        }
    )
    pq.write_table(table, path)
    first, second = ParquetIterDataset(path)
    assert type(first["int_with_null"]) is np.float64 and np.isnan(second["int_with_null"])
    assert type(first["u8"]) is np.uint8 and type(first["flag"]) is np.bool_
    assert first["when"] == np.datetime64("2020-01-01T00:00:00") and np.isnat(second["when"])
    assert first["struct"] == {"a": 1, "b": "x"} and second["struct"] is None
    assert first["fixed"].dtype == np.float32 and first["fixed"].tolist() == [1.0, 2.0]
    assert first["words"].tolist() == ["a", "b"]


@pytest.mark.parametrize("cycle_length", [1, 2, 16])
def test_iter_restores_at_every_step(paths: list[str], cycle_length: int) -> None:
    ds = ParquetIterDataset(paths, cycle_length=cycle_length)
    assert_equal_output_after_checkpoint(ds, max_steps=None)
    ids = ds.map(lambda row: int(row["id"])).batch(3)
    assert_equal_output_after_checkpoint(ids, max_steps=None)


def test_batches_of_one_file_take_rows_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"x": list(range(600)), "y": [0.5] * 600}), path, row_group_size=250)
    ds = ParquetIterDataset(path).batch(64)  # a pathlib.Path works too
    batches = list(ds)
    assert [len(b["x"]) for b in batches] == [64] * 9 + [24]
    assert np.concatenate([b["x"] for b in batches]).tolist() == list(range(600))
    assert_equal_output_after_checkpoint(ds, max_steps=None)


def test_state_is_positions_and_restore_reads_only_the_current_row_group(
    paths: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    it = iter(ParquetIterDataset(paths, cycle_length=1))
    for _ in range(9):
        next(it)
    state = it.get_state()
    assert len(json.dumps(state)) < 200
    assert state["places"] == [[0, 2, 1]] and state["next_file"] == 1
    reads: list[tuple[str, int]] = []
    read_group = parquet_io.read_group
    monkeypatch.setattr(
        parquet_io,
        "read_group",
        lambda pf, p, g, *a: reads.append((p, g)) or read_group(pf, p, g, *a),
    )
    fresh = iter(ParquetIterDataset(paths, cycle_length=1))
    fresh.set_state(state)
    assert _ids([next(fresh)]) == [9]
    assert reads == [(paths[0], 2)]


def test_restoring_into_a_different_cycle_fails(paths: list[str]) -> None:
    state = iter(ParquetIterDataset(paths)).get_state()
    with pytest.raises(grain.CheckpointError, match="cycle_length"):
        iter(ParquetIterDataset(paths, cycle_length=1)).set_state(state)


def test_iter_next_after_close_raises(paths: list[str]) -> None:
    it = iter(ParquetIterDataset(paths))
    next(it)
    it.close()
    with pytest.raises(grain.IteratorClosedError):
        next(it)


def test_iter_dataset_repr_is_stable_and_pickles(paths: list[str]) -> None:
    ds = ParquetIterDataset(paths, cycle_length=2, memory_map=True)
    assert repr(ds) == f"ParquetIterDataset(paths={paths!r}, cycle_length=2, memory_map=True)"
    assert repr(ds) == repr(ParquetIterDataset(paths, cycle_length=2, memory_map=True))
    assert _ids(pickle.loads(pickle.dumps(ds))) == _ids(ds)


# -- ParquetDataSource -------------------------------------------------------------------


def test_source_reads_any_row(paths: list[str]) -> None:
    source = ParquetDataSource(paths)
    expected = _expected(paths)
    assert len(source) == sum(SIZES)
    assert [_plain(source[i]) for i in range(len(source))] == expected
    order = np.random.default_rng(0).permutation(len(source))
    assert [_plain(r) for r in source.__getitems__(order)] == [expected[i] for i in order]
    assert source.__getitems__([]) == []
    assert [_plain(r) for r in source] == expected


def test_source_rows_equal_the_streamed_rows(paths: list[str]) -> None:
    streamed = list(ParquetIterDataset(paths, cycle_length=1))
    read = ParquetDataSource(paths).__getitems__(list(range(sum(SIZES)))[::-1])[::-1]
    assert all(
        a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a if a[k] is not None)
        for a, b in zip(read, streamed)
    )
    assert [type(v) for v in read[3].values()] == [type(v) for v in streamed[3].values()]


def test_batched_read_reads_each_row_group_once(
    paths: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[tuple[str, int]] = []
    read_group = parquet_io.read_group
    monkeypatch.setattr(
        parquet_io,
        "read_group",
        lambda pf, p, g, *a: reads.append((p, g)) or read_group(pf, p, g, *a),
    )
    source = ParquetDataSource(paths, cache_bytes=0)
    source.__getitems__(np.random.default_rng(1).permutation(len(source)))
    assert sorted(reads) == sorted({(p, g) for p, g in reads}) and len(reads) == 3 + 2 + 2
    source.__getitems__([21, 21])  # the last row group read is always kept
    assert len(reads) == 7 and len(source._cache) == 1
    everything = ParquetDataSource(paths)  # the default cache holds all 7 row groups
    everything.__getitems__(np.arange(22)[::-1])
    everything.__getitems__(np.arange(22))
    assert len(reads) == 14 and len(everything._cache) == 7


def test_source_reads_only_the_requested_columns(paths: list[str]) -> None:
    source = ParquetDataSource(paths, columns=["s", "id"])
    assert list(source[4]) == ["s", "id"] and source[4]["s"] == "row 4"
    assert repr(source) == f"ParquetDataSource(paths={paths!r}, columns=['s', 'id'])"


def test_global_shuffle_is_a_permutation_of_all_rows(paths: list[str]) -> None:
    ds = grain.MapDataset.source(ParquetDataSource(paths)).shuffle(seed=1)
    ids = _ids(ds)
    assert sorted(ids) == sorted(_ids(_expected(paths))) and ids != sorted(ids)
    assert_equal_output_after_checkpoint(ds.to_iter_dataset(), max_steps=None)


def test_source_is_thread_safe(paths: list[str]) -> None:
    source = ParquetDataSource(paths, cache_bytes=0)
    expected = _ids(_expected(paths))
    batches = [np.random.default_rng(k).integers(0, len(source), 9) for k in range(64)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda b: _ids(source.__getitems__(b)), batches))
    assert got == [[expected[i] for i in b] for b in batches]


def test_source_pickles_without_open_files_and_keeps_its_repr(paths: list[str]) -> None:
    source = ParquetDataSource(paths, columns=["id"])
    source[20]
    copy = pickle.loads(pickle.dumps(source))
    assert not copy._cache and repr(copy) == repr(source)
    assert _ids(copy) == _ids(source) and len(pickle.dumps(source)) < 2000


def test_data_loader_with_two_workers(paths: list[str]) -> None:
    source = ParquetDataSource(paths)

    def run(workers: int) -> list[int]:
        sampler = grain.IndexSampler(len(source), shuffle=True, seed=3, num_epochs=1)
        loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=workers)
        return _ids(loader)

    ids = run(2)
    assert ids == run(0) and sorted(ids) == sorted(_ids(_expected(paths)))


def test_source_repr_of_many_files_is_short_and_stable(tmp_path: Path) -> None:
    many = []
    for k in range(12):
        many.append(str(tmp_path / f"{k}.parquet"))
        pq.write_table(pa.table({"id": [k]}), many[-1])
    text = repr(ParquetDataSource(many))
    assert text == repr(ParquetDataSource(many)) and "12 files, sha256" in text
    assert text != repr(ParquetDataSource(many[::-1])) and len(text) < 300


def test_out_of_range_index_raises(paths: list[str]) -> None:
    source = ParquetDataSource(paths)
    with pytest.raises(IndexError, match="index 22 is out of range for length 22"):
        source[22]
    with pytest.raises(IndexError, match="index -1 is out of range"):
        source.__getitems__([0, -1])


def test_empty_files_and_row_groups_are_skipped(tmp_path: Path) -> None:
    empty, full = str(tmp_path / "empty.parquet"), str(tmp_path / "full.parquet")
    pq.write_table(pa.table({"id": pa.array([], pa.int64())}), empty)
    pq.write_table(pa.table({"id": [1, 2, 3]}), full, row_group_size=2)
    assert _ids(ParquetDataSource([empty, full, empty])) == [1, 2, 3]
    assert _ids(ParquetIterDataset([empty, full, empty])) == [1, 2, 3]


# -- filesystems -------------------------------------------------------------------------


def test_reads_file_urls_and_pyarrow_filesystems(paths: list[str]) -> None:
    from pyarrow import fs

    url = Path(paths[1]).as_uri()
    assert _ids(ParquetIterDataset(url)) == _ids(ParquetDataSource(url)) == list(range(100, 107))
    local = ParquetDataSource(paths[1], filesystem=fs.LocalFileSystem())
    assert _ids(local) == list(range(100, 107)) and "filesystem=<LocalFileSystem>" in repr(local)


def test_reads_fsspec_urls(paths: list[str]) -> None:
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    memory.pipe("/chute-test/part.parquet", Path(paths[2]).read_bytes())
    try:
        ids = list(range(200, 205))
        assert _ids(ParquetIterDataset("memory://chute-test/part.parquet")) == ids
        assert _ids(ParquetDataSource("/chute-test/part.parquet", filesystem=memory)) == ids
    finally:
        memory.rm("/chute-test", recursive=True)


# -- bad input ---------------------------------------------------------------------------


def test_missing_file_names_the_file(paths: list[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.parquet")
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        ParquetDataSource([paths[0], missing])
    it = iter(ParquetIterDataset([missing]))  # streams open files when they are read, as Grain
    with pytest.raises(FileNotFoundError, match="missing.parquet.*does not exist"):
        next(it)


@pytest.mark.parametrize("cut", ["not parquet", "truncated", "empty"])
def test_broken_file_names_the_file(paths: list[str], tmp_path: Path, cut: str) -> None:
    data = Path(paths[0]).read_bytes()
    broken = tmp_path / "broken.parquet"
    content = {"not parquet": b"id,name\n1,a\n" * 10, "truncated": data[: len(data) // 2]}
    broken.write_bytes(content.get(cut, b""))
    with pytest.raises(ValueError, match=r"broken.parquet.* is not a readable Parquet file"):
        ParquetDataSource(str(broken))
    with pytest.raises(ValueError, match=r"broken.parquet.* is not a readable Parquet file"):
        list(ParquetIterDataset([paths[1], str(broken)]))


def test_corrupt_row_group_names_file_and_row_group(paths: list[str], tmp_path: Path) -> None:
    path = tmp_path / "corrupt.parquet"
    pq.write_table(pa.table({"s": [f"value {i}" * 20 for i in range(300)]}), path)
    data = bytearray(path.read_bytes())
    data[100:400] = bytes(300)
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="row group 0 of .*corrupt.parquet"):
        next(iter(ParquetIterDataset(str(path))))
    with pytest.raises(OSError, match="row group 0 of .*corrupt.parquet"):
        ParquetDataSource(str(path))[0]


@pytest.mark.parametrize("make", [ParquetIterDataset, ParquetDataSource])
def test_bad_arguments_fail_at_construction(make: Any, paths: list[str]) -> None:
    with pytest.raises(ValueError, match="empty list of paths"):
        make([])
    with pytest.raises(TypeError, match="must be a str, an os.PathLike"):
        make(3)
    with pytest.raises(TypeError, match="every path must be a str"):
        make([paths[0], None])
    with pytest.raises(TypeError, match="unknown keyword argument.*'colums'"):
        make(paths, colums=["id"])


def test_bad_columns_fail_at_construction(paths: list[str]) -> None:
    with pytest.raises(ValueError, match=r"part-0.parquet' has no column \['nope'\]"):
        ParquetDataSource(paths, columns=["id", "nope"])
    with pytest.raises(TypeError, match=r"pass \['id'\] for one column"):
        ParquetDataSource(paths, columns="id")
    with pytest.raises(ValueError, match="pass None to read every column"):
        ParquetDataSource(paths, columns=[])
    with pytest.raises(ValueError, match="twice"):
        ParquetDataSource(paths, columns=["id", "id"])
    with pytest.raises(TypeError, match="cycle_length must be an int"):
        ParquetIterDataset(paths, cycle_length="2")


def test_missing_pyarrow_names_the_extra(paths: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install chute\[parquet\]"):
        ParquetIterDataset(paths)
    with pytest.raises(ImportError, match=r"pip install chute\[parquet\]"):
        ParquetDataSource(paths)


# -- what checkpoints record of the files ---------------------------------------------------


def test_checkpoints_of_other_parquet_files_or_shards_are_refused(
    paths: list[str], tmp_path: Path
) -> None:
    other = str(tmp_path / "other.parquet")
    pq.write_table(_table(7, sum(SIZES)), other, row_group_size=4)
    it = iter(grain.MapDataset.source(ParquetDataSource(paths)).to_iter_dataset())
    next(it)
    state = it.get_state()
    with pytest.raises(
        grain.CheckpointError,
        match=r"stage 0: saved source ParquetDataSource over"
        r" 22 elements from 3 files part-0.parquet to part-2.parquet",
    ):
        iter(grain.MapDataset.source(ParquetDataSource([other])).to_iter_dataset()).set_state(state)

    def shard(index: int) -> ParquetIterDataset:
        ds = ParquetIterDataset(paths)
        ds.set_slice(slice(index, None, 2))
        return ds

    saved = iter(shard(0))
    next(saved)
    with pytest.raises(grain.CheckpointError, match=r"from 2 files part-0.parquet to part-2"):
        iter(shard(1)).set_state(saved.get_state())
    again = iter(shard(0))
    again.set_state(saved.get_state())
    assert _ids(again) == _ids(shard(0))[1:]
