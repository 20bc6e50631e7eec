"""RangedArrayRecordReader: ArrayRecord read by byte ranges matches array_record's reader."""

from __future__ import annotations

import os
import pickle
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from highway_hash_reference import highway_hash64
from hypothesis import given, settings
from hypothesis import strategies as st

from chute._remote.ranged_source import LocalRanges, RangedByteSource
from chute._sources._highway_hash_many import highway_hash64_many
from chute._sources.array_record.chunk_cache import chunk_cost
from chute._sources.array_record.format import BLOCK_SIZE, ArrayRecordFormatError
from chute._sources.array_record.open_shards import OpenShards
from chute._sources.array_record.ranged import RangedArrayRecordReader

pytest.importorskip("cramjam")
ar = pytest.importorskip("array_record.python.array_record_module")

COMPRESSIONS = ["uncompressed", "zstd", "zstd:7", "brotli", "brotli:1", "snappy"]
GROUPS = ["group_size:1", "group_size:100", "group_size:1000", ""]


def _records(seed: int) -> list[bytes]:
    """Empty, one-byte, 100 KiB, block-crossing (> 64 KiB) and many tiny records."""
    rng = random.Random(seed)
    out = [b"", b"x", rng.randbytes(100 << 10), rng.randbytes(70_000) + bytes(70_000)]
    out += [rng.randbytes(rng.randrange(0, 40)) for _ in range(600)]
    out += [b"", rng.randbytes(3 * BLOCK_SIZE + 5), b"z"]
    return out


RECORDS = _records(0)


def _write(path: Path, options: str, records: list[bytes] = RECORDS) -> str:
    writer = ar.ArrayRecordWriter(str(path), options)
    for record in records:
        writer.write(record)
    writer.close()
    return str(path)


