"""``ParquetDataSource``: random access to the rows of Parquet files (chute's addition).

Grain can only stream Parquet (``ParquetIterDataset``); this source indexes
the files' row groups from their metadata, so that any row can be read and
Parquet data can be globally shuffled::

    ds = chute.MapDataset.source(ParquetDataSource(paths)).shuffle(seed=1)

A batched read groups its indices by row group, reads each row group it needs
once, and keeps the row groups it read last in a cache of bounded size
(``cache_bytes``), so reading in order reads every row group once, and a
shuffle reads each row group once when the data fits in the cache.  Rows
shuffled across more data than the cache holds cost about one row group read
per row group touched by each batched read: read in large chunks, or shuffle
within windows, for such data.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from chute._core.errors import Origin, mark_origin
from chute._core.fingerprint import files_identity
from chute._core.fork import ForkCheck
from chute._core.validate import check_int
from chute._remote.shard_cache import ShardCache
from chute._sources.cached_files import cache_option
from chute._sources.parquet import io as parquet_io
from chute._sources.protocol import as_index, check_indices, out_of_range

__all__ = ["ParquetDataSource"]

_NAME = "ParquetDataSource"
_MAX_OPEN_FILES = 8  # per thread
_CHUNK = 256  # rows converted to dicts at a time when iterating


class ParquetDataSource:
    """The rows of Parquet files, read by index, as dicts.

    Rows are numbered through the files in order.  Records are the same dicts
    ``ParquetIterDataset`` yields (see ``chute._sources.parquet.io``).  Nested
    values (the arrays of list columns, the dicts of struct columns) may be
    shared with the cache: copy them before changing them in place.

    The source is thread-safe, pickles without open files or cached data
    (each process opens its own files, lazily) and has a stable ``repr``.

    Args:
        paths: A path or a sequence of paths to Parquet files: local paths, or
            URLs: ``s3://``, ``gs://``, ``az://`` and ``https://`` through chute's
            object-store transport, with credentials from the environment, other
            schemes through pyarrow or fsspec (see ``chute._sources.parquet.io``).
        columns: The (top-level) columns to read; ``None`` reads them all.
        cache_bytes: How much of the row groups read last to keep converted,
            per process, in bytes of Arrow data (Python objects of string and
            list columns take more); the last row group read is always kept.
        cache_dir: chute's addition: a directory for whole local copies of the files
            in a bucket, shared by every process of the host that names it
            (``chute._remote.shard_cache``).  A file's first read starts its download
            in the background and goes on from the bucket; once the copy is whole,
            pyarrow reads the local file.  Copies are of the bucket's version (one HEAD
            each time a file opens), never an older one.  Local files are read where
            they are.  ``None``: no copies.
        cache_limit: The most bytes of copies in ``cache_dir`` (an int, or a string
            like ``"20GB"``); the least recently used copies no reader holds are
            evicted.  ``None``: as much as the disk holds.  A limit smaller than a
            file raises ``ValueError`` when the source is built.
        **read_kwargs: Passed on to ``pyarrow.parquet.ParquetFile``, such as
            ``memory_map=``; and ``filesystem=``: an obstore store (read through
            chute's transport), a ``pyarrow.fs.FileSystem`` or an fsspec filesystem.

    Raises:
        ImportError: pyarrow is not installed (``pip install chute[parquet]``).
        FileNotFoundError, ValueError: a file is missing or is not Parquet, or
            lacks one of ``columns``; the message names the file.
        SourceChangedError: when read, an object in a bucket is not the version
            the source was built on.
        OSError: when read, a page whose checksum does not match its bytes (a
            damaged file); the message names the file and the row group.  Page
            checksums are verified unless ``page_checksum_verification=False``
            (see ``chute._sources.parquet.checks``).

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.parquet")
    >>> table = pa.table({"x": [1, 2, 3]})
    >>> pq.write_table(table, path, row_group_size=2, write_page_checksum=True)
    >>> source = ParquetDataSource(path)
    >>> len(source), [int(row["x"]) for row in source.__getitems__([2, 0])]
    (3, [3, 1])
    """

    def __init__(
        self,
        paths: Any,
        columns: Sequence[str] | None = None,
        *,
        cache_bytes: int = 128 * 2**20,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        **read_kwargs: Any,
    ) -> None:
        self._paths = parquet_io.check_paths(paths, _NAME)
        self._columns = _check_columns(columns)
        self._read_kwargs = parquet_io.check_read_kwargs(read_kwargs, _NAME)
        self._cache_bytes = check_int(cache_bytes, f"{_NAME}: cache_bytes", minimum=0)
        parquet_io.check_cache_filesystem(self._read_kwargs, cache_dir, _NAME)
        remote = parquet_io.reads_through_chute(self._paths, self._read_kwargs)
        self._disk_cache = cache_option(_NAME, cache_dir, cache_limit, remote=remote)
        found = _index(self._paths, self._columns, self._read_kwargs, self._disk_cache)
        sizes = [file_sizes for file_sizes, _ in found]
        self._versions = [version for _, version in found]  # of objects in a bucket
        counts = [n for file_sizes in sizes for n in file_sizes]
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self._where = [(f, g) for f, file_sizes in enumerate(sizes) for g in range(len(file_sizes))]
        self._len = int(self._starts[-1])
        self._reset()

    def _reset(self) -> None:
        """Fresh per-process state: no open files, an empty cache, a new lock."""
        self._made = ForkCheck()
        self._lock = threading.Lock()
        self._local = threading.local()  # each thread's open files
        self._all_files: weakref.WeakValueDictionary[int, _OpenFiles] = (
            weakref.WeakValueDictionary()
        )  # every thread's, by id, for close()
        self._cache: collections.OrderedDict[int, tuple[list[str], list[np.ndarray], int]] = (
            collections.OrderedDict()
        )
        self._cached_bytes = 0
        if self._disk_cache is not None:  # collected unclosed, its downloads stop too
            weakref.finalize(self, self._disk_cache.abandon).atexit = False

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict[str, Any]:
        i = as_index(index, _NAME)
        if not 0 <= i < self._len:
            raise out_of_range(i, self._len, _NAME, negative=False)
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices``, in that order; each row group needed is read once."""
        idx = check_indices(indices, self._len, _NAME, negative=False)
        groups = np.searchsorted(self._starts, idx, side="right") - 1
        within = idx - self._starts[groups]
        order = np.argsort(groups, kind="stable")
        ordered = groups[order]
        cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        out: list[Any] = [None] * len(idx)
        for part in np.split(order, cuts) if len(idx) else ():
            names, columns = self._group(int(groups[part[0]]))
            picked = [column[within[part]] for column in columns]
            for position, values in zip(part.tolist(), zip(*picked)):
                out[position] = dict(zip(names, values))
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for group in range(len(self._where)):
            names, columns = self._group(group)
            size = int(self._starts[group + 1] - self._starts[group])
            for start in range(0, size, _CHUNK):
                yield from parquet_io.rows(names, columns, start, min(start + _CHUNK, size))

    # -- files and the cache ---------------------------------------------------------

    def _group(self, group: int) -> tuple[list[str], list[np.ndarray]]:
        """The converted columns of a row group, from the cache or read now."""
        if self._made.forked():  # a forked child: the parent's lock means nothing
            self._reset()
        with self._lock:
            hit = self._cache.get(group)
            if hit is not None:
                self._cache.move_to_end(group)
                return hit[0], hit[1]
        file, in_file = self._where[group]
        path = self._paths[file]
        try:
            names, columns, size = parquet_io.read_group(
                self._file(file), path, in_file, self._columns, _NAME
            )
        except Exception as exc:
            mark_origin(exc, Origin(file=path))
            raise
        with self._lock:
            if group not in self._cache:
                self._cache[group] = (names, columns, size)
                self._cached_bytes += size
            while self._cached_bytes > self._cache_bytes and len(self._cache) > 1:
                self._cached_bytes -= self._cache.popitem(last=False)[1][2]
        return names, columns

    def _record_location(self, index: int) -> tuple[str, int]:
        """The file and the row in it of row ``index`` (named in error notes)."""
        file, _ = self._where[int(np.searchsorted(self._starts, index, side="right")) - 1]
        first_group = self._where.index((file, 0))
        return self._paths[file], index - int(self._starts[first_group])

    def _file(self, file: int) -> Any:
        """This thread's open ``ParquetFile`` for ``file`` (pyarrow's are not thread-safe)."""
        files = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = _OpenFiles()
            with self._lock:
                self._all_files[id(files)] = files
        path = self._paths[file]
        pf = files.get(file)
        if pf is not None:  # read from the bucket until the cache's copy is whole
            files[file] = pf = parquet_io.onto_copy(
                pf, path, self._read_kwargs, _NAME, self._disk_cache
            )
            files.move_to_end(file)
            return pf
        pf = parquet_io.open_file(path, self._read_kwargs, _NAME, self._disk_cache)
        parquet_io.check_version(pf, path, self._versions[file], _NAME)
        files[file] = pf
        if len(files) > _MAX_OPEN_FILES:
            parquet_io.close_file(files.popitem(last=False)[1])
        return pf

    def close(self) -> None:
        """Closes the files open in this process, in every thread; a later read opens them.

        Their cached copies are let go of (they may be evicted), and the downloads of
        ``cache_dir`` this process runs for it stop.  Call it while no read runs.
        """
        if self._made.forked():
            self._reset()
            return
        with self._lock:
            every = list(self._all_files.values())
        for files in every:
            while files:
                parquet_io.close_file(files.popitem()[1])
        if self._disk_cache is not None:
            self._disk_cache.close()

    def __enter__(self) -> ParquetDataSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- pickling and repr ------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_made", "_lock", "_local", "_all_files", "_cache", "_cached_bytes"):
            del state[key]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def chute_identity(self) -> str:
        """The files read (names, rows per row group) and the columns, for checkpoints."""
        counts = np.diff(self._starts).tolist()
        groups: list[list[int]] = [[] for _ in self._paths]
        for (f, _), n in zip(self._where, counts):
            groups[f].append(n)
        files = [(os.path.basename(p), g) for p, g in zip(self._paths, groups)]
        columns = "" if self._columns is None else f", columns {list(self._columns)}"
        return files_identity(files) + columns

    def __repr__(self) -> str:
        columns = None if self._columns is None else list(self._columns)
        kwargs = parquet_io.describe_kwargs(self._read_kwargs)
        cache = self._disk_cache
        cache_dir = "" if cache is None else f", cache_dir={cache.directory!r}"
        paths = parquet_io.describe_paths(self._paths)
        return f"{_NAME}(paths={paths}, columns={columns!r}{kwargs}{cache_dir})"


class _OpenFiles(collections.OrderedDict[int, Any]):
    """One thread's open files, most recently read last (a class of its own, so the source
    can keep a weak reference to each thread's for ``close()``)."""


def _check_columns(columns: Any) -> tuple[str, ...] | None:
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise TypeError(
            f"{_NAME}: columns must be a list of column names or None (got {columns!r} that "
            f"is a {type(columns).__name__}); pass [{columns!r}] for one column."
        )
    bad = [c for c in columns if not isinstance(c, str)]
    if bad:
        raise TypeError(f"{_NAME}: column names must be str (got {bad[0]!r}).")
    if not columns:
        raise ValueError(f"{_NAME}: columns is empty; pass None to read every column.")
    if len(set(columns)) != len(columns):
        raise ValueError(f"{_NAME}: columns {list(columns)} name a column twice.")
    return tuple(columns)


def _file_sizes(
    path: str, columns: tuple[str, ...] | None, kwargs: dict[str, Any], cache: ShardCache | None
) -> tuple[list[int], str | None]:
    """The row counts of a file's row groups, from its metadata, and its version.

    Checks ``columns``.  The version is an object's ETag or generation when read through
    chute's transport (``None`` for other files).  With ``cache``, an object's download
    starts now, or its footer is read from the copy.
    """
    pf = parquet_io.open_file(path, kwargs, _NAME, cache)
    try:
        names = pf.schema_arrow.names
        missing = [c for c in columns or () if c not in names]
        if missing:
            raise ValueError(f"{_NAME}: {path!r} has no column {missing}; its columns: {names}.")
        meta = pf.metadata
        counts = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        return counts, parquet_io.version_of(pf)
    finally:
        parquet_io.close_file(pf)


def _index(
    paths: tuple[str, ...],
    columns: tuple[str, ...] | None,
    kwargs: dict[str, Any],
    cache: ShardCache | None,
) -> list[tuple[list[int], str | None]]:
    """Row-group sizes and version of every file; footers are read on threads when many."""
    if len(paths) == 1:
        return [_file_sizes(paths[0], columns, kwargs, cache)]
    with concurrent.futures.ThreadPoolExecutor(min(16, len(paths))) as pool:
        return list(pool.map(lambda p: _file_sizes(p, columns, kwargs, cache), paths))
