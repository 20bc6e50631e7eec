"""ArrayRecordDataSource over a data-set index: same records, bounded memory, loud on change."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("array_record")
pytest.importorskip("cramjam")

import chute
from chute import ArrayRecordDataSource, MapDataset, MultiprocessingOptions
from chute._sources.array_record import indexed as indexed_array_record
from chute._sources.array_record.index import write_index
from chute._sources.array_record.writer import write_array_record
from chute.cli import main


def make_set(
    folder: Path, shards: int = 5, records: int = 300, options: str | None = None
) -> list[str]:
    data = [b"r%05d-" % i + b"x" * (i % 37) for i in range(shards * records)]
    kwargs: dict[str, Any] = {"num_shards": shards}
    if options:
        kwargs["options"] = options
    return write_array_record(data, str(folder / "train"), **kwargs)


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[list[str], str]:
    files = make_set(tmp_path)
    return files, write_index(files, str(tmp_path / "train.chute-index"))


@pytest.mark.parametrize("options", [None, "group_size:100,zstd:3", "group_size:7,uncompressed"])
def test_an_index_gives_the_same_records_as_the_shards(tmp_path: Path, options: str | None) -> None:
    files = make_set(tmp_path, options=options)
    index = write_index(files, str(tmp_path / "train.chute-index"))
    src, ref = ArrayRecordDataSource(index), ArrayRecordDataSource(files)
    assert isinstance(src, ArrayRecordDataSource) and len(src) == len(ref) == 1500
    idx = np.random.default_rng(0).integers(0, len(src), 400)
    assert src.__getitems__(idx) == ref.__getitems__(idx)
    assert src[1499] == ref[1499] and src[0] == ref[0]
    assert list(src) == list(ref)


def test_an_indexed_source_pickles_and_runs_in_workers(indexed: tuple[list[str], str]) -> None:
    files, index = indexed
    src = ArrayRecordDataSource(index)
    assert pickle.loads(pickle.dumps(src))[7] == src[7]
    ds = MapDataset.source(src).seed(1).shuffle().to_iter_dataset()
    plain = list(MapDataset.source(ArrayRecordDataSource(files)).seed(1).shuffle())
    assert list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))) == [
        plain[w + 2 * i] for i in range(750) for w in range(2)
    ]


def test_few_shards_are_open_at_once(
    indexed: tuple[list[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexed_array_record, "MAX_OPEN", 2)
    src = ArrayRecordDataSource(indexed[1])
    src.__getitems__(list(range(0, 1500, 100)))  # every shard
    assert len(src._open) <= 2
    src.close()
    assert not src._open


def test_a_shard_changed_since_the_index_raises(indexed: tuple[list[str], str]) -> None:
    files, index = indexed
    src = ArrayRecordDataSource(index)
    with open(files[2], "ab") as f:
        f.write(b"more")
    with pytest.raises(chute.SourceChangedError, match="changed since .* was written"):
        src[2 * 300 + 1]
    os.remove(files[3])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        src[3 * 300]


def test_a_flipped_byte_in_a_shard_is_refused_by_default(
    tmp_path: Path, checksum_impl: str
) -> None:
    """Bit rot: one byte of a record's value changes, the file's size and mtime do not."""
    from chute._remote.ranged_source import LocalRanges
    from chute._sources.array_record.format import ArrayRecordFormatError
    from chute._sources.array_record.ranged import RangedArrayRecordReader

    files = make_set(tmp_path, shards=3, records=100, options="group_size:1,uncompressed")
    index = write_index(files, str(tmp_path / "train.chute-index"))
    chunk = int(RangedArrayRecordReader(LocalRanges(files[1]))._footer.starts[7])
    stat = os.stat(files[1])
    data = bytearray(Path(files[1]).read_bytes())
    data[chunk + 40 + 3 + 2] ^= 0x01  # past the compression byte and sizes: the value
    Path(files[1]).write_bytes(bytes(data))
    os.utime(files[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    src = ArrayRecordDataSource(index)
    assert src[106] == ArrayRecordDataSource(files)[106]  # its neighbour in the file is whole
    message = rf"{files[1]}: chunk at offset {chunk}: the chunk data is corrupted"
    with pytest.raises(ArrayRecordFormatError, match=message) as info:
        src.__getitems__([5, 107, 250])
    assert info.value.chute_source_file == files[1]  # type: ignore[attr-defined]
    assert info.value.chute_source_index == 107  # type: ignore[attr-defined]
    with pytest.raises(ArrayRecordFormatError, match=message):
        list(MapDataset.source(src).batch(16))


def test_bad_index_files_say_what_is_wrong(tmp_path: Path, indexed: tuple[list[str], str]) -> None:
    with pytest.raises(FileNotFoundError, match="no such index"):
        ArrayRecordDataSource(str(tmp_path / "none.chute-index"))
    fake = tmp_path / "fake.chute-index"
    fake.write_bytes(b"not an index at all")
    with pytest.raises(ValueError, match="not a chute index"):
        ArrayRecordDataSource(str(fake))
    cut = tmp_path / "cut.chute-index"
    cut.write_bytes(Path(indexed[1]).read_bytes()[:-8])
    with pytest.raises(ValueError, match="truncated"):
        ArrayRecordDataSource(str(cut))
    with pytest.raises(ValueError, match="takes none"):
        ArrayRecordDataSource(indexed[1], reader_options="readahead_buffer_size:0")


def test_an_index_beside_its_shards_moves_with_them(tmp_path: Path) -> None:
    make_set(tmp_path / "a")
    write_index(sorted(str(p) for p in (tmp_path / "a").glob("*.array_record")),
                str(tmp_path / "a" / "train.chute-index"))  # fmt: skip
    shutil.move(str(tmp_path / "a"), str(tmp_path / "b"))
    assert ArrayRecordDataSource(str(tmp_path / "b" / "train.chute-index"))[5].startswith(b"r")


def test_chute_index_writes_the_index_next_to_the_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_set(tmp_path)
    assert main(["index", str(tmp_path / "train-*.array_record")]) == 0
    assert (tmp_path / "train.chute-index").exists()
    assert len(ArrayRecordDataSource(str(tmp_path / "train.chute-index"))) == 1500
    assert main(["index", str(tmp_path / "train@5"), "--output", str(tmp_path / "x.idx")]) == 2
    assert "must end in .chute-index" in capsys.readouterr().err
    assert main(["index", str(tmp_path / "none-*.array_record")]) == 2


def test_chute_convert_writes_the_index(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"i": {i}}}\n' for i in range(50)))
    assert main(["convert", str(rows), str(tmp_path / "out" / "data"), "--num-shards", "2",
                 "--no-progress"]) == 0  # fmt: skip
    src = ArrayRecordDataSource(str(tmp_path / "out" / "data.chute-index"))
    assert len(src) == 50
    assert chute.ArrayRecordDataSource(str(tmp_path / "out" / "data@2"))[7] == src[7]


def test_shards_of_uneven_chunks_are_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._sources.array_record import index as array_record_index

    files = make_set(tmp_path, options="group_size:7")
    monkeypatch.setattr(array_record_index, "uniform_group", lambda first: 0)
    index = write_index(files, str(tmp_path / "train.chute-index"))
    src, ref = ArrayRecordDataSource(index), ArrayRecordDataSource(files)
    assert src._index.shards[0].group == 0
    idx = np.random.default_rng(1).integers(0, len(src), 300)
    assert src.__getitems__(idx) == ref.__getitems__(idx)


def test_uniform_group_tells_equal_chunks() -> None:
    from chute._sources.array_record.footer import uniform_group

    assert uniform_group(np.array([0, 1, 2, 3])) == 1
    assert uniform_group(np.array([0, 7, 14, 17])) == 7
    assert uniform_group(np.array([0, 7, 9, 17])) == 0
    assert uniform_group(np.array([0])) == 0


def test_a_checkpoint_crosses_between_files_and_index(indexed: tuple[list[str], str]) -> None:
    files, index = indexed

    def pipeline(paths: Any) -> Any:
        return MapDataset.source(ArrayRecordDataSource(paths)).seed(0).shuffle().to_iter_dataset()

    it = iter(pipeline(files))
    head = [next(it) for _ in range(37)]
    resumed = iter(pipeline(index))
    resumed.set_state(it.get_state())
    assert head + list(resumed) == list(pipeline(files))


def test_closing_or_dropping_a_source_stops_its_threads(tmp_path: Path) -> None:
    import gc
    import threading

    from fsspec.implementations.memory import MemoryFileSystem

    fs, bucket = MemoryFileSystem(), f"s3://threads-{tmp_path.name}"
    for f in make_set(tmp_path, shards=4, records=50):
        fs.pipe(f"{bucket[5:]}/{Path(f).name}", Path(f).read_bytes())

    def ours() -> set[threading.Thread]:  # not the process's one I/O loop and its executor
        return {t for t in threading.enumerate() if not t.name.startswith(("chute-io", "asyncio_"))}

    before = ours()
    for _ in range(3):
        source = ArrayRecordDataSource(f"{bucket}/train-*", filesystem=fs)
        assert len(source.__getitems__([0, 50, 100, 150])) == 4  # 4 shards, read at once
        assert any(t.name.startswith("chute-shards") for t in threading.enumerate())
        source.close()
        assert ours() <= before
    assert source[60] == source.__getitems__([0, 60])[1]  # reads again after close()
    del source
    gc.collect()
    for thread in ours() - before:  # told to stop: they end
        thread.join(timeout=30)
    assert ours() <= before


def test_reading_shards_of_large_chunks_in_order_fetches_each_chunk_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    data = [rng.bytes(1000) for _ in range(4000)]  # chunks of 1 MB, above the old 512 KiB
    files = write_array_record(data, str(tmp_path / "big"), num_shards=2,
                               options="group_size:1000,uncompressed")  # fmt: skip
    index = write_index(files, str(tmp_path / "big.chute-index"))
    asked: list[tuple[int, int]] = []

    class Counting:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def size(self) -> int:
            return int(self._inner.size())

        def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
            asked.extend(ranges)
            return list(self._inner.read_ranges(ranges))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    opened = indexed_array_record.open_ranged
    monkeypatch.setattr(indexed_array_record, "open_ranged", lambda *a: Counting(opened(*a)))
    source, expected = ArrayRecordDataSource(index), list(ArrayRecordDataSource(files))
    for begin in range(0, 4000, 10):  # in order, 10 records a read
        assert source.__getitems__(range(begin, begin + 10)) == expected[begin : begin + 10]
    assert len(asked) == 4  # one request per chunk: 2 shards of 2 chunks
    assert sum(length for _, length in asked) < sum(os.path.getsize(f) for f in files)
