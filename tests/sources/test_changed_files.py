"""A file that changes under an open source raises, naming the file and the record."""

from __future__ import annotations

import os

import pytest

from chute import ArrayRecordDataSource
from chute.experimental import write_array_record


def _written(tmp_path, n: int = 1000) -> str:  # type: ignore[no-untyped-def]
    (path,) = write_array_record([os.urandom(200) for _ in range(n)], str(tmp_path / "data"))
    return path


def test_a_truncated_array_record_file_raises_instead_of_returning_empty_records(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    path = _written(tmp_path)
    source = ArrayRecordDataSource(path)
    first = source[0]
    assert len(first) == 200
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    for read in (lambda: source[999], lambda: source.__getitems__([3, 999]), lambda: source[0]):
        with pytest.raises(ValueError, match="changed since it was opened") as info:
            read()
        assert path in str(info.value)
        assert info.value.chute_source_file == path  # type: ignore[attr-defined]


def test_a_removed_file_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _written(tmp_path, 10)
    source = ArrayRecordDataSource(path)
    source[0]
    os.remove(path)
    with pytest.raises(ValueError, match="now gone"):
        source[5]


def _replaced_after_construction(tmp_path) -> tuple[ArrayRecordDataSource, str]:  # type: ignore[no-untyped-def]
    """A source of 400 records whose file is then replaced by another of the same size."""
    (path,) = write_array_record([b"old%03d" % i for i in range(400)], str(tmp_path / "data"))
    (other,) = write_array_record([b"new%03d" % i for i in range(400)], str(tmp_path / "other"))
    source = ArrayRecordDataSource(path)
    assert os.path.getsize(path) == os.path.getsize(other)
    os.replace(other, path)
    return source, path


@pytest.mark.parametrize("where", ["inline", "mp_prefetch", "data_loader"])
def test_a_file_replaced_before_the_first_read_raises_in_workers_too(
    tmp_path,  # type: ignore[no-untyped-def]
    where: str,
) -> None:
    import chute

    source, path = _replaced_after_construction(tmp_path)
    if where == "inline":
        read = lambda: source[0]  # noqa: E731
    elif where == "mp_prefetch":
        ds = chute.MapDataset.source(source).to_iter_dataset()
        read = lambda: list(ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=2)))  # noqa: E731
    else:
        sampler = chute.SequentialSampler(len(source), chute.NoSharding())
        loader = chute.DataLoader(data_source=source, sampler=sampler, worker_count=2)
        read = lambda: list(loader)  # noqa: E731
    with pytest.raises(ValueError, match="changed since it was opened") as info:
        read()
    message = str(info.value)
    assert path in message and "replaced by another file" in message
    assert "make a new ArrayRecordDataSource" in message


def test_an_unchanged_file_reads_empty_records_as_they_are(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (path,) = write_array_record([b"", b"x", b""], str(tmp_path / "empty"))
    source = ArrayRecordDataSource(path)
    assert [source[i] for i in range(3)] == [b"", b"x", b""]
    assert source.__getitems__([2, 1, 0]) == [b"", b"x", b""]


def test_a_tfrecord_file_cut_at_a_record_boundary_raises_instead_of_ending_early(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    from chute._sources.tfrecord import write_tfrecord
    from chute.experimental import TFRecordIterDataset

    path = str(tmp_path / "data.tfrecord")
    write_tfrecord([b"x" * 100_000 for _ in range(20)], path)
    it = iter(TFRecordIterDataset(path))
    next(it)
    record_bytes = 100_000 + 16
    with open(path, "r+b") as f:
        f.truncate(record_bytes * 10)  # the first 10 records stay whole
    got = 1
    with pytest.raises(ValueError, match="changed since it was opened") as info:
        for _ in it:
            got += 1
    assert got == 10 and path in str(info.value)


def test_a_truncated_parquet_file_raises_naming_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from chute.sources import ParquetDataSource

    path = str(tmp_path / "rows.parquet")
    table = pa.table({"x": list(range(50_000)), "s": [os.urandom(8).hex() for _ in range(50_000)]})
    pq.write_table(table, path, row_group_size=5_000)
    source = ParquetDataSource(path)
    assert int(source[0]["x"]) == 0
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(OSError, match="rows.parquet"):
        source[49_999]


def test_a_tfrecord_file_rewritten_in_place_with_its_size_raises(
    tmp_path,  # type: ignore[no-untyped-def]
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    from chute._sources import tfrecord
    from chute.experimental import TFRecordIterDataset

    monkeypatch.setattr(tfrecord, "_CHUNK_BYTES", 150)  # each record takes a read of its own
    path = str(tmp_path / "data.tfrecord")
    tfrecord.write_tfrecord([b"a" * 100 for _ in range(5)], path)
    it = iter(TFRecordIterDataset(path))
    next(it)
    tfrecord.write_tfrecord([b"b" * 100 for _ in range(5)], path)
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # surely a later write
    with pytest.raises(ValueError, match=r"changed since it was opened \(written to since\)"):
        list(it)


def _read_after_change(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Opens a local file as ``kind`` reads it, changes the file, then reads it again."""
    from chute._sources.array_record.index import write_index
    from chute._sources.tfrecord import write_tfrecord
    from chute.experimental import TFRecordIterDataset

    if kind == "tfrecord":
        path = str(tmp_path / "data.tfrecord")
        write_tfrecord([b"x" * 100_000 for _ in range(20)], path)
        it = iter(TFRecordIterDataset(path))
        next(it)
        with open(path, "r+b") as f:
            f.truncate(100_000)
        list(it)
        return
    source, path = _replaced_after_construction(tmp_path)
    if kind == "array_record index":
        index = write_index([path], str(tmp_path / "data.chute-index"))
        source = ArrayRecordDataSource(index)
        source[0]
        with open(path, "ab") as f:  # written to after the index recorded it
            f.write(b"more")
        source.close()  # the next read opens the file again
    source[0]


@pytest.mark.parametrize("kind", ["array_record", "array_record index", "tfrecord"])
def test_every_source_raises_source_changed_error_for_a_changed_local_file(
    tmp_path,  # type: ignore[no-untyped-def]
    kind: str,
) -> None:
    import chute

    with pytest.raises(chute.SourceChangedError, match="changed since") as info:
        _read_after_change(kind, tmp_path)
    if kind != "array_record index":  # these raised a ValueError before: still one
        assert isinstance(info.value, ValueError)
        assert type(info.value) is chute.FileChangedError


def test_an_error_budget_never_skips_a_changed_local_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import chute
    from chute.experimental import skip_errors

    source, _ = _replaced_after_construction(tmp_path)  # as a file in a bucket: no skipping
    it = iter(skip_errors(chute.MapDataset.source(source).to_iter_dataset(), max_errors=10))
    with pytest.raises(chute.SourceChangedError, match="changed since it was opened"):
        next(it)
    assert it.skipped == []
