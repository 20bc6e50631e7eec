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
import posixpath
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute._core.fork import ForkCheck
from chute._remote.ranged_source import LocalRanges
from chute._remote.urls import is_remote_url, split_url
from chute._sources.array_record.footer import Footer, uniform_group
from chute._sources.array_record.ranged import RangedArrayRecordReader

__all__ = [
    "SUFFIX",
    "DatasetIndex",
    "IndexedShard",
    "is_index",
    "index_in_memory",
    "open_ranged",
    "read_index",
    "write_index",
]

SUFFIX = ".chute-index"
_MAGIC = b"CHUTEIX1"
_ALIGN = 64
_VERSION = 1


def open_ranged(
    path: str, known: tuple[int, str] | None = None, filesystem: Any = None, first: int = 0
) -> Any:
    """A ranged byte source for a local path (``LocalRanges``) or an object-store URL
    (opened without a request when its ``(size, version)`` is ``known``; through
    ``filesystem``, an obstore store or fsspec filesystem, when one is given; taking its
    ``first`` bytes with the request that opens it, see ``open_source``)."""
    if not is_remote_url(path):
        _, _, local = split_url(path)  # raises for a URL of a scheme chute does not read
        return LocalRanges(local)
    from chute._remote import open_source  # the object stores need chute[remote]

    source = open_source(path, known=known, filesystem=filesystem, first=first)
    # The ArrayRecord reader merges neighbouring chunks itself (64 KiB apart at most);
    # merging far-apart records of a shuffled batch would fetch the bytes between them.
    if hasattr(source, "coalesce"):
        source.coalesce = 64 << 10
    return source


