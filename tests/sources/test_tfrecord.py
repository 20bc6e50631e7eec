"""TFRecordIterDataset, read_tfrecord and write_tfrecord: TFRecord files in pure Python."""

from __future__ import annotations

import pathlib
import pickle
import struct

import numpy as np
import pytest

from chute._core.errors import CheckpointError, IteratorClosedError
from chute._sources import _crc32c, tfrecord
from chute._sources._crc32c import crc32c, masked_crc32c
from chute._sources.tfrecord import TFRecordIterDataset, read_tfrecord, write_tfrecord
from chute.experimental import assert_equal_output_after_checkpoint

RECORDS = [b"a", b"", b"hello world", bytes(range(256)) * 3, b"\x00" * 100]

# CRC32C test vectors (RFC 3720, B.4, and the common check value).
KNOWN_CRCS = [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),
    (b"\x00" * 32, 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


def write(tmp_path: pathlib.Path, name: str, records: list[bytes]) -> str:
    path = str(tmp_path / name)
    assert write_tfrecord(records, path) == len(records)
    return path


def offset_of(records: list[bytes], k: int) -> int:
    """The byte offset of record ``k`` in a file of ``records``."""
    return sum(len(r) + 16 for r in records[:k])


# -- CRC32C ----------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), KNOWN_CRCS)
def test_crc32c_matches_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected
    assert _crc32c._python_crc32c(data) == expected
    assert _crc32c._portable_crc32c(data) == expected


@pytest.mark.parametrize("size", [128, 129, 1000, 4096, 65535, 65536, 65537, 300_001])
def test_numpy_crc32c_agrees_with_the_byte_loop(size: int) -> None:
    data = np.random.default_rng(size).bytes(size)
    assert _crc32c._numpy_crc32c(data) == _crc32c._python_crc32c(data)
    assert _crc32c._numpy_crc32c(bytearray(data)) == crc32c(memoryview(data))


def test_masked_crc32c_rotates_and_adds_the_tfrecord_constant() -> None:
    crc = 0xE3069283
    expected = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) % 2**32
    assert masked_crc32c(b"123456789") == expected
    assert masked_crc32c(b"") == 0xA282EAD8


def test_file_layout_is_the_tfrecord_framing(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, "one.tfrecord", [b"payload"])
    raw = pathlib.Path(path).read_bytes()
    length = struct.pack("<Q", 7)
    expected = length + struct.pack("<I", masked_crc32c(length)) + b"payload"
    assert raw == expected + struct.pack("<I", masked_crc32c(b"payload"))


def test_files_match_tensorflow_when_it_is_installed(tmp_path: pathlib.Path) -> None:
    tf = pytest.importorskip("tensorflow")
    theirs = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(theirs) as writer:
        for r in RECORDS:
            writer.write(r)
    ours = write(tmp_path, "ours.tfrecord", RECORDS)
    assert pathlib.Path(ours).read_bytes() == pathlib.Path(theirs).read_bytes()
    assert list(read_tfrecord(theirs)) == RECORDS


# -- reading and writing ---------------------------------------------------------------


def test_round_trip_keeps_records_in_order(tmp_path: pathlib.Path) -> None:
    big = np.random.default_rng(0).bytes(3 << 20)  # larger than a read chunk
    records = [*RECORDS, big, b"after big"]
    path = write(tmp_path, "data.tfrecord", records)
    assert list(read_tfrecord(path)) == records
    assert list(TFRecordIterDataset(path)) == records
    assert list(TFRecordIterDataset(pathlib.Path(path), verify_checksums=False)) == records


def test_records_straddling_read_chunks(tmp_path: pathlib.Path, monkeypatch) -> None:
    monkeypatch.setattr(tfrecord, "_CHUNK_BYTES", 7)
    path = write(tmp_path, "data.tfrecord", RECORDS * 3)
    assert list(TFRecordIterDataset(path)) == RECORDS * 3


def test_write_takes_any_bytes_like_record(tmp_path: pathlib.Path) -> None:
    records = [bytearray(b"ab"), memoryview(b"cd"), np.arange(3, dtype=np.int32)]
    path = write(tmp_path, "data.tfrecord", records)  # type: ignore[arg-type]
    assert list(read_tfrecord(path)) == [b"ab", b"cd", np.arange(3, dtype=np.int32).tobytes()]


def test_write_rejects_str_records(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TypeError, match=r"record 1 must be bytes-like .* \.encode\(\)"):
        write_tfrecord([b"ok", "text"], tmp_path / "data.tfrecord")


def test_reads_several_files_one_after_another(tmp_path: pathlib.Path) -> None:
    first = write(tmp_path, "a.tfrecord", [b"1", b"2"])
    empty = write(tmp_path, "empty.tfrecord", [])
    second = write(tmp_path, "b.tfrecord", [b"3"])
    assert list(TFRecordIterDataset([first, empty, second, first])) == [
        b"1",
        b"2",
        b"3",
        b"1",
        b"2",
    ]
    assert list(TFRecordIterDataset([empty])) == []


def test_works_in_a_pipeline_and_pickles(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, "data.tfrecord", RECORDS)
    ds = pickle.loads(pickle.dumps(TFRecordIterDataset(path))).map(len).batch(2)
    assert [b.tolist() for b in ds] == [[1, 0], [11, 768], [100]]
    assert "TFRecordIterDataset" in repr(TFRecordIterDataset([path, path]))


# -- checkpoints -----------------------------------------------------------------------


def test_restores_anywhere_across_files(tmp_path: pathlib.Path) -> None:
    paths = [
        write(tmp_path, "a.tfrecord", RECORDS),
        write(tmp_path, "empty.tfrecord", []),
        write(tmp_path, "b.tfrecord", RECORDS[::-1]),
    ]
    assert_equal_output_after_checkpoint(TFRecordIterDataset(paths), max_steps=None)


