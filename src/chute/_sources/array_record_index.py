"""The data-set index: every shard's chunk offsets in one memory-mapped file.

Opening a set of 10,000 ArrayRecord shards should not read 10,000 footers
nor hold 10,000 chunk indices in memory.  ``write_index(files, path)`` reads
each shard's footer once and writes ``path`` (by convention
``<prefix>.chute-index`` beside the shards):

* 8 bytes of magic (``CHUTEIX1``), the length of a JSON header, the header:
  for every shard its file (relative to the index's folder when it lies
  below it), size, modification time, writer options, and where its arrays
  start;
* then two ``int64`` arrays, 64-byte aligned: for each shard, its chunks'
  file offsets followed by the footer's (``chunks + 1`` entries), and its
  chunks' first record numbers followed by its record count.

``read_index(path)`` parses the header only: ``len()`` comes from it, and a
read fetches just the entries of the chunks it needs (``pread``), so memory
stays bounded however large the set is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute._sources.array_record_footer import Footer, uniform_group
from chute._sources.ranged_array_record import RangedArrayRecordReader
from chute._sources.ranged_source import LocalRanges

__all__ = ["SUFFIX", "DatasetIndex", "IndexedShard", "is_index", "read_index", "write_index"]

SUFFIX = ".chute-index"
_MAGIC = b"CHUTEIX1"
_ALIGN = 64
_VERSION = 1


class _File:
    """The index file, opened once per process, read with ``pread``."""

    def __init__(self, path: str) -> None:
        self.path, self._fd, self._pid = path, -1, -1

    def int64(self, offset: int, count: int) -> np.ndarray:
        if self._pid != os.getpid():  # a forked child opens its own descriptor
            self._fd, self._pid = os.open(self.path, os.O_RDONLY), os.getpid()
        data = os.pread(self._fd, 8 * count, offset)
        if len(data) != 8 * count:
            raise ValueError(f"ArrayRecordDataSource: {self.path!r} is truncated.")
        return np.frombuffer(data, "<i8")

    def __del__(self) -> None:
        if self._fd >= 0 and self._pid == os.getpid():
            os.close(self._fd)


class _Column:
    """Entries ``[at, at + n)`` of one of the index's arrays, each read when asked for.

    Only what a read needs is fetched: memory-mapping the arrays instead
    would bring in 64 KiB around every entry touched (the kernel's fault-around).
    """

    def __init__(self, file: _File, offset: int, n: int) -> None:
        self._file, self._offset, self._n = file, offset, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        i = i + self._n if i < 0 else i
        if not 0 <= i < self._n:
            raise IndexError(i)
        return int(self._file.int64(self._offset + 8 * i, 1)[0])


@dataclass(frozen=True)
class IndexedShard:
    """One shard as the index saw it."""

    path: str
    size: int
    mtime_ns: int
    records: int
    options: str
    at: int  # where its entries start in both arrays
    chunks: int
    group: int  # records in every chunk but the last, if that is so; else 0


@dataclass(frozen=True)
class DatasetIndex:
    """A read index: the shards, and where the two arrays lie in the file."""

    path: str
    shards: tuple[IndexedShard, ...]
    file: _File
    starts_at: int  # file offsets of the two arrays
    first_at: int

    def footer(self, k: int) -> Footer:
        """Shard ``k``'s chunk index.  Where its chunks are all the same size (as
        ``group_size`` writes them), its entries are read one by one as reads need
        them; otherwise its record numbers are read now, for the search."""
        shard = self.shards[k]
        n = shard.chunks + 1
        starts_at = self.starts_at + 8 * shard.at
        if shard.group:
            first: Any = _Column(self.file, self.first_at + 8 * shard.at, n)
            return Footer(_Column(self.file, starts_at, n), first, shard.options, shard.group)  # type: ignore[arg-type]
        starts = self.file.int64(starts_at, n)
        return Footer(starts, self.file.int64(self.first_at + 8 * shard.at, n), shard.options)


def is_index(paths: Any) -> bool:
    """Whether ``paths`` names an index file (a str or path ending in ``.chute-index``)."""
    return isinstance(paths, (str, os.PathLike)) and os.fspath(paths).endswith(SUFFIX)


def write_index(files: Sequence[str], path: str) -> str:
    """Writes the index of ``files`` (ArrayRecord shards, in order) to ``path``; returns it.

    Each footer is read with chute's own reader; the file is written under a
    temporary name and renamed, so an index is never seen half-written.
    """
    if not files:
        raise ValueError(f"write_index: no files to index for {path!r}.")
    folder = os.path.dirname(os.path.abspath(path))
    shards, starts, firsts, at = [], [], [], 0
    for f in files:
        source = LocalRanges(f)
        try:
            footer = RangedArrayRecordReader(source, cache_bytes=0)._footer
        finally:
            source.close()
        st = os.stat(f)
        absolute = os.path.abspath(f)
        inside = os.path.commonpath([folder, absolute]) == folder
        shards.append({
            "path": os.path.relpath(absolute, folder) if inside else absolute,
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "records": footer.num_records,
            "options": footer.writer_options, "at": at, "chunks": len(footer.starts) - 1,
            "group": uniform_group(footer.first_record),
        })  # fmt: skip
        starts.append(np.asarray(footer.starts, np.int64))
        firsts.append(np.asarray(footer.first_record, np.int64))
        at += len(footer.starts)
    header = json.dumps({"version": _VERSION, "shards": shards, "entries": at}).encode()
    head = len(_MAGIC) + 8 + len(header)
    pad = -head % _ALIGN
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as out:
        out.write(_MAGIC + len(header).to_bytes(8, "little") + header + b"\0" * pad)
        for arrays in (starts, firsts):
            for a in arrays:
                out.write(a.astype("<i8").tobytes())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return path


def read_index(path: str) -> DatasetIndex:
    """The index at ``path``, its arrays memory-mapped; errors name the file."""
    try:
        with open(path, "rb") as f:
            magic = f.read(len(_MAGIC))
            length = int.from_bytes(f.read(8), "little")
            header = f.read(length) if magic == _MAGIC else b""
    except FileNotFoundError:
        raise FileNotFoundError(f"ArrayRecordDataSource: no such index file: {path!r}.") from None
    if magic != _MAGIC or len(header) != length:
        raise ValueError(
            f"ArrayRecordDataSource: {path!r} is not a chute index (written by "
            "chute index or chute convert); make one with: chute index SHARDS --output "
            f"{path}"
        )
    meta = json.loads(header)
    if meta.get("version") != _VERSION:
        raise ValueError(
            f"ArrayRecordDataSource: {path!r} has index version {meta.get('version')}, this "
            f"chute reads version {_VERSION}; write it again with chute index."
        )
    head = len(_MAGIC) + 8 + length
    offset = head + (-head % _ALIGN)
    entries = int(meta["entries"])
    size = os.path.getsize(path)
    if size != offset + 16 * entries:
        raise ValueError(f"ArrayRecordDataSource: {path!r} is truncated ({size} bytes).")
    folder = os.path.dirname(os.path.abspath(path))
    shards = tuple(
        IndexedShard(**{**s, "path": os.path.join(folder, s["path"])}) for s in meta["shards"]
    )
    return DatasetIndex(
        os.fspath(path), shards, _File(os.fspath(path)), offset, offset + 8 * entries
    )
