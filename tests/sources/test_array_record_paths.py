"""ArrayRecordDataSource finds shards from the prefix that `chute convert` printed, and
says which shard counts exist when the one given is wrong."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("array_record")

from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.array_record.writer import write_array_record

RECORDS = [f"r{i}".encode() for i in range(10)]


def test_a_bare_prefix_reads_its_shards(tmp_path: Path) -> None:
    files = write_array_record(RECORDS, tmp_path / "train", num_shards=4)
    source = ArrayRecordDataSource(str(tmp_path / "train"))
    assert source.paths == files
    assert sorted(source) == sorted(RECORDS)


def test_a_bare_prefix_reads_shards_named_without_suffix(tmp_path: Path) -> None:
    files = write_array_record(RECORDS, tmp_path / "x.array_record", num_shards=2)
    for f in files:  # TFDS's naming: name.array_record-00000-of-00002
        os.rename(f, f.removesuffix(".array_record"))
    source = ArrayRecordDataSource(tmp_path / "x.array_record")
    assert len(source) == len(RECORDS)


def test_a_bare_prefix_reads_prefix_dot_array_record(tmp_path: Path) -> None:
    (file,) = write_array_record(RECORDS, tmp_path / "one")
    os.rename(file, tmp_path / "data.array_record")
    assert list(ArrayRecordDataSource(str(tmp_path / "data"))) == RECORDS


def test_a_wrong_shard_count_names_the_counts_that_exist(tmp_path: Path) -> None:
    write_array_record(RECORDS, tmp_path / "train", num_shards=4)
    prefix = str(tmp_path / "train")
    with pytest.raises(FileNotFoundError, match=f"train has 4 shards \\(use {prefix}@4\\)"):
        ArrayRecordDataSource(prefix + "@5")


def test_a_shard_spec_with_no_shards_names_the_files_it_looked_for(tmp_path: Path) -> None:
    prefix = str(tmp_path / "data" / "nope")
    with pytest.raises(FileNotFoundError) as raised:
        ArrayRecordDataSource(prefix + "@4")
    message = str(raised.value)
    assert f"no such file: {prefix}-00000-of-00004.array_record," in message
    assert f"{prefix}-00003-of-00004.array_record, each with or without .array_record" in message


def test_a_shard_spec_with_missing_shards_names_them(tmp_path: Path) -> None:
    write_array_record(RECORDS, tmp_path / "train", num_shards=4)
    os.remove(tmp_path / "train-00002-of-00004.array_record")
    with pytest.raises(FileNotFoundError, match="1 are missing: train-00002-of-00004"):
        ArrayRecordDataSource(str(tmp_path / "train@4"))


def test_a_prefix_with_an_incomplete_or_second_set_is_refused(tmp_path: Path) -> None:
    write_array_record(RECORDS, tmp_path / "train", num_shards=4)
    write_array_record(RECORDS, tmp_path / "train", num_shards=2)
    with pytest.raises(FileNotFoundError, match="2 shards .* and 4 shards"):
        ArrayRecordDataSource(str(tmp_path / "train"))
    for f in tmp_path.glob("train-*-of-00002.array_record"):
        f.unlink()
    os.remove(tmp_path / "train-00000-of-00004.array_record")
    with pytest.raises(FileNotFoundError, match="4 shards .*only 3 of them there"):
        ArrayRecordDataSource(str(tmp_path / "train"))


def test_a_missing_prefix_says_what_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file: .*NNNNN-of-NNNNN"):
        ArrayRecordDataSource(str(tmp_path / "nothing"))
