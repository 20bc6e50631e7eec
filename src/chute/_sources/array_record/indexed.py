"""``ArrayRecordDataSource`` over a data-set index: bounded memory for huge shard sets.

``ArrayRecordDataSource("data/train.chute-index")`` opens the set that
``chute index`` (or ``chute convert``) indexed: its length comes from the
index's header, and each read maps its records to chunks through the index's
memory-mapped arrays and reads them with chute's own ranged reader
(``RangedArrayRecordReader``), at most ``MAX_OPEN`` shards open at once.
Nothing is loaded per shard up front, so opening 10,000 shards costs what
opening one does.  A local index's entries are read as reads need them; a shard
in a bucket fetches its chunk offsets with one request when first read and keeps
them while all shards' kept offsets fit in ``OFFSETS_BYTES``, and it opens
without a request (its size and ETag come from the index), so a batch that
touches more shards than ``MAX_OPEN`` costs no more requests than its chunks.  A
shard whose size or modification time (ETag in a bucket) differs from the index's
raises rather than return records from another version of it.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from chute._core.errors import Origin, SourceChangedError, mark_origin
from chute._core.fork import ForkCheck
from chute._execution.daemon_pool import DaemonPool
from chute._remote.shard_cache import ShardCache
from chute._remote.urls import is_remote_url
from chute._sources.array_record.cached import CachedShardReader
from chute._sources.array_record.chunk_cache import ChunkCache
from chute._sources.array_record.footer import Footer
from chute._sources.array_record.index import (
    SUFFIX,
    IndexedShard,
    index_in_memory,
    open_ranged,
    read_index,
)
from chute._sources.array_record.kept_offsets import KeptOffsets
from chute._sources.array_record.open_shards import OpenShards, close_reader
from chute._sources.array_record.paths import bucket_files, url_for
from chute._sources.array_record.ranged import RangedArrayRecordReader
from chute._sources.array_record.read_together import read_together
from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.cached_files import cache_option
from chute._sources.protocol import as_index, check_indices, out_of_range

__all__ = ["IndexedArrayRecordDataSource"]

_WHAT = "ArrayRecordDataSource"
MAX_OPEN = 64  # shards open at once, per process
SHARDS_AT_ONCE = 64  # shards in a bucket read at once by one batch
CACHE_BYTES = 32 << 20  # decoded chunks kept per process, over all shards (see ChunkCache)
OFFSETS_BYTES = 32 << 20  # chunk offsets of shards in a bucket kept, per process
LOOK_FOR_COPIES_S = 0.1  # how often the shards read from the bucket look for their copy
_ITER_BLOCK = 1024


def _unchanged(shard: IndexedShard, source: Any) -> bool:
    """Whether a shard is as the index saw it: size and mtime, or size and ETag in a bucket
    (size alone where the store reported no version when the index was written)."""
    if is_remote_url(shard.path):
        now = source.version
        same = not shard.version or (now is not None and str(now) == shard.version)
        return bool(source.size() == shard.size and same)
    return bool(source.version == f"{shard.mtime_ns}-{shard.size}")  # LocalRanges, as indexed


class IndexedArrayRecordDataSource(ArrayRecordDataSource):
    """The records of the shards a ``.chute-index`` file lists (see the module docstring)."""

    _public_name = _WHAT  # checkpoints cross to and from the same set read as files

    def __init__(
        self,
        paths: Any,
        reader_options: Any = None,
        *,
        filesystem: Any = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
    ) -> None:
        if reader_options is not None:
            raise ValueError(
                f"{_WHAT}: reader_options are array_record's; a source opened from an index "
                "or from a bucket reads with chute's own reader and takes none."
            )
        self._filesystem = filesystem
        if isinstance(paths, (str, os.PathLike)) and os.fspath(paths).endswith(SUFFIX):
            self._index_path = url_for(os.fspath(paths), filesystem)
            self._index = read_index(self._index_path, filesystem)
        else:  # shards in a bucket, without an index file: every footer is read now
            files = bucket_files(paths, filesystem)
            self._index_path, self._index = "", index_in_memory(files, filesystem)
        self._cache = _make_cache(self._index.shards, cache_dir, cache_limit)
        self._setup()

    def _setup(self) -> None:
        counts = [s.records for s in self._index.shards]
        self._ends = np.cumsum(counts, dtype=np.int64)
        self._len = int(self._ends[-1]) if counts else 0
        if self._len == 0:
            raise ValueError(f"{_WHAT}: the shards of {self._index_path!r} hold no records.")
        self._starts = self._ends - counts
        self._entries = [(s.path, 0, s.records, False) for s in self._index.shards]
        self._open = OpenShards(MAX_OPEN)  # the shards' readers, pinned while read
        # The chunk offsets a shard in a bucket needs, fetched with one request, kept
        # under OFFSETS_BYTES beyond its reader's closing: reopening then costs nothing.
        self._offsets = KeptOffsets(OFFSETS_BYTES)
        self._chunks = ChunkCache(CACHE_BYTES)  # every shard's decoded chunks, this process's
        self._made = ForkCheck()  # the open files, the offsets and the cache
        self._remote = any(is_remote_url(s.path) for s in self._index.shards)
        self._lock = threading.Lock()  # guards the threads
        self._threads: DaemonPool | None = None
        self._threads_made = ForkCheck()
        self._stop_threads: Any = None  # a weakref.finalize that stops them
        # With a cache: the shards read from the bucket until their copy is whole, and
        # those whose copy this process confirmed is the bucket's version.
        self._awaiting: set[int] = set()
        self._confirmed: set[int] = set()
        self._looked = 0.0
        self._looking = threading.Lock()
        if self._cache is not None:  # collected unclosed, its downloads stop too
            weakref.finalize(self, self._cache.abandon).atexit = False

    @property
    def retries(self) -> int | None:
        """Requests to the object store this process retried so far; ``None`` for local files.

        The statistics show it beside the source (``chute.experimental.execution_summary``).
        """
        if not self._remote:
            return None
        if self._made.forked():  # a forked child that has not read yet
            return 0
        return self._open.retries() + self._index.retries()

    def __getstate__(self) -> dict[str, Any]:
        state = {"index": self._index_path, "filesystem": self._filesystem, "cache": self._cache}
        # An index in a bucket travels read (its header costs a worker three round trips,
        # and the worker reads the same shards as this process); a local index file's
        # header is read again where the source arrives.
        if not self._index_path or is_remote_url(self._index_path):
            state["in_memory"] = self._index
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._index_path, self._filesystem = state["index"], state.get("filesystem")
        self._index = state.get("in_memory") or read_index(self._index_path, self._filesystem)
        self._cache = state.get("cache")
        self._setup()

    def _shard(self, k: int) -> RangedArrayRecordReader:
        """Shard ``k``'s reader, opened on first use and pinned open until ``_read`` is done
        with it; past ``MAX_OPEN``, the least recently used reader that no read holds closes."""
        if self._made.forked():  # a forked child opens its own files (the index's too)
            self._setup()
        reader = self._open.pin(k)
        if reader is not None:
            return reader
        shard = self._index.shards[k]
        known = (shard.size, shard.version) if is_remote_url(shard.path) and shard.version else None
        cached = self._cached_reader(k) if known is not None and self._cache else None
        if cached is not None:
            return self._open.add(k, cached)
        try:
            source = open_ranged(shard.path, known, self._filesystem)
            size = source.size()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{_WHAT}: {shard.path!r}, listed in {self._index_path!r}, does not exist."
            ) from None
        if not _unchanged(shard, source):
            source.close()
            raise SourceChangedError(
                f"{_WHAT}: {shard.path!r} changed since {self._index_path!r} was written "
                f"({shard.size} bytes then, {size} now); write the index again with "
                f"chute index, or restore the shard."
            )
        if known is not None and self._cache is not None:  # read from the bucket meanwhile,
            opener = functools.partial(open_ranged, shard.path, known, self._filesystem)
            self._cache.fetch_later(shard.path, shard.version, shard.size, opener)
            self._awaiting.add(k)
            source = self._cache.landing(shard.path, shard.version, source)  # and the download
        reader = RangedArrayRecordReader(
            source, footer=self._footer(k), cache=self._chunks, cache_key=k
        )
        return self._open.add(k, reader)  # another thread's, where it opened k meanwhile

    # -- the cache -------------------------------------------------------------------

    def _cached_reader(self, k: int) -> CachedShardReader | None:
        """Shard ``k``'s reader over its whole local copy, or None where there is none."""
        shard, cache = self._index.shards[k], self._cache
        assert cache is not None
        copy = cache.open_copy(shard.path, shard.version)
        if copy is None:
            return None
        try:
            if k not in self._confirmed:
                self._confirm([k])
            return CachedShardReader(copy, shard.path)
        except BaseException:
            copy.close()
            raise

    def _start_downloads(self) -> None:
        """Starts, in this process, the download of every shard not yet in the cache, where
        the whole set fits in its limit: the training process gets them going while its
        worker processes start, and the workers read what lands (none is fetched twice).
        A set larger than the cache is left to the reads, which download what they need."""
        cache, shards = self._cache, self._index.shards
        if cache is None or not all(is_remote_url(s.path) and s.version for s in shards):
            return
        if sum(s.size for s in shards) > cache.limit:
            return
        for shard in shards:
            version = shard.version
            if version and not cache.has(shard.path, version):
                known = (shard.size, version)
                opener = functools.partial(open_ranged, shard.path, known, self._filesystem)
                cache.fetch_later(shard.path, version, shard.size, opener)

    def _confirm(self, ks: list[int]) -> None:
        """Checks with the bucket, once per process, that shards ``ks`` are still the
        versions the index names (their copies are those versions): one request each, all
        at once; none for a version another process of the host confirmed lately."""
        shards, cache = self._index.shards, self._cache
        assert cache is not None
        ks = [k for k in ks if k not in self._confirmed]
        lately = [k for k in ks if cache.confirmed_lately(shards[k].path, shards[k].version)]
        self._confirmed.update(lately)
        ks = [k for k in ks if k not in self._confirmed]
        if ks:
            heads = [self._pool().submit(open_ranged, shards[k].path, None, self._filesystem)
                     for k in ks]  # fmt: skip
            for k, head in zip(ks, heads):
                source = head.result()
                source.close()
                if not _unchanged(shards[k], source):
                    raise SourceChangedError(
                        f"{_WHAT}: {shards[k].path!r} changed since {self._index_path or 'it'!r}"
                        f" was indexed (version {shards[k].version} then, {source.version} "
                        "now); its cached copy is of the old version and is not read. Write "
                        "the index again with chute index, or restore the shard."
                    )
                cache.mark_confirmed(shards[k].path, shards[k].version)
        self._confirmed.update(ks)

    def _look_for_copies(self) -> None:
        """Moves the shards read from the bucket whose copy is now whole (this process's
        download or another's) onto their copies; one thread looks at a time."""
        now = time.monotonic()
        if now - self._looked < LOOK_FOR_COPIES_S or not self._looking.acquire(blocking=False):
            return
        try:
            self._looked = now
            cache, shards = self._cache, self._index.shards
            assert cache is not None
            ready = [
                k for k in list(self._awaiting) if cache.has(shards[k].path, shards[k].version)
            ]
            self._confirm(ready)  # a download just made marks its version as seen
            for k in ready:
                reader = self._cached_reader(k)  # None where it was evicted meanwhile
                if reader is not None:
                    self._open.replace(k, reader)  # the bucket reader closes once unread
                    self._awaiting.discard(k)
        finally:
            self._looking.release()

    def _footer(self, k: int) -> Footer:
        """Shard ``k``'s chunk offsets: lazy for a local index, kept for one in a bucket."""
        kept = self._offsets.get(k)
        if kept is not None:
            return kept
        return self._offsets.keep([k], [self._index.footer(k)])[0]

    def __len__(self) -> int:
        return self._len

    @property
    def shards(self) -> tuple[IndexedShard, ...]:
        """Each shard's path (or URL), size and record count, in read order."""
        return self._index.shards

    def __getitem__(self, index: int) -> bytes:
        i = index if type(index) is int else as_index(index, _WHAT)
        if not 0 <= i < self._len:
            raise out_of_range(i, self._len, _WHAT, negative=False)
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at ``indices``, in that order (repeats allowed): one read per shard."""
        idx = check_indices(indices, self._len, _WHAT, negative=False)
        if self._awaiting and not self._made.forked():
            self._look_for_copies()
        shards = np.searchsorted(self._ends, idx, side="right")
        local = idx - self._starts[shards]
        out: list[Any] = [None] * len(idx)
        groups = [(k, np.flatnonzero(shards == k)) for k in np.unique(shards).tolist()]

        def read(k: int, where: np.ndarray) -> None:
            try:
                records = self._read(k, local[where])
            except ValueError as exc:
                self._blame(exc, k, int(idx[where[0]]), int(local[where[0]]))
                raise
            for w, record in zip(where.tolist(), records):
                out[w] = record

        if len(groups) > 1 and self._remote:  # in a bucket: the shards' requests overlap
            if self._read_together(groups, local, idx, out):
                return out
            for future in [self._pool().submit(read, k, where) for k, where in groups]:
                future.result()
        else:
            for k, where in groups:
                read(k, where)
        return out

    def _blame(self, exc: BaseException, k: int, index: int, record: int) -> None:
        """Marks ``exc`` as raised reading ``index``, record ``record`` of shard ``k``."""
        mark_origin(exc, Origin(index=index, file=self._entries[k][0], record=record))

    def _pool(self) -> DaemonPool:
        """The threads that read shards at once, started on first use in each process;
        ``close()`` stops them, as does collecting the source."""
        with self._lock:
            if self._threads is None or self._threads_made.forked():
                pool = DaemonPool(SHARDS_AT_ONCE, thread_name_prefix="chute-shards")
                self._threads, self._threads_made = pool, ForkCheck()
                self._stop_threads = weakref.finalize(self, pool.shutdown)  # not self's
            return self._threads

    def _read(self, k: int, positions: Any) -> list[bytes]:
        """Records ``positions`` of shard ``k``; its reader stays open while it reads."""
        reader = self._shard(k)
        try:
            return reader.read(positions)
        finally:
            self._open.release([k])

    def _read_together(self, groups: list[tuple[int, np.ndarray]], local: np.ndarray,
                       idx: np.ndarray, out: list[Any]) -> bool:  # fmt: skip
        """A batch over shards in a bucket, every shard's requests in flight at once
        (``read_together``); False, reading nothing, where a shard must be opened with a
        request (its version unknown) or its requests run on another loop (fsspec)."""
        closed = self._open.not_open([k for k, _ in groups])
        if any(not self._index.shards[k].version for k in closed):
            return False
        if self._cache is not None and closed:  # their copies' versions, all at once
            shards = self._index.shards
            copied = [k for k in closed if self._cache.has(shards[k].path, shards[k].version)]
            self._confirm(copied)
            closed = [k for k in closed if k not in copied]  # a copy needs no offsets
        unread = self._offsets.missing(closed)
        if unread and self._index.file is not None:  # their offsets, all in one call
            self._offsets.keep(unread, self._index.read_footers(unread))
        readers: list[Any] = []
        try:
            for k, _ in groups:
                readers.append(self._shard(k))
            copies = [isinstance(r, CachedShardReader) for r in readers]
            if not all(
                c or getattr(r._source, "on_io_loop", False) for r, c in zip(readers, copies)
            ):
                return False

            def blame(i: int, exc: Exception) -> None:
                k, where = groups[i]
                self._blame(exc, k, int(idx[where[0]]), int(local[where[0]]))

            in_bucket = [i for i, c in enumerate(copies) if not c]
            reads = [(readers[i], local[groups[i][1]]) for i in in_bucket]
            got = dict(
                zip(in_bucket, read_together(reads, lambda j, exc: blame(in_bucket[j], exc)))
            )
            for i, (_, where) in enumerate(groups):
                if copies[i]:
                    try:
                        got[i] = readers[i].read(local[where])
                    except ValueError as exc:
                        blame(i, exc)
                        raise
                for w, record in zip(where.tolist(), got[i]):
                    out[w] = record
            return True
        finally:
            self._open.release([k for k, _ in groups[: len(readers)]])

    def _record_location(self, index: int) -> tuple[str, int]:
        k = int(np.searchsorted(self._ends, index, side="right"))
        return self._entries[k][0], index - int(self._starts[k])

    def __iter__(self) -> Iterator[bytes]:
        """Every record in order, read in blocks of consecutive records."""
        for begin in range(0, self._len, _ITER_BLOCK):
            yield from self.__getitems__(np.arange(begin, min(begin + _ITER_BLOCK, self._len)))

    def close(self) -> None:
        """Closes the shards and the index file open in this process, and stops its threads
        and its ``cache_dir`` downloads; a later read opens them again."""
        readers = self._open.take_all()
        with self._lock:
            pool, self._threads = self._threads, None
        if pool is not None and not self._threads_made.forked():
            self._stop_threads.detach()
            pool.shutdown(wait=True)  # idle: no read runs while the source closes
        if not self._made.forked():
            for reader in readers:
                close_reader(reader)
            self._chunks.clear()
            self._awaiting.clear()
            if self._cache is not None:
                self._cache.close()  # its downloads in this process: none is left running
        self._index.close()

    def _file_sizes(self) -> list[int]:
        return [s.size for s in self._index.shards]  # as the index saw them

    def __repr__(self) -> str:
        where = f"index={self._index_path!r}" if self._index_path else f"paths={self.paths[0]!r}..."
        cache = f", cache_dir={self._cache.directory!r}" if self._cache is not None else ""
        return f"{_WHAT}({where}, shards={len(self._entries)}, len={self._len}{cache})"


def _make_cache(
    shards: Sequence[IndexedShard], cache_dir: Any, cache_limit: Any
) -> ShardCache | None:
    """The cache the options ask for, if any shard is in a bucket (``cache_option``);
    refuses a limit that no shard would fit in."""
    remote = [s for s in shards if is_remote_url(s.path)]
    cache = cache_option(_WHAT, cache_dir, cache_limit, remote=bool(remote))
    if cache is not None:
        largest = max(remote, key=lambda s: s.size)
        cache.check_fits(largest.path, largest.size)
    return cache
