"""TFRecord files in pure Python: ``TFRecordIterDataset``, ``read_tfrecord``, ``write_tfrecord``.

A TFRecord file is a run of records, each framed as::

    uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)

all little-endian.  Reading needs neither TensorFlow nor any other package:
CRC32C runs in a C package when one is installed (``google-crc32c`` or
``crc32c``) and otherwise in numpy (``chute._sources._crc32c``).

**Where files can live.**  Paths are local paths or URLs of objects in a bucket
(``s3://``, ``gs://``, ``az://``, ``https://``), read through chute's object-store
transport (``chute._remote``) as ArrayRecord files in a bucket are: credentials and
endpoints come from the usual environment variables (``AWS_*`` with
``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``, ``STORAGE_EMULATOR_HOST``,
``AZURE_*``), or from ``filesystem=`` (an obstore store or an fsspec filesystem,
with URLs or paths inside it).  Local and remote files are read alike, through a
ranged byte source: local files in chunks of a mebibyte, opened again for each
chunk, so an iterator never holds a file open; objects in chunks of 8 MiB, one
ranged GET each, retried with backoff on transient failures.  With ``cache_dir=``,
objects are read from whole local copies once downloaded (``chute._sources.cached_files``).

**Errors.**  A damaged file raises ``ValueError`` naming the file and the byte
offset of the bad record; the iterator stays there, so it never skips data.  A
file or object that changes while it is read raises ``SourceChangedError`` ("changed
since it was opened"; for a local file a ``FileChangedError``, also a ``ValueError``); a
missing object raises ``FileNotFoundError`` naming its URL when the iterator
reaches it.  Checkpoints are positions (file index, byte offset), so one taken
on local files restores on the same files in a bucket.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.errors import (
    CheckpointError,
    FileChangedError,
    Origin,
    SourceChangedError,
    mark_origin,
)
from chute._core.fingerprint import files_identity
from chute._core.state_check import count, fields
from chute._core.validate import check_int
from chute._remote.ranged_source import LocalRanges
from chute._remote.shard_cache import CopySource, ShardCache, open_through
from chute._remote.urls import is_remote_url
from chute._sources._crc32c import masked_crc32c
from chute._sources.cached_files import cache_option, whole_copy

__all__ = ["TFRecordIterDataset", "read_tfrecord", "write_tfrecord"]

_NAME = "TFRecordIterDataset"
_HEADER = struct.Struct("<QI")  # length, masked CRC of the length's 8 bytes
_FOOTER = struct.Struct("<I")  # masked CRC of the data
_FRAME = _HEADER.size + _FOOTER.size
_CHUNK_BYTES = 1 << 20  # read from a local file at once
_REMOTE_CHUNK_BYTES = 8 << 20  # one ranged GET of an object in a bucket
E = TypeVar("E", bound=ValueError)


def _check_paths(path: Any, what: str) -> tuple[str, ...]:
    """One path or a sequence of paths, as strings (``_check_files`` checks they exist)."""
    paths = [path] if isinstance(path, (str, bytes, os.PathLike)) else path
    if not isinstance(paths, Sequence):
        raise TypeError(f"{what}: path must be a path or a sequence of paths (got {path!r}).")
    if not paths:
        raise ValueError(f"{what}: the list of paths is empty; give at least one file.")
    out = []
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"{what}: each path must be a str or os.PathLike (got {p!r}).")
        out.append(os.fspath(p))
    return tuple(out)


def _check_files(paths: tuple[str, ...], what: str, filesystem: Any = None) -> tuple[str, ...]:
    """Raises ``FileNotFoundError`` (Grain's words first) unless every local path is a file.

    Objects in a bucket (and paths in ``filesystem``) are found, or not, when opened.
    """
    if filesystem is not None:
        return paths
    for p in paths:
        if not is_remote_url(p) and not os.path.isfile(p):
            raise FileNotFoundError(
                f"[Errno 2] No such file or directory: {p!r}. chute: {what}: no such TFRecord "
                f"file: {p!r}."
            )
    return paths


def _size_now(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


class _FileReader:
    """The records of one file from byte ``offset`` on, read a chunk at a time.

    With ``cache``, an object is read from the cache's whole copy (a ``CopySource``, held
    until ``close()``) where it holds the bucket's version, else from the bucket until
    the copy is whole.
    """

    def __init__(
        self,
        path: str,
        offset: int,
        verify: bool,
        filesystem: Any = None,
        cache: ShardCache | None = None,
    ) -> None:
        self.path, self.offset, self._verify = path, offset, verify
        self._buf, self._start = b"", offset  # a chunk of the file and its offset
        self._cache = cache
        self._source = open_through(cache, path, filesystem=filesystem)
        self._local = isinstance(self._source, LocalRanges)
        self._size = self._source.size()  # the file as opened: it must not change
        self._version = self._source.version
        if self._local:
            self._source.close()  # opened again for each chunk: never held open

    def _window(self, size: int) -> tuple[bytes, int]:
        """The buffer, holding ``size`` bytes from ``offset`` if the file has them."""
        i = self.offset - self._start
        if i + size > len(self._buf):
            remote = not (self._local or isinstance(self._source, CopySource))
            chunk = _REMOTE_CHUNK_BYTES if remote else _CHUNK_BYTES
            self._buf = self._fetch(min(max(size, chunk), self._size - self.offset))
            self._start, i = self.offset, 0
        return self._buf, i

    def _fetch(self, length: int) -> bytes:
        """``length`` bytes from ``offset`` (none past the end), from the file as opened."""
        if length <= 0:
            return b""
        if self._cache is not None and not (self._local or isinstance(self._source, CopySource)):
            copy = whole_copy(self._cache, self.path, self._version)
            if copy is not None:  # the copy of the version read so far is whole now
                self._source.close()
                self._source = copy
        try:
            if self._local and self._source.version != self._version:
                raise self._changed()
            return self._source.read_ranges([(self.offset, length)])[0]
        except FileChangedError:
            raise
        except SourceChangedError as exc:
            if self._local:
                raise self._changed() from exc
            mark_origin(exc, Origin(file=self.path, offset=self.offset))
            raise
        finally:
            if self._local:
                self._source.close()

    def close(self) -> None:
        self._source.close()

    def _changed(self) -> FileChangedError:
        now = _size_now(self.path)
        how = f"{self._size} bytes then, {now} now" if now != self._size else "written to since"
        return self._error(
            FileChangedError,
            f"TFRecord file {self.path!r} changed since it was opened ({how}), so the record "
            f"at byte offset {self.offset} cannot be read as it was. If it was replaced on "
            "purpose, iterate it again.",
        )

    def _corrupt(self, problem: str) -> ValueError:
        return self._error(
            ValueError,
            f"corrupt TFRecord file {self.path!r}: {problem} in the record at byte offset "
            f"{self.offset}. The file is damaged or is not a TFRecord file (compressed "
            "TFRecord files are not supported).",
        )

    def _error(self, kind: type[E], message: str) -> E:
        """An error that names this file and the offset being read, for notes and programs."""
        error = kind(message)
        mark_origin(error, Origin(file=self.path, offset=self.offset))
        return error

    def read(self) -> bytes | None:
        """The next record, or ``None`` at the end of the file."""
        buf, i = self._window(_HEADER.size)
        if len(buf) - i < _HEADER.size:  # reads stop at the end of the file as opened
            if len(buf) == i:
                return None
            raise self._corrupt(f"truncated header ({len(buf) - i} of {_HEADER.size} bytes)")
        length, length_crc = _HEADER.unpack_from(buf, i)
        if masked_crc32c(buf[i : i + 8]) != length_crc:
            raise self._corrupt("bad length checksum")
        buf, i = self._window(length + _FRAME)
        if len(buf) - i < length + _FRAME:  # the file is as opened: _fetch checks
            got = len(buf) - i - _HEADER.size
            raise self._corrupt(f"truncated record ({got} of {length + 4} data+checksum bytes)")
        start = i + _HEADER.size
        data = buf[start : start + length]
        if self._verify and masked_crc32c(data) != _FOOTER.unpack_from(buf, start + length)[0]:
            raise self._corrupt("bad data checksum")
        self.offset += length + _FRAME
        return data


def read_tfrecord(
    path: str | os.PathLike[str], *, verify_checksums: bool = True, filesystem: Any = None
) -> Iterator[bytes]:
    """Yields the records of one TFRecord file, as bytes.

    Args:
        path: The file: a local path or a URL (``s3://``, ``gs://``, ``az://``,
            ``https://``; see the module docstring).
        verify_checksums: Check each record's data CRC (lengths are always checked).
        filesystem: An obstore store or fsspec filesystem to read ``path`` through.

    Raises:
        FileNotFoundError: The file does not exist.
        ValueError: The file is damaged; the message names the file and byte offset.
        SourceChangedError: The file or object changed while it was read (a local
            file's is a ``FileChangedError``, also a ``ValueError``).
    """
    what = "read_tfrecord"
    paths = _check_files(_check_paths(path, what), what, filesystem)
    reader = _FileReader(paths[0], 0, bool(verify_checksums), filesystem)
    try:
        while (record := reader.read()) is not None:
            yield record
    finally:
        reader.close()


def write_tfrecord(records: Iterable[Any], path: str | os.PathLike[str]) -> int:
    """Writes bytes-like records to a new TFRecord file; returns how many it wrote.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data.tfrecord")
    >>> write_tfrecord([b"a", b"", b"xyz"], path)
    3
    >>> list(read_tfrecord(path))
    [b'a', b'', b'xyz']
    """
    count = 0
    with open(path, "wb") as f:
        for record in records:
            try:
                data = memoryview(record).cast("B")
            except TypeError:
                raise TypeError(
                    f"write_tfrecord: record {count} must be bytes-like (got {record!r:.60} "
                    f"that is a {type(record).__name__}); encode str with .encode()."
                ) from None
            length = struct.pack("<Q", data.nbytes)
            f.write(length + _FOOTER.pack(masked_crc32c(length)))
            f.write(data)
            f.write(_FOOTER.pack(masked_crc32c(data)))
            count += 1
    return count


class TFRecordIterDataset(IterDataset[bytes]):
    """The raw records of TFRecord files, as bytes, one file after another.

    Args:
        path: A path or a sequence of paths to uncompressed TFRecord files: local
            paths, or URLs of objects in a bucket (``s3://``, ``gs://``, ``az://``,
            ``https://``), with credentials from the environment (see the module
            docstring).
        verify_checksums: Check each record's data CRC (lengths are always
            checked).  chute's addition; ``False`` reads faster.
        filesystem: chute's addition: an obstore store or an fsspec filesystem to
            read every path through (URLs, or paths inside it).
        cache_dir: chute's addition: a directory for whole local copies of the objects
            in a bucket, shared by every process of the host that names it
            (``chute._remote.shard_cache``).  A file's first read starts its download
            in the background and goes on from the bucket; once the copy is whole,
            the iterator reads the local file (from its next chunk on).  Copies are of
            the bucket's version (one HEAD each time a file opens), never an older
            one; an iterator holds the copy of the file it reads until it moves on or
            closes.  Local files are read where they are.  ``None``: no copies.
        cache_limit: The most bytes of copies in ``cache_dir`` (an int, or a string
            like ``"20GB"``); the least recently used copies no reader holds are
            evicted.  ``None``: as much as the disk holds.

    Raises:
        FileNotFoundError: A local file does not exist (checked by ``iter()``, as in
            Grain); an object in a bucket does not exist (when the iterator reaches it).
        ValueError: ``cache_limit`` without ``cache_dir``.  When read: a damaged
            record, named by file and byte offset; an object larger than
            ``cache_limit``, when the iterator reaches it.
        SourceChangedError: When read: a file or object changed (a local file's is a
            ``FileChangedError``, also a ``ValueError``).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data.tfrecord")
    >>> _ = write_tfrecord([b"first", b"second"], path)
    >>> list(TFRecordIterDataset([path, path]).map(len))
    [5, 6, 5, 6]
    """

    def __init__(
        self,
        path: Any,
        *,
        verify_checksums: bool = True,
        filesystem: Any = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
    ) -> None:
        super().__init__()
        self._paths = _check_paths(path, _NAME)
        self._verify = bool(verify_checksums)
        self._filesystem = filesystem
        remote = filesystem is not None or any(is_remote_url(p) for p in self._paths)
        self._cache = cache_option(_NAME, cache_dir, cache_limit, remote=remote)

    def __iter__(self) -> DatasetIterator[bytes]:
        return _TFRecordIterator(self._paths, self._verify, self._filesystem, self._cache)

    def _data_identity(self) -> str:
        """The files read, by name, for checkpoints."""
        return files_identity([(os.path.basename(p),) for p in self._paths])

    def _describe(self) -> str:
        paths = repr(self._paths[0]) + (
            f", ... ({len(self._paths)} files)" if len(self._paths) > 1 else ""
        )
        filesystem = (
            "" if self._filesystem is None else f", filesystem=<{type(self._filesystem).__name__}>"
        )
        cache = "" if self._cache is None else f", cache_dir={self._cache.directory!r}"
        return f"paths={paths}, verify_checksums={self._verify}{filesystem}{cache}"


class _TFRecordIterator(DatasetIterator[bytes]):
    _stage = "tfrecord"
    _state_fields = fields(file_index=count(), offset=count())

    def __init__(
        self, paths: tuple[str, ...], verify: bool, filesystem: Any, cache: ShardCache | None
    ) -> None:
        super().__init__()
        self._paths, self._verify = _check_files(paths, _NAME, filesystem), verify
        self._filesystem, self._cache = filesystem, cache
        self._last_offset: int | None = None  # where the record returned last starts
        self._reader: _FileReader | None = None
        self._seek(0, 0)

    def _seek(self, file_index: int, offset: int) -> None:
        """Moves to ``offset`` in file ``file_index``; stays put if that file fails to open."""
        reader = None
        if file_index < len(self._paths):
            path = self._paths[file_index]
            reader = _FileReader(path, offset, self._verify, self._filesystem, self._cache)
        if self._reader is not None:
            self._reader.close()
        self._file, self._last_offset, self._reader = file_index, None, reader

    def __next__(self) -> bytes:
        if self._closed:
            self._raise_closed()
        while self._reader is not None:
            self._last_offset = self._reader.offset
            record = self._reader.read()
            if record is not None:
                return record
            self._seek(self._file + 1, 0)
        raise StopIteration

    def _last_origin(self) -> Origin | None:
        """The file and byte offset of the record returned last (for error notes)."""
        if self._last_offset is None or self._reader is None:
            return None
        return Origin(file=self._reader.path, offset=self._last_offset)

    def get_state(self) -> dict[str, Any]:
        offset = 0 if self._reader is None else self._reader.offset
        return self._state(file_index=self._file, offset=offset)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "file_index", "offset")
        file_index = check_int(state["file_index"], f"{_NAME}.set_state: file_index", minimum=0)
        self._seek(file_index, check_int(state["offset"], f"{_NAME}.set_state: offset", minimum=0))

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        file_index = state["file_index"]
        if file_index > len(self._paths):
            raise CheckpointError(
                f"{_NAME}.set_state: file_index {file_index} is past the {len(self._paths)} "
                f"files of this dataset, at {where}; the state comes from a different list of "
                "files."
            )

    def close(self) -> None:
        """Closes the file being read (letting go of its cached copy, if any)."""
        if self._reader is not None and not self._closed:
            self._reader.close()
        super().close()
