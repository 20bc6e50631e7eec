"""Errors name the file and the record within it, for file sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chute import MapDataset
from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.array_record.writer import write_array_record
from chute._sources.parquet.source import ParquetDataSource
from chute._sources.tfrecord import TFRecordIterDataset, write_tfrecord


def _chute_note(exc: BaseException) -> str:
    (note,) = [n for n in exc.__notes__ if n.startswith("chute: raised in stage")]
    return note


def test_map_error_over_array_record_shards_names_file_and_record(tmp_path: Path) -> None:
    files = write_array_record(
        [str(i).encode() for i in range(100)], tmp_path / "train", num_shards=4
    )
    source = ArrayRecordDataSource(str(tmp_path / "train") + "@4")
    order = [int(b) for b in MapDataset.source(source).shuffle(seed=3)]

    def decode(record: bytes) -> int:
        if record == b"83":
            raise ValueError("cannot decode")
        return int(record)

    with pytest.raises(ValueError, match="cannot decode") as info:
        list(MapDataset.source(source).shuffle(seed=3).map(decode).to_iter_dataset())
    shard, record = 83 % 4, 83 // 4  # the writer deals records out to the shards in turn
    index = 25 * shard + record
    assert _chute_note(info.value) == (
        f"chute: raised in stage map(decode) while processing element index {order.index(83)} "
        f"(source record {index}: {files[shard]} record {record})."
    )
    exc: Any = info.value
    assert (exc.chute_source_index, exc.chute_source_file, exc.chute_source_record) == (
        index,
        files[shard],
        record,
    )


@pytest.fixture
def corrupt_second_file(tmp_path: Path) -> tuple[list[str], list[bytes]]:
    records = [np.random.default_rng(i).bytes(64) for i in range(10)]
    files = write_array_record(
        records, tmp_path / "c", num_shards=2, options="group_size:1,uncompressed"
    )
    data = bytearray(Path(files[1]).read_bytes())
    data[data.find(records[3 * 2 + 1]) + 10] ^= 0xFF  # record 3 of the second file
    Path(files[1]).write_bytes(bytes(data))
    return files, records


def test_a_corrupt_record_read_in_a_pipeline_names_file_and_record(
    corrupt_second_file: tuple[list[str], list[bytes]],
) -> None:
    files, _ = corrupt_second_file
    source = ArrayRecordDataSource(files)
    for pipeline in (
        MapDataset.source(source).to_iter_dataset(),
        MapDataset.source(source).batch(4),
    ):
        with pytest.raises(ValueError, match="cannot read record 3") as info:
            list(pipeline)
        exc: Any = info.value
        assert (exc.chute_source_index, exc.chute_source_file, exc.chute_source_record) == (
            8,
            files[1],
            3,
        )
        assert f"element index 8 (source record 8: {files[1]} record 3)." in _chute_note(exc)


def test_map_error_over_parquet_files_names_file_and_row(tmp_path: Path) -> None:
    paths = []
    for k in range(3):
        paths.append(str(tmp_path / f"part-{k}.parquet"))
        pq.write_table(
            pa.table({"x": list(range(10 * k, 10 * k + 10))}), paths[-1], row_group_size=3
        )

    def parse(row: dict[str, Any]) -> int:
        if row["x"] == 27:
            raise KeyError("label")
        return int(row["x"])

    with pytest.raises(KeyError) as info:
        list(MapDataset.source(ParquetDataSource(paths)).shuffle(seed=0).map(parse))
    assert f"(source record 27: {paths[2]} record 7)." in _chute_note(info.value)
    exc: Any = info.value
    assert (exc.chute_source_file, exc.chute_source_record) == (paths[2], 7)


def test_map_error_after_tfrecord_names_file_and_byte_offset(tmp_path: Path) -> None:
    first, second = str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")
    write_tfrecord([b"x" * 5] * 3, first)
    write_tfrecord([b"ok", b"bad", b"ok"], second)

    def parse(record: bytes) -> bytes:
        if record == b"bad":
            raise ValueError("unparsable")
        return record

    with pytest.raises(ValueError, match="unparsable") as info:
        list(TFRecordIterDataset([first, second]).map(parse))
    offset = 16 + 2  # the framing (16 bytes) and data of the record before it
    assert _chute_note(info.value) == (
        f"chute: raised in stage map(parse) while processing element index 4 "
        f"({second} at byte {offset})."
    )
    exc: Any = info.value
    assert (exc.chute_source_file, exc.chute_source_offset) == (second, offset)


def test_a_corrupt_tfrecord_error_carries_file_and_offset(tmp_path: Path) -> None:
    path = str(tmp_path / "a.tfrecord")
    write_tfrecord([b"abc", b"def"], path)
    data = bytearray(Path(path).read_bytes())
    data[-6] ^= 0xFF  # inside the second record's data
    Path(path).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="bad data checksum") as info:
        list(TFRecordIterDataset(path))
    exc: Any = info.value
    assert (exc.chute_source_file, exc.chute_source_offset) == (path, 19)