class CountingRanges(LocalRanges):
    """LocalRanges that records every read_ranges call."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.calls: list[list[tuple[int, int]]] = []

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        self.calls.append(list(ranges))
        return super().read_ranges(ranges)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.calls = []


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("ranged")
    out = {}
    for i, comp in enumerate(COMPRESSIONS):
        for j, group in enumerate(GROUPS):
            options = ",".join(o for o in (comp, group) if o)
            out[options] = _write(root / f"f{i}_{j}.array_record", options)
    return out


def test_source_protocol_is_met_by_local_ranges(tmp_path: Path) -> None:
    path = tmp_path / "b"
    path.write_bytes(b"abcdef")
    source = LocalRanges(path)
    assert isinstance(source, RangedByteSource)
    assert source.read_ranges([(4, 2), (0, 2)]) == [b"ef", b"ab"]
    with pytest.raises(ValueError, match="outside the file"):
        source.read_ranges([(4, 10)])
    assert pickle.loads(pickle.dumps(source)).read_ranges([(1, 1)]) == [b"b"]


def test_the_reader_counts_its_sources_retries_and_none_for_a_local_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.array_record", "uncompressed", [b"a", b"b"])

    class Retrying(LocalRanges):
        retries = 3  # a bucket source's count of requests it retried

    assert RangedArrayRecordReader(Retrying(path)).retries == 3
    assert RangedArrayRecordReader(LocalRanges(path)).retries == 0
    shards = OpenShards(limit=2)  # what an indexed source counts: its open shards' retries
    shards.add(0, RangedArrayRecordReader(Retrying(path)))
    shards.add(1, RangedArrayRecordReader(LocalRanges(path)))
    assert shards.retries() == 3


@pytest.mark.parametrize("options", [f"{c},{g}".strip(",") for c in COMPRESSIONS for g in GROUPS])
def test_records_match_array_record_for_every_compression(
    files: dict[str, str], options: str
) -> None:
    path = files[options]
    ours = RangedArrayRecordReader(LocalRanges(path), cache_bytes=1 << 20)
    theirs = ar.ArrayRecordReader(path)
    assert len(ours) == theirs.num_records() == len(RECORDS)
    everything = list(range(len(RECORDS)))
    assert ours.read(everything) == theirs.read(everything) == RECORDS
    rng = random.Random(options)
    for _ in range(5):
        batch = [rng.randrange(len(RECORDS)) for _ in range(rng.randrange(1, 80))]
        assert ours.read(batch) == theirs.read(batch)


def test_files_array_record_wrote_verify_clean_by_default(
    files: dict[str, str], checksum_impl: str
) -> None:
    for path in files.values():
        reader = RangedArrayRecordReader(LocalRanges(path), cache_bytes=0)
        assert reader._verify
        assert reader.read(list(range(len(RECORDS)))) == RECORDS


def _flip(path: str, at: int) -> None:
    data = bytearray(Path(path).read_bytes())
    data[at] ^= 0x01
    Path(path).write_bytes(bytes(data))


def test_a_flipped_byte_in_uncompressed_chunk_data_is_refused_by_default(
    tmp_path: Path, checksum_impl: str
) -> None:
    records = [bytes([65 + i]) * 3000 for i in range(30)]
    path = _write(tmp_path / "u", "uncompressed,group_size:1", records)
    offset = _chunk_offsets(path, 8)[7]
    _flip(path, offset + 40 + 1000)  # a byte of record 7's value
    reader = RangedArrayRecordReader(LocalRanges(path))
    assert reader.read([6, 8]) == [records[6], records[8]]
    message = (
        rf"{path}: chunk at offset {offset}: the chunk data is corrupted \(its hash does not "
        r"match\), so none of its 1 records is returned. The file is damaged: restore it"
    )
    with pytest.raises(ArrayRecordFormatError, match=message):
        reader.read([5, 7])
    batch = list(range(30))  # many chunks in one call: still the one that is bad
    with pytest.raises(ArrayRecordFormatError, match=rf"chunk at offset {offset}: .*corrupted"):
        RangedArrayRecordReader(LocalRanges(path)).read(batch)
    unchecked = RangedArrayRecordReader(LocalRanges(path), verify_data=False).read([7])
    assert unchecked != [records[7]] and len(unchecked[0]) == 3000  # what the check prevents


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, len(RECORDS) - 1), max_size=60))
def test_any_batch_comes_back_in_the_order_asked(batch: list[int]) -> None:
    reader = _shared_reader()
    assert reader.read(batch) == [RECORDS[i] for i in batch]


_SHARED: dict[str, RangedArrayRecordReader] = {}


def _shared_reader() -> RangedArrayRecordReader:
    if "r" not in _SHARED:
        import tempfile

        path = os.path.join(tempfile.mkdtemp(), "h.array_record")
        _SHARED["r"] = RangedArrayRecordReader(
            LocalRanges(_write(Path(path), "snappy,group_size:7")), cache_bytes=200_000
        )
    return _SHARED["r"]


def test_out_of_range_index_names_index_and_length(files: dict[str, str]) -> None:
    reader = RangedArrayRecordReader(LocalRanges(files["uncompressed,group_size:1"]))
    with pytest.raises(IndexError, match=rf"index {len(RECORDS)} .*length {len(RECORDS)}"):
        reader.read([0, len(RECORDS)])
    with pytest.raises(IndexError, match="index -1"):
        reader.read([-1])
    assert reader.read([]) == []


def test_empty_file_has_no_records(tmp_path: Path) -> None:
    reader = RangedArrayRecordReader(LocalRanges(_write(tmp_path / "e", "group_size:1", [])))
    assert len(reader) == 0 and reader.num_chunks == 0


def test_consecutive_indices_take_one_range(tmp_path: Path) -> None:
    source = CountingRanges(_write(tmp_path / "c", "zstd,group_size:1"))
    reader = RangedArrayRecordReader(source, cache_bytes=0)
    assert len(source.calls) == 1  # the footer came with the postscript
    assert reader.read(list(range(100, 400))) == RECORDS[100:400]
    assert len(source.calls) == 2 and len(source.calls[1]) == 1


def test_scattered_indices_take_one_call_and_at_most_one_range_per_chunk(tmp_path: Path) -> None:
    source = CountingRanges(_write(tmp_path / "s", "uncompressed,group_size:10"))
    reader = RangedArrayRecordReader(source, cache_bytes=0, merge_gap_bytes=0)
    batch = [600, 3, 5, 150, 151, 599, 2, 420]
    assert reader.read(batch) == [RECORDS[i] for i in batch]
    chunks = {i // 10 for i in batch}
    assert len(source.calls) == 2 and len(source.calls[1]) <= len(chunks)
    merged = CountingRanges(source.path)
    assert RangedArrayRecordReader(merged, cache_bytes=0).read(batch) == reader.read(batch)
    assert len(merged.calls[1]) < len(chunks)  # nearby chunks merge under the default gap


def test_cache_stays_within_its_bound_and_saves_reads(tmp_path: Path) -> None:
    source = CountingRanges(_write(tmp_path / "k", "zstd,group_size:1"))
    bound = 150_000
    reader = RangedArrayRecordReader(source, cache_bytes=bound)
    rng = random.Random(3)
    for _ in range(20):
        batch = [rng.randrange(len(RECORDS)) for _ in range(30)]
        assert reader.read(batch) == [RECORDS[i] for i in batch]
        current = chunk_cost((RECORDS[batch[-1]], [0, len(RECORDS[batch[-1]])]))
        assert reader.cached_bytes <= max(bound, current)  # the chunk read last may exceed it
    calls = len(source.calls)
    small = list(range(10, 20))
    reader.read(small)
    reader.read(small)
    assert len(source.calls) == calls + 1  # the second read came from the cache
    restored = pickle.loads(pickle.dumps(reader))
    assert restored.cached_bytes == 0 and restored.read(small) == RECORDS[10:20]


def test_truncated_file_is_refused_naming_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "t", "zstd,group_size:1")
    data = Path(path).read_bytes()
    for keep in (100, BLOCK_SIZE + 10, len(data) - 1):
        Path(path).write_bytes(data[:keep])
        with pytest.raises(ArrayRecordFormatError, match=rf"{path}.*(offset|short)"):
            RangedArrayRecordReader(LocalRanges(path))


def _chunk_offsets(path: str, count: int) -> list[int]:
    """File offsets of the first ``count`` record chunks, from the footer."""
    return RangedArrayRecordReader(LocalRanges(path))._footer.starts[:count].tolist()


@pytest.mark.parametrize("where", ["header", "data"])
def test_corrupted_chunk_is_reported_with_file_and_offset(tmp_path: Path, where: str) -> None:
    path = _write(tmp_path / "x", "uncompressed,group_size:1", RECORDS[:20])
    offset = _chunk_offsets(path, 6)[5]
    data = bytearray(Path(path).read_bytes())
    data[offset + (20 if where == "header" else 45)] ^= 0x40
    Path(path).write_bytes(bytes(data))
    reader = RangedArrayRecordReader(LocalRanges(path), verify_data=True)
    assert reader.read([4]) == [RECORDS[4]]
    with pytest.raises(ArrayRecordFormatError, match=rf"{path}: chunk at offset {offset}"):
        reader.read([5])


def test_corrupted_compressed_chunk_fails_without_data_hash(tmp_path: Path) -> None:
    path = _write(tmp_path / "z", "zstd,group_size:100")
    offset = _chunk_offsets(path, 1)[0]
    data = bytearray(Path(path).read_bytes())
    data[offset + 40 + 30] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    reader = RangedArrayRecordReader(LocalRanges(path))
    with pytest.raises(ArrayRecordFormatError, match=rf"chunk at offset {offset}"):
        reader.read([0])


def test_transposed_files_are_refused_with_advice(tmp_path: Path) -> None:
    path = _write(tmp_path / "tr", "transpose:true,group_size:4", RECORDS[:8])
    with pytest.raises(ArrayRecordFormatError, match="transpose"):
        RangedArrayRecordReader(LocalRanges(path))


def test_bad_arguments_are_refused_when_built(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="LocalRanges"):
        RangedArrayRecordReader(str(tmp_path))  # type: ignore[arg-type]
    path = _write(tmp_path / "a", "group_size:1", [b"a"])
    with pytest.raises(ValueError, match="cache_bytes"):
        RangedArrayRecordReader(LocalRanges(path), cache_bytes=-1)


def test_highway_hash_matches_riegeli_file_signature() -> None:
    signature = bytes.fromhex(
        "83af70d10d884a3f0000000000000000400000000000000091bac23c9287e1a9"
        "0000000000000000e19f13c0e9b1c37273000000000000000000000000000000"
    )
    assert highway_hash64(signature[32:64]) == struct.unpack_from("<Q", signature, 24)[0]
    assert highway_hash64(signature[8:24]) == struct.unpack_from("<Q", signature, 0)[0]
    assert highway_hash64(b"") == struct.unpack_from("<Q", signature, 40)[0]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_highway_hash_of_many_inputs_equals_one_by_one(data: Any) -> None:
    length = data.draw(st.integers(0, 100))
    count = data.draw(st.integers(1, 9))
    rows = [data.draw(st.binary(min_size=length, max_size=length)) for _ in range(count)]
    many = highway_hash64_many(np.frombuffer(b"".join(rows), np.uint8).reshape(count, length))
    assert [int(h) for h in many] == [highway_hash64(r) for r in rows]


@pytest.mark.parametrize("where", ["chunk header", "block header"])
def test_a_corrupted_header_in_a_large_batch_names_its_chunk(tmp_path: Path, where: str) -> None:
    records = [bytes([i]) * (20_000 if where == "block header" else 10) for i in range(40)]
    path = _write(tmp_path / "b", "uncompressed,group_size:1", records)
    starts = _chunk_offsets(path, 40)
    data = bytearray(Path(path).read_bytes())
    if where == "chunk header":
        victim = starts[17]
        data[victim + 20] ^= 0x01
    else:  # the block header at 2 * 64 KiB, inside the chunk that crosses it
        victim = max(s for s in starts if s < 2 * BLOCK_SIZE)
        data[2 * BLOCK_SIZE + 20] ^= 0x01
    Path(path).write_bytes(bytes(data))
    reader = RangedArrayRecordReader(LocalRanges(path))
    wanted = [i for i in range(40) if starts[i] != victim]
    assert reader.read(wanted) == [records[i] for i in wanted]  # many headers hashed at once
    with pytest.raises(ArrayRecordFormatError, match=rf"chunk at offset {victim}: .*{where}"):
        RangedArrayRecordReader(LocalRanges(path)).read(list(range(40)))