def test_state_is_file_index_and_byte_offset(tmp_path: pathlib.Path) -> None:
    paths = [write(tmp_path, "a.tfrecord", RECORDS), write(tmp_path, "b.tfrecord", [b"x"])]
    it = iter(TFRecordIterDataset(paths))
    for _ in range(2):
        next(it)
    state = it.get_state()
    assert (state["file_index"], state["offset"]) == (0, offset_of(RECORDS, 2))
    assert state["version"] == 1
    fresh = iter(TFRecordIterDataset(paths))
    fresh.set_state({**state, "file_index": 1, "offset": 0})
    assert list(fresh) == [b"x"]
    assert fresh.get_state()["file_index"] == 2


def test_rejects_a_state_for_other_files(tmp_path: pathlib.Path) -> None:
    it = iter(TFRecordIterDataset(write(tmp_path, "a.tfrecord", RECORDS)))
    with pytest.raises(CheckpointError, match="file_index 3 is past the 1 files"):
        it.set_state({**it.get_state(), "file_index": 3})
    with pytest.raises(CheckpointError, match="different pipeline"):
        it.set_state({**it.get_state(), "stage": "parquet"})


def test_closed_iterators_raise(tmp_path: pathlib.Path) -> None:
    with iter(TFRecordIterDataset(write(tmp_path, "a.tfrecord", RECORDS))) as it:
        next(it)
    with pytest.raises(IteratorClosedError):
        next(it)


# -- damaged and missing files ---------------------------------------------------------


def damage(path: str, offset: int, *, flip: bool = True) -> None:
    """Flips the byte at ``offset``, or cuts the file there."""
    raw = bytearray(pathlib.Path(path).read_bytes())
    if flip:
        raw[offset] ^= 0x01
    else:
        del raw[offset:]
    pathlib.Path(path).write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("where", "flip", "problem"),
    [
        (0, True, "bad length checksum"),
        (9, True, "bad length checksum"),
        (12, True, "bad data checksum"),
        (12 + 11, True, "bad data checksum"),
        (5, False, r"truncated header \(5 of 12 bytes\)"),
        (12 + 4, False, r"truncated record \(4 of 15 data\+checksum bytes\)"),
        (12 + 11 + 2, False, r"truncated record \(13 of 15"),
    ],
)
def test_damaged_records_raise_naming_file_and_offset(
    tmp_path: pathlib.Path, where: int, flip: bool, problem: str
) -> None:
    path = write(tmp_path, "data.tfrecord", RECORDS)
    bad = offset_of(RECORDS, 2)  # b"hello world"
    damage(path, bad + where, flip=flip)
    it = iter(TFRecordIterDataset(path))
    assert [next(it), next(it)] == RECORDS[:2]
    message = rf"corrupt TFRecord file '{path}': {problem}.* at byte offset {bad}\."
    for _ in range(2):  # the iterator stays at the bad record
        with pytest.raises(ValueError, match=message):
            next(it)
    assert it.get_state()["offset"] == bad
    with pytest.raises(ValueError, match=message):
        list(read_tfrecord(path))


def test_unchecked_data_is_read_but_lengths_are_still_checked(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, "data.tfrecord", RECORDS)
    damage(path, offset_of(RECORDS, 2) + 12)
    records = list(TFRecordIterDataset(path, verify_checksums=False))
    assert records[2] == b"iello world"
    damage(path, offset_of(RECORDS, 3) + 3)
    with pytest.raises(ValueError, match="bad length checksum"):
        list(TFRecordIterDataset(path, verify_checksums=False))


def test_a_file_that_is_not_a_tfrecord_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some text that is long enough")
    with pytest.raises(ValueError, match=r"bad length checksum .* byte offset 0\..*not a TFRecord"):
        list(TFRecordIterDataset(path))


def test_missing_files_raise_when_iterated_and_when_read(tmp_path: pathlib.Path) -> None:
    missing = str(tmp_path / "missing.tfrecord")
    ds = TFRecordIterDataset([write(tmp_path, "a.tfrecord", RECORDS), missing])
    with pytest.raises(FileNotFoundError, match="no such TFRecord file: .*missing.tfrecord"):
        iter(ds)
    with pytest.raises(FileNotFoundError, match="missing.tfrecord"):
        next(read_tfrecord(missing))
    path = write(tmp_path, "gone.tfrecord", RECORDS)
    ds = TFRecordIterDataset(path)
    pathlib.Path(path).unlink()
    with pytest.raises(FileNotFoundError, match="gone.tfrecord"):
        next(iter(ds))


@pytest.mark.parametrize("path", [3, [b"bytes-path"], None, [3]])
def test_rejects_bad_paths(path: object) -> None:
    with pytest.raises(TypeError, match="TFRecordIterDataset: .*path"):
        TFRecordIterDataset(path)


def test_rejects_an_empty_list_of_paths() -> None:
    with pytest.raises(ValueError, match="TFRecordIterDataset: the list of paths is empty"):
        TFRecordIterDataset([])


def test_a_checkpoint_of_other_tfrecord_files_is_refused(tmp_path: pathlib.Path) -> None:
    first = write(tmp_path, "host-0.tfrecord", [b"a", b"b", b"c"])
    second = write(tmp_path, "host-1.tfrecord", [b"x", b"y", b"z"])
    it = iter(TFRecordIterDataset(first))
    next(it)
    with pytest.raises(CheckpointError, match=r"saved tfrecord from 1 file host-0.tfrecord, "):
        iter(TFRecordIterDataset(second)).set_state(it.get_state())
