"""``ArrayRecordDataSource``: the records of ArrayRecord files, read by global index.

Files are given as a path, a glob pattern (``data/*.array_record``), a
sharded spec ``prefix@N`` (``prefix-00000-of-0000N`` and on, with or without
the ``.array_record`` suffix that ``write_array_record`` adds), a slice of a
file (``path[10:20]``, as in Grain), an object with ``filename``, ``skip``
and ``take`` (TFDS's ``FileInstruction``), a bare shard prefix (the
OUTPUT_PREFIX of ``chute convert``), or a list of any of these
(``chute._sources.array_record.paths`` has the rules).  Record ``i`` of the
dataset is found in the files in the order given.

Reads go through array_record's ranged read, ``reader.read(k, k + 1)``, once
per record: 4-5 us whatever the file's size.  The multi-index read,
``reader.read([k, ...])``, costs time that grows with the number of records
*in the file* on every call, however few it reads (0.4 ms on a file of
200,000 records, 65 ms on one of 2,000,000), which is what makes Grain's
per-record reads so slow; benchmarks/README.md has the numbers.  One reader
per file serves every thread: its reads are thread-safe and release the
GIL.  Readers open lazily in each process.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from chute._core.errors import FileChangedError, Origin, mark_origin
from chute._core.fingerprint import files_identity
from chute._core.fork import ForkCheck
from chute._remote.urls import is_remote_url
from chute._sources.array_record.files import (
    file_identity,
    how_changed,
    open_reader,
    options_string,
    resolve,
)
from chute._sources.protocol import as_index, check_indices, out_of_range

__all__ = ["ArrayRecordDataSource"]

_WHAT = "ArrayRecordDataSource"
_REPR_FILES = 4
_ITER_BLOCK = 1024


def _is_index(paths: Any) -> bool:
    """A data-set index (``chute index``): read with bounded memory by chute's own reader."""
    return isinstance(paths, (str, os.PathLike)) and os.fspath(paths).endswith(".chute-index")


def _in_bucket(paths: Any) -> bool:
    """Object-store URLs (``s3://``, ``gs://``, ...), which array_record cannot open."""
    given = [paths] if isinstance(paths, (str, os.PathLike)) else paths
    if not isinstance(given, Sequence) or not given:
        return False
    return all(isinstance(p, (str, os.PathLike)) and is_remote_url(os.fspath(p)) for p in given)