class _File:
    """The index file, opened once per process and read by ranges."""

    def __init__(self, path: str, filesystem: Any = None) -> None:
        self.path, self.remote, self.filesystem = path, is_remote_url(path), filesystem
        self._source: Any = None
        self._opened_in: ForkCheck | None = None
        self._known: tuple[int, str] | None = None  # its size and version, once closed

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "filesystem": self.filesystem}  # opened again where it goes

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["filesystem"])  # type: ignore[misc]

    def int64(self, offset: int, count: int) -> np.ndarray:
        return np.frombuffer(self.read([(offset, 8 * count)])[0], "<i8")

    def _opened(self) -> Any:
        if self._opened_in is None or self._opened_in.forked():  # a forked child opens its own
            # Its header is read first: with obstore, in the request that opens it; opened
            # again after close(), it is the version read before.
            first = 0 if self._known else _FIRST_READ
            self._source = open_ranged(self.path, self._known, self.filesystem, first)
            self._opened_in = ForkCheck()
        return self._source

    def close(self) -> None:
        """Closes the file opened in this process; a later read opens it again."""
        source, opened_in = self._source, self._opened_in
        if source is None or opened_in is None or opened_in.forked():
            return
        version = getattr(source, "version", None)
        if self.remote and version:
            self._known = (int(source.size()), str(version))
        self._source, self._opened_in = None, None
        source.close()

    def size(self) -> int:
        return int(self._opened().size())

    def retries(self) -> int:
        """Requests for the index file this process retried."""
        opened_here = self._opened_in is not None and not self._opened_in.forked()
        return int(getattr(self._source, "retries", 0)) if opened_here else 0

    def read(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        self._opened()
        try:
            return list(self._source.read_ranges(ranges))
        except ValueError as exc:  # a range past the end
            raise ValueError(f"ArrayRecordDataSource: {self.path!r} is truncated: {exc}") from exc


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

    def pairs(self, positions: list[int]) -> tuple[list[int], list[int]]:
        """Entries ``i`` and ``i + 1`` for each ``i`` in ``positions``, in one read call."""
        if positions and not 0 <= min(positions) <= max(positions) < self._n - 1:
            raise IndexError(f"positions outside 0..{self._n - 2}")
        got = self._file.read([(self._offset + 8 * i, 16) for i in positions])
        both = np.frombuffer(b"".join(got), "<i8")
        return both[0::2].tolist(), both[1::2].tolist()


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
    # An object's ETag or generation, for shards in a bucket; None where the store reports
    # none (fsspec's memory filesystem), "" for local files (their mtime_ns is recorded).
    version: str | None = ""


@dataclass(frozen=True)
class DatasetIndex:
    """A read index: the shards, and where the two arrays lie in the file."""

    path: str
    shards: tuple[IndexedShard, ...]
    file: _File | None  # None: built in memory (``footers`` holds every shard's)
    starts_at: int  # file offsets of the two arrays
    first_at: int
    footers: tuple[Footer, ...] = ()

    def retries(self) -> int:
        """Requests for the index file this process retried (0 for an index in memory)."""
        return self.file.retries() if self.file is not None else 0

    def close(self) -> None:
        """Closes the index file, if open; a later read opens it again."""
        if self.file is not None:
            self.file.close()

    def footer(self, k: int) -> Footer:
        """Shard ``k``'s chunk index.  Where its chunks are all the same size (as
        ``group_size`` writes them), its entries are read one by one as reads need
        them; otherwise its record numbers are read now, for the search."""
        if self.file is None:
            return self.footers[k]
        shard = self.shards[k]
        n = shard.chunks + 1
        starts_at, first_at = self.starts_at + 8 * shard.at, self.first_at + 8 * shard.at
        if shard.group and not self.file.remote:
            first: Any = _Column(self.file, first_at, n)
            return Footer(_Column(self.file, starts_at, n), first, shard.options, shard.group)  # type: ignore[arg-type]
        return self.read_footers([k])[0]  # in a bucket, both arrays at once beat one per entry

    def read_footers(self, ks: list[int]) -> list[Footer]:
        """The chunk indexes of shards ``ks`` of an index in a bucket, read in one call
        (every shard's two arrays requested at once)."""
        if self.file is None:
            return [self.footers[k] for k in ks]
        ranges = []
        for k in ks:
            shard, n = self.shards[k], self.shards[k].chunks + 1
            ranges += [
                (self.starts_at + 8 * shard.at, 8 * n),
                (self.first_at + 8 * shard.at, 8 * n),
            ]
        got = self.file.read(ranges)
        return [
            Footer(np.frombuffer(got[2 * j], "<i8"), np.frombuffer(got[2 * j + 1], "<i8"),
                   self.shards[k].options, self.shards[k].group)
            for j, k in enumerate(ks)
        ]  # fmt: skip


def is_index(paths: Any) -> bool:
    """Whether ``paths`` names an index file (a str or path ending in ``.chute-index``)."""
    return isinstance(paths, (str, os.PathLike)) and os.fspath(paths).endswith(SUFFIX)


def write_index(files: Sequence[str], path: str, *, filesystem: Any = None) -> str:
    """Writes the index of ``files`` (ArrayRecord shards, in order) to ``path``; returns it.

    Each footer is read with chute's own reader; the file is written under a
    temporary name and renamed, so an index is never seen half-written.  With
    ``filesystem`` (an obstore store or fsspec filesystem), URLs are read and the
    index is written through it.
    """
    if not files:
        raise ValueError(f"write_index: no files to index for {path!r}.")
    shards, footers = _footers(files, filesystem)
    starts = [np.asarray(f.starts, np.int64) for f in footers]
    firsts = [np.asarray(f.first_record, np.int64) for f in footers]
    at = sum(len(f.starts) for f in footers)
    for shard in shards:
        shard["path"] = _relative(shard["path"], path)
    header = json.dumps({"version": _VERSION, "shards": shards, "entries": at}).encode()
    head = len(_MAGIC) + 8 + len(header)
    pad = -head % _ALIGN
    parts = [_MAGIC + len(header).to_bytes(8, "little") + header + b"\0" * pad]
    parts += [a.astype("<i8").tobytes() for arrays in (starts, firsts) for a in arrays]
    if is_remote_url(path):
        from chute._remote import write_object

        write_object(path, parts, filesystem=filesystem)  # all or nothing
        return path
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as out:
        out.writelines(parts)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return path


def _footer_of(f: str, filesystem: Any = None) -> tuple[dict[str, Any], Footer]:
    source = open_ranged(f, filesystem=filesystem)
    try:
        footer = RangedArrayRecordReader(source, cache_bytes=0)._footer
        size, version = source.size(), getattr(source, "version", None)
    finally:
        source.close()
    shard = {
        "path": f, "size": size, "mtime_ns": 0 if is_remote_url(f) else os.stat(f).st_mtime_ns,
        "version": _version(version) if is_remote_url(f) else "", "records": footer.num_records,
        "options": footer.writer_options, "at": 0, "chunks": len(footer.starts) - 1,
        "group": uniform_group(footer.first_record),
    }  # fmt: skip
    return shard, footer


def _version(version: Any) -> str | None:
    """An object's version as the index records it: a str, or None (JSON null) where the
    store reports none.  Indexes written before null was used hold the string "None"."""
    return None if version is None or version == "None" else str(version)


def _footers(
    files: Sequence[str], filesystem: Any = None
) -> tuple[list[dict[str, Any]], list[Footer]]:
    """Every shard's entry and footer, read concurrently (16 at a time), in order."""
    with ThreadPoolExecutor(min(16, len(files))) as pool:
        found = list(pool.map(lambda f: _footer_of(f, filesystem), files))
    shards, footers, at = [], [], 0
    for shard, footer in found:
        shard["at"], at = at, at + len(footer.starts)
        shards.append(shard)
        footers.append(footer)
    return shards, footers


def index_in_memory(files: Sequence[str], filesystem: Any = None) -> DatasetIndex:
    """The index of ``files`` read now and held in memory (for shards without an index file)."""
    shards, footers = _footers(files, filesystem)
    return DatasetIndex("", tuple(IndexedShard(**s) for s in shards), None, 0, 0, tuple(footers))


def _relative(shard: str, index: str) -> str:
    """``shard`` as the index records it: relative to the index's folder when below it."""
    if is_remote_url(index) or is_remote_url(shard):
        folder = posixpath.dirname(index) + "/"
        return shard[len(folder) :] if shard.startswith(folder) else shard
    folder, absolute = os.path.dirname(os.path.abspath(index)), os.path.abspath(shard)
    inside = os.path.commonpath([folder, absolute]) == folder
    return os.path.relpath(absolute, folder) if inside else absolute


def _resolved(shard: str, index: str) -> str:
    if is_remote_url(shard) or os.path.isabs(shard):
        return shard
    if is_remote_url(index):
        return posixpath.join(posixpath.dirname(index), shard)
    return os.path.join(os.path.dirname(os.path.abspath(index)), shard)


_FIRST_READ = 64 << 10  # what the first request for an index takes: its header, mostly


def read_index(path: str, filesystem: Any = None) -> DatasetIndex:
    """The index at ``path`` (a local file or a URL): its header; errors name the file."""
    path = os.fspath(path)
    file = _File(path, filesystem)
    try:
        size = file.size()
        head = file.read([(0, min(size, _FIRST_READ))])[0]  # the header too, mostly
    except FileNotFoundError:
        raise FileNotFoundError(f"ArrayRecordDataSource: no such index file: {path!r}.") from None
    start = len(_MAGIC) + 8
    magic, length = head[: len(_MAGIC)], int.from_bytes(head[len(_MAGIC) : start], "little")
    if magic != _MAGIC or start + length > size:
        raise ValueError(
            f"ArrayRecordDataSource: {path!r} is not a chute index (written by "
            "chute index or chute convert); make one with: chute index SHARDS --output "
            f"{path}"
        )
    raw = head[start : start + length]
    if len(raw) < length:  # a header longer than the first read
        raw = file.read([(start, length)])[0]
    meta = json.loads(raw)
    if meta.get("version") != _VERSION:
        raise ValueError(
            f"ArrayRecordDataSource: {path!r} has index version {meta.get('version')}, this "
            f"chute reads version {_VERSION}; write it again with chute index."
        )
    head_size = start + length
    offset = head_size + (-head_size % _ALIGN)
    entries = int(meta["entries"])
    if size != offset + 16 * entries:
        raise ValueError(f"ArrayRecordDataSource: {path!r} is truncated ({size} bytes).")
    shards = tuple(
        IndexedShard(
            **{**s, "path": _resolved(s["path"], path), "version": _version(s.get("version", ""))}
        )
        for s in meta["shards"]
    )
    return DatasetIndex(path, shards, file, offset, offset + 8 * entries)
