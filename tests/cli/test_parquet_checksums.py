"""``chute convert`` verifies the page checksums of its Parquet input; ``chute inspect``
names the Parquet files that carry none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chute.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("array_record")


def write(path: Path, checksums: bool) -> Path:
    table = pa.table({"x": np.arange(300), "s": [f"row {i}" for i in range(300)]})
    pq.write_table(table, path, row_group_size=100, write_page_checksum=checksums)
    return path


def damage(path: Path, group: int) -> None:
    """Flips a byte in the last data page of column ``x`` of row group ``group``."""
    chunk = pq.read_metadata(path).row_group(group).column(0)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 8] ^= 0xFF
    path.write_bytes(bytes(data))


def test_convert_of_a_damaged_checksummed_file_names_the_file_and_row_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path / "rows.parquet", checksums=True)
    damage(source, group=2)
    status = main(["convert", str(source), str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "row group 2 of" in err and "rows.parquet' is damaged" in err
    assert "copy it again" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.parquet"]


def test_inspect_names_the_parquet_files_without_page_checksums_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "a-checked.parquet", checksums=True)
    write(tmp_path / "b-unchecked.parquet", checksums=False)
    write(tmp_path / "c-unchecked.parquet", checksums=False)
    assert main(["inspect", str(tmp_path / "a-checked.parquet"), "-n", "1"]) == 0
    assert "checksum" not in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "*.parquet"), "-n", "1"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "checksum" in line]
    assert len(notes) == 1, notes
    assert notes[0].startswith("note: 2 of 3 Parquet file(s) carry no page checksums")
    assert "b-unchecked.parquet" in notes[0] and "a-checked" not in notes[0]
    assert "write_page_checksum=True" in notes[0]


def test_inspect_of_a_damaged_checksummed_file_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path / "rows.parquet", checksums=True)
    damage(source, group=0)
    assert main(["inspect", str(source), "-n", "1"]) == 2
    err = capsys.readouterr().err
    assert "row group 0 of" in err and "rows.parquet' is damaged" in err