class ArrayRecordDataSource:
    """The records (``bytes``) of one or more ArrayRecord files, as one indexable source.

    A drop-in for Grain's ``ArrayRecordDataSource``, which it also extends:
    glob patterns, ``prefix@N`` shard specs and bare shard prefixes (all
    the shards ``prefix-IIIII-of-NNNNN``) are accepted besides paths,
    slices and ``FileInstruction`` objects, and ``reader_options`` may be a
    string as array_record writes them (``"readahead_buffer_size:0"``) or a
    dict as Grain takes them.  Options given override chute's defaults,
    ``readahead_buffer_size:0,max_parallelism:0``, which array_record
    recommends for random access.  Whole files are opened once here to count
    their records; the errors name the file: a missing file raises
    ``FileNotFoundError``, a file that is not a readable ArrayRecord file
    (truncated, corrupt, another format) ``ValueError``, as does a dataset
    with no records.  Indices run from 0 to ``len - 1``; others raise
    ``IndexError``.

    The source pickles as its file list and options; each process opens its
    own readers when it first reads, so worker processes work unchanged.
    ``close()`` (or leaving a ``with`` block) closes the open files, and must
    not run while another thread reads; a later read opens them again.
    ``write_array_record`` writes files for it (with ``group_size:1``, which
    random access needs; other files log a warning).

    Args:
        paths: A path, glob pattern, ``prefix@N``, ``path[start:stop]`` or
            ``FileInstruction``, or a list of them; or (chute's addition) a
            ``.chute-index`` file, or ``s3://``, ``gs://``, ``az://``, ``http(s)://``
            URLs in the same forms as paths (but slices: a shard, a glob,
            ``prefix@N``, a shard prefix) or of an index, read with chute's own reader
            and object-store transport (``pip install chute[remote]``).
        reader_options: array_record reader options, a str or a dict.
        filesystem: chute's addition: an obstore store or an fsspec filesystem that
            holds the credentials and endpoint for URLs, instead of the environment.
            It keeps its own retry settings: chute retries, and counts in the
            source's ``retries``, what the store gives up on.
        cache_dir: chute's addition, for shards in a bucket: a local directory that keeps
            whole copies of the shards, shared by every process of the host.  A shard's
            first read starts its download in the background; once its copy is whole,
            it is read as a local file (see ``chute._remote.shard_cache``).  Local files
            are read where they are.
        cache_limit: The most bytes the copies may take (``"20GB"``, or an int); None:
            the disk's whole size, so the copies take what is free on it, less a margin
            (5% of the disk, at most 1 GiB, kept free beyond each download).  A limit
            smaller than the largest shard is refused.

    >>> import tempfile, os
    >>> from chute._sources.array_record.writer import write_array_record
    >>> prefix = os.path.join(tempfile.mkdtemp(), "abc")
    >>> files = write_array_record([b"a", b"b", b"c"], prefix, num_shards=2)
    >>> with ArrayRecordDataSource(prefix + "@2") as source:
    ...     len(source), source[1], source.__getitems__([2, 0, 2])
    (3, b'c', [b'b', b'a', b'b'])
    """

    def __new__(cls, paths: Any = None, *args: Any, **kwargs: Any) -> ArrayRecordDataSource:
        routed = _is_index(paths) or _in_bucket(paths) or kwargs.get("filesystem") is not None
        if cls is ArrayRecordDataSource and routed:
            from chute._sources.array_record.indexed import IndexedArrayRecordDataSource

            return super().__new__(IndexedArrayRecordDataSource)
        return super().__new__(cls)

    def __init__(
        self,
        paths: Any,
        reader_options: str | Mapping[str, Any] | None = None,
        *,
        filesystem: Any = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
    ) -> None:
        del cache_dir, cache_limit  # local files are read where they are
        if filesystem is not None:  # a subclass that reads local files only
            raise ValueError(f"{type(self).__name__} reads local files and takes no filesystem=.")
        options = options_string(reader_options)
        entries, identity = resolve(paths, options)
        if sum(stop - start for _, start, stop, _ in entries) == 0:
            raise ValueError(f"{_WHAT}: the files hold no records: {[e[0] for e in entries]}.")
        self._entries, self._options = entries, options
        # Every process (worker processes too) reads the files only while they are the
        # ones counted here: same size, modification time and inode.
        self._known: list[tuple[int, int, int] | None] = [identity[e[0]] for e in entries]
        self._setup()

    def _setup(self) -> None:
        lengths = [stop - start for _, start, stop, _ in self._entries]
        self._ends = np.cumsum(lengths, dtype=np.int64)
        self._len = int(self._ends[-1])
        # Global index i of file k is record i - shift[k] of that file.
        self._shift = self._ends - lengths - [e[1] for e in self._entries]
        self._lock = threading.Lock()
        self._readers: list[Any] = [None] * len(self._entries)
        self._made = ForkCheck()  # the readers and the lock are this process's

    def __getstate__(self) -> dict[str, Any]:
        return {"entries": self._entries, "options": self._options, "identity": self._known}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._entries, self._options = state["entries"], state["options"]
        self._known = list(state.get("identity") or [None] * len(self._entries))
        self._setup()

    def __len__(self) -> int:
        return self._len

    def _reader(self, k: int) -> Any:
        """File ``k``'s reader in this process, opened on first use."""
        if self._made.forked():  # a forked child: the parent's readers are not its own
            self._setup()
        reader = self._readers[k]
        if reader is None:
            with self._lock:
                reader = self._readers[k]
                if reader is None:
                    reader = self._readers[k] = self._open_checked(k)
        return reader

    def _open_checked(self, k: int) -> Any:
        path, _, stop, _ = self._entries[k]
        now = file_identity(path)
        if self._known[k] is None:  # unpickled from a source that recorded none
            self._known[k] = now
        elif now != self._known[k]:
            error = self._changed(k, now, None)
            mark_origin(error, Origin(file=path))
            raise error
        reader = open_reader(path, self._options)
        held = reader.num_records()
        if stop > held:
            reader.close()
            raise ValueError(
                f"{_WHAT}: records up to {stop} of {path!r} were asked for, but it holds {held}."
            )
        return reader

    def __getitem__(self, index: int) -> bytes:
        i = index if type(index) is int else as_index(index, _WHAT)
        if not 0 <= i < self._len:
            raise out_of_range(i, self._len, _WHAT, negative=False)
        k = int(np.searchsorted(self._ends, i, side="right"))
        return self._read(k, [i - int(self._shift[k])])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at ``indices``, in that order (repeats allowed)."""
        idx = check_indices(indices, self._len, _WHAT, negative=False)
        if len(self._entries) == 1:
            return self._read(0, (idx - self._shift[0]).tolist())
        files = np.searchsorted(self._ends, idx, side="right")
        positions = (idx - self._shift[files]).tolist()
        reads = {k: self._reader(k).read for k in np.unique(files).tolist()}
        try:
            records = [reads[k](p, p + 1)[0] for k, p in zip(files.tolist(), positions)]
            for k in reads:
                self._check_unchanged(k, [p for f, p in zip(files.tolist(), positions) if f == k])
            return records
        except RuntimeError:
            for k in reads:  # find the file and record that failed, for the message
                self._read(k, [p for f, p in zip(files.tolist(), positions) if f == k])
            raise

    def _read(self, k: int, positions: list[int]) -> list[bytes]:
        read = self._reader(k).read
        try:
            records = [read(p, p + 1)[0] for p in positions]
            self._check_unchanged(k, positions)
            return records
        except RuntimeError:
            for p in positions:
                try:
                    read(p, p + 1)
                except RuntimeError as exc:
                    path = self._entries[k][0]
                    error = ValueError(f"{_WHAT}: cannot read record {p} of {path!r}: {exc}")
                    index = p + int(self._shift[k])
                    mark_origin(error, Origin(index=index, file=path, record=p))
                    raise error from exc
            raise

    def _check_unchanged(self, k: int, positions: list[int]) -> None:
        """Raises if file ``k`` changed since it was opened (its records may not be the same)."""
        path = self._entries[k][0]
        now = file_identity(path)
        if now == self._known[k]:
            return
        error = self._changed(k, now, positions[0])
        index = positions[0] + int(self._shift[k])
        mark_origin(error, Origin(index=index, file=path, record=positions[0]))
        raise error

    def _changed(self, k: int, now: tuple[int, int, int], record: int | None) -> FileChangedError:
        """The error for file ``k``, found ``now`` to differ from what the source opened."""
        path, before = self._entries[k][0], self._known[k] or now
        what = f"record {record} cannot be read" if record is not None else "it cannot be read"
        return FileChangedError(
            f"{_WHAT}: {path!r} changed since it was opened when the {_WHAT} was made "
            f"({how_changed(before, now)}), so {what} as it was. If the file was replaced "
            f"on purpose, make a new {_WHAT}; "
            "otherwise another program is writing, truncating or replacing it."
        )

    def _record_location(self, index: int) -> tuple[str, int]:
        """The file and the record in it of record ``index`` (named in error notes)."""
        k = int(np.searchsorted(self._ends, index, side="right"))
        return self._entries[k][0], index - int(self._shift[k])

    def __iter__(self) -> Iterator[bytes]:
        """Every record in order, read in blocks of consecutive records."""
        for k, (_, start, stop, _) in enumerate(self._entries):
            for begin in range(start, stop, _ITER_BLOCK):
                end = min(begin + _ITER_BLOCK, stop)
                try:
                    block = self._reader(k).read(begin, end)
                except RuntimeError:  # a corrupt record: the error names it
                    block = self._read(k, list(range(begin, end)))
                yield from block

    @property
    def paths(self) -> list[str]:
        """The files read, in order (a file appears once per slice of it)."""
        return [e[0] for e in self._entries]

    def close(self) -> None:
        """Closes the files open in this process; a later read opens them again."""
        with self._lock:
            readers, self._readers = self._readers, [None] * len(self._entries)
        if not self._made.forked():
            for reader in readers:
                if reader is not None:
                    reader.close()

    def __enter__(self) -> ArrayRecordDataSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def chute_identity(self) -> str:
        """The files read: names, record ranges and sizes (what checkpoints record of them).

        Names without their folder, so a checkpoint restores over the same files
        elsewhere, read from an index or from a bucket.
        """
        rows = zip(self._entries, self._file_sizes())
        return files_identity([(os.path.basename(f), a, b, n) for (f, a, b, _), n in rows])

    def _file_sizes(self) -> list[int]:
        known = zip(self._entries, self._known)
        return [(k if k is not None else file_identity(e[0]))[0] for e, k in known]

    def _grain_repr(self) -> str:
        """Grain's repr of the same source, which its DataLoader checkpoints record: a SHA-1
        of the files' names joined (without the record ranges of sliced files)."""
        names = "".join(f for f, _, _, _ in self._entries)
        return f"{_WHAT}(hash_of_paths={hashlib.sha1(names.encode()).hexdigest()})"

    def __repr__(self) -> str:
        names = [f"{f}[{a}:{b}]" if sliced else f for f, a, b, sliced in self._entries]
        if len(names) <= _REPR_FILES:
            files = repr(names)
        else:
            digest = hashlib.sha1("\n".join(names).encode()).hexdigest()[:16]
            files = f"<{len(names)} files, {names[0]!r} to {names[-1]!r}, sha1 {digest}>"
        return f"{_WHAT}(paths={files}, len={self._len})"
