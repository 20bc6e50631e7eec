"""Parquet page checksums: verified by every chute reader, and found missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute._sources.parquet import checks as parquet_checks

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from chute._sources.parquet.iter import ParquetIterDataset  # noqa: E402
from chute._sources.parquet.source import ParquetDataSource  # noqa: E402

ROWS = 600
FLIPS = 150  # single-byte flips, spread over the pages of every column chunk


def _table() -> Any:
    ids = np.arange(ROWS)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "f": np.random.default_rng(0).random(ROWS),
            "s": [None if i % 7 == 0 else f"row {i % 50}" for i in ids],
            "l": [list(range(i % 4)) for i in ids],
        }
    )


def _plain(rows: Any) -> list[dict[str, Any]]:
    def value(v: Any) -> Any:
        return v.tolist() if isinstance(v, (np.ndarray, np.generic)) else v

    return [{k: value(v) for k, v in row.items()} for row in rows]


def _page_positions(path: Path, count: int) -> list[int]:
    """``count`` byte offsets spread evenly over the file's column chunks (pages)."""
    meta = pq.read_metadata(path)
    offsets: list[int] = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            chunk = meta.row_group(g).column(c)
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            offsets.extend(range(start, start + chunk.total_compressed_size))
    picked = np.linspace(0, len(offsets) - 1, count).astype(int)
    return [offsets[i] for i in picked]


def _by_index(path: str) -> list[dict[str, Any]]:
    source = ParquetDataSource(path, cache_bytes=0)
    return _plain(source.__getitems__(np.arange(len(source))))


def _streamed(path: str) -> list[dict[str, Any]]:
    return _plain(ParquetIterDataset(path))


def _read_both(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return _by_index(path), _streamed(path)


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_a_flipped_byte_in_a_checksummed_file_raises_or_reads_the_original(
    tmp_path: Path, compression: str
) -> None:
    clean = tmp_path / "clean.parquet"
    pq.write_table(
        _table(), clean, row_group_size=150, compression=compression, write_page_checksum=True
    )
    expected = _plain(pq.read_table(clean).to_pylist())
    data = clean.read_bytes()
    damaged = tmp_path / "damaged.parquet"
    raised = 0
    for position in _page_positions(clean, FLIPS):
        flipped = bytearray(data)
        flipped[position] ^= 0xFF
        damaged.write_bytes(bytes(flipped))
        for read in (_by_index, _streamed):
            try:
                rows = read(str(damaged))
            except OSError as exc:
                raised += 1
                assert "damaged.parquet" in str(exc), (position, exc)
                if parquet_checks.is_checksum_error(exc.__cause__ or exc):
                    assert "row group" in str(exc) and "copy it again" in str(exc)
                continue
            assert rows == expected, f"byte {position} flipped: rows read back wrong"
    assert raised > FLIPS  # most flips are caught: the checksums are verified


def test_a_clean_file_reads_with_checksums_verified(tmp_path: Path) -> None:
    checked, unchecked = tmp_path / "checked.parquet", tmp_path / "unchecked.parquet"
    pq.write_table(_table(), checked, row_group_size=100, write_page_checksum=True)
    pq.write_table(_table(), unchecked, row_group_size=100)
    expected = _plain(_table().to_pylist())
    for path in (checked, unchecked):
        assert _read_both(str(path)) == (expected, expected)
        mapped = ParquetDataSource(str(path), columns=["id", "l"], memory_map=True)
        assert _plain(mapped) == [{"id": r["id"], "l": r["l"]} for r in expected]


def test_a_damaged_page_names_the_file_the_row_group_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "one.parquet"
    pq.write_table(_table(), path, row_group_size=200, write_page_checksum=True)
    chunk = pq.read_metadata(path).row_group(2).column(0)  # the ids of rows 400-599
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 8] ^= 0xFF  # a value's byte
    path.write_bytes(bytes(data))
    source = ParquetDataSource(str(path))
    assert _plain([source[5]]) == _plain([_table().to_pylist()[5]])  # row group 0 is intact
    message = r"ParquetDataSource: row group 2 of '.*one.parquet' is damaged: a page's checksum"
    with pytest.raises(OSError, match=message + r".*copy it again from where it came from"):
        source[450]
    with pytest.raises(OSError, match="ParquetIterDataset: row group 2 of '.*one.parquet'"):
        list(ParquetIterDataset(str(path)))
    assert len(_plain(ParquetDataSource(str(path), page_checksum_verification=False))) == ROWS


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_has_page_checksums_reads_the_first_page_header(
    tmp_path: Path, checksums: bool, version: str
) -> None:
    path = tmp_path / "x.parquet"
    for dictionary in (True, False):
        pq.write_table(_table(), path, write_page_checksum=checksums, data_page_version=version,
                       use_dictionary=dictionary)  # fmt: skip
        meta = pq.read_metadata(path)
        assert parquet_checks.local_has_page_checksums(str(path), meta) is checksums
    pq.write_table(_table().slice(0, 0), path)
    assert parquet_checks.local_has_page_checksums(str(path), pq.read_metadata(path)) is None
