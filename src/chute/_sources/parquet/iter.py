"""``ParquetIterDataset``: the rows of Parquet files, streamed a row group at a time.

Files are read in Grain's order: up to ``cycle_length`` (16) files at once,
one row from each in turn.  When a file runs out, the next unopened file takes
its place in the cycle and the turn passes on to the following file; when no
file is left, the cycle closes up.  One path reads that file in order.

The iterator holds one row group per file in the cycle.  Its state is
positions only (the next file in the cycle, the next file to open, and for
each place in the cycle the file, row group and row), so a restore reads just
the row groups it resumes in.
"""

from __future__ import annotations

import os
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.errors import CheckpointError
from chute._core.fingerprint import files_identity
from chute._core.state_check import by_stage, fields, is_int
from chute._core.validate import check_int
from chute._sources.cached_files import cache_option
from chute._sources.parquet import io as parquet_io

_NAME = "ParquetIterDataset"
_CHUNK = 256  # rows converted to dicts at a time


class ParquetIterDataset(IterDataset[dict[str, Any]]):
    """The rows of one or more Parquet files, as dicts; Grain's experimental name.

    Args:
        path: A path or a sequence of paths to Parquet files: local paths, or
            URLs: ``s3://``, ``gs://``, ``az://`` and ``https://`` through chute's
            object-store transport, with credentials from the environment, other
            schemes through pyarrow or fsspec (see ``chute._sources.parquet.io``).
        cycle_length: chute's addition: how many files are read in turn
            (Grain reads 16).  1 reads the files one after another.
        cache_dir: chute's addition: a directory for whole local copies of the files
            in a bucket, shared by every process of the host that names it
            (``chute._remote.shard_cache``).  A file's first read starts its download
            in the background and goes on from the bucket; once the copy is whole,
            pyarrow reads the local file (an iterator moves onto it at its next row
            group).  Copies are of the bucket's version (one HEAD each time a file
            opens), never an older one; an iterator holds the copies of the files it
            reads until it moves past them or closes.  Local files are read where they
            are.  ``None``: no copies.
        cache_limit: The most bytes of copies in ``cache_dir`` (an int, or a string
            like ``"20GB"``); the least recently used copies no reader holds are
            evicted.  ``None``: as much as the disk holds.
        **read_kwargs: Passed on to ``pyarrow.parquet.ParquetFile``, such as
            ``memory_map=`` or ``read_dictionary=``; and ``filesystem=``: an obstore
            store (read through chute's transport), a ``pyarrow.fs.FileSystem`` or an
            fsspec filesystem.

    Raises:
        ImportError: pyarrow is not installed (``pip install chute[parquet]``).
        TypeError, ValueError: a bad path, an empty list of paths, or a
            keyword that ``ParquetFile`` does not take; ``cache_limit`` without
            ``cache_dir``.  Files are opened when read; a missing or broken file
            raises then, naming the file, and a page whose checksum does not match
            raises an ``OSError`` naming the file and the row group
            (``chute._sources.parquet.checks``); a file larger than ``cache_limit``
            raises a ``ValueError`` when it is opened.

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.parquet")
    >>> pq.write_table(pa.table({"x": [1, 2, 3], "s": ["a", None, "c"]}), path)
    >>> [(int(row["x"]), row["s"]) for row in ParquetIterDataset(path)]
    [(1, 'a'), (2, None), (3, 'c')]
    """

    def __init__(
        self,
        path: Any,
        *,
        cycle_length: int = 16,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        **read_kwargs: Any,
    ) -> None:
        super().__init__()
        self._paths = parquet_io.check_paths(path, _NAME)
        self._read_kwargs = parquet_io.check_read_kwargs(read_kwargs, _NAME)
        parquet_io.check_cache_filesystem(self._read_kwargs, cache_dir, _NAME)
        remote = parquet_io.reads_through_chute(self._paths, self._read_kwargs)
        self._disk_cache = cache_option(_NAME, cache_dir, cache_limit, remote=remote)
        self._cycle_length = check_int(cycle_length, f"{_NAME}: cycle_length", minimum=1)
        self._cycle = min(self._cycle_length, len(self._paths))

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Reads only the files ``paths[sl]`` from now on, in place (Grain's sharding by file).

        Each call slices the files kept so far, as Grain's does.

        Args:
          sl: which files to keep, e.g. ``slice(shard, None, shard_count)``.
          sequential_slice: accepted for Grain's signature; files are always
            taken as ``sl`` says.
        """
        if not isinstance(sl, slice):
            raise TypeError(f"{_NAME}.set_slice() takes a slice (got {sl!r}).")
        paths = self._paths[sl]
        if not paths:
            raise ValueError(
                f"{_NAME}.set_slice({sl!r}) leaves no file of the {len(self._paths)}: give each "
                "shard at least one file (use fewer shards, or shard by rows with a MapDataset)."
            )
        self._paths = paths
        self._cycle = min(self._cycle_length, len(paths))

    def __iter__(self) -> DatasetIterator[dict[str, Any]]:
        return _ParquetIterator(self)

    def _data_identity(self) -> str:
        """The files read, by name (``set_slice`` shards by file), for checkpoints."""
        return files_identity([(os.path.basename(p),) for p in self._paths])

    def _describe(self) -> str:
        kwargs = parquet_io.describe_kwargs(self._read_kwargs)
        cache = self._disk_cache
        cache_dir = "" if cache is None else f", cache_dir={cache.directory!r}"
        paths = parquet_io.describe_paths(self._paths)
        return f"paths={paths}, cycle_length={self._cycle}{kwargs}{cache_dir}"


class _Cursor:
    """One file's rows in order; its position is (row group, row in the group)."""

    def __init__(self, ds: ParquetIterDataset, file: int, group: int = 0, row: int = 0) -> None:
        self.file, self.group, self.row = file, group, row
        self._ds = ds
        self._pf: Any = None
        self._names: list[str] = []
        self._columns: list[Any] | None = None  # the columns of self.group, once read
        self._rows: list[Any] = []  # converted rows from self.row on
        self._size = 0  # rows in self.group

    def take(self, count: int) -> list[Any]:
        """The next 1 to ``count`` rows; ``[]`` once the file is exhausted."""
        if not self._rows and not self._fill():
            return []
        taken = self._rows[:count]
        del self._rows[:count]
        self.row += len(taken)
        if self.row >= self._size:  # move on, so a state never points at a finished group
            self.group, self.row, self._columns = self.group + 1, 0, None
        return taken

    def _fill(self) -> bool:
        path = self._ds._paths[self.file]
        kwargs, cache = self._ds._read_kwargs, self._ds._disk_cache
        if self._pf is None:
            self._pf = parquet_io.open_file(path, kwargs, _NAME, cache)
        elif self._columns is None:  # read from the bucket until the cache's copy is whole
            self._pf = parquet_io.onto_copy(self._pf, path, kwargs, _NAME, cache)
        while self._columns is None:
            if self.group >= self._pf.num_row_groups:
                return False
            self._size = self._pf.metadata.row_group(self.group).num_rows
            if self.row > self._size:
                raise CheckpointError(
                    f"{_NAME}: the state points at row {self.row} of row group {self.group} "
                    f"of {path!r}, which has {self._size} rows: the file has changed."
                )
            if self.row == self._size:  # an empty row group
                self.group, self.row = self.group + 1, 0
                continue
            self._names, self._columns, _ = parquet_io.read_group(
                self._pf, path, self.group, None, _NAME
            )
        stop = min(self.row + _CHUNK, self._size)
        self._rows = parquet_io.rows(self._names, self._columns, self.row, stop)
        return True

    def close(self) -> None:
        if self._pf is not None:
            parquet_io.close_file(self._pf)
            self._pf = None


class _ParquetIterator(DatasetIterator[dict[str, Any]]):
    _stage = "parquet"
    _state_fields = fields(**dict.fromkeys(("turn", "next_file", "places"), by_stage))

    def __init__(self, ds: ParquetIterDataset) -> None:
        super().__init__()
        self._ds = ds
        self._restart(0, ds._cycle, [[k, 0, 0] for k in range(ds._cycle)])

    def _restart(self, turn: int, next_file: int, places: list[list[int]]) -> None:
        self._turn, self._next_file = turn, next_file
        self._places: list[_Cursor | None] = [
            None if file < 0 else _Cursor(self._ds, file, group, row) for file, group, row in places
        ]
        self._active = sum(c is not None for c in self._places)

    def __next__(self) -> dict[str, Any]:
        places, cycle = self._places, len(self._places)
        while self._active:
            turn = self._turn
            cursor = places[turn]
            if cursor is None:
                self._turn = (turn + 1) % cycle
                continue
            taken = cursor.take(1)  # may raise; the turn stays, so next() retries
            self._turn = (turn + 1) % cycle
            if taken:
                return taken[0]
            self._replace(turn)
        if self._closed:
            self._raise_closed()
        raise StopIteration

    def _next_many(self, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` rows of one file when the cycle is a single file."""
        cursor = self._places[0] if len(self._places) == 1 else None
        if cursor is not None:
            taken = cursor.take(count)
            if taken:
                return taken
        return [next(self)]

    def _replace(self, place: int) -> None:
        """Puts the next unopened file in an exhausted place, or empties it."""
        old = self._places[place]
        if old is not None:
            old.close()
        if self._next_file < len(self._ds._paths):
            self._places[place] = _Cursor(self._ds, self._next_file)
            self._next_file += 1
        else:
            self._places[place] = None
            self._active -= 1

    def get_state(self) -> dict[str, Any]:
        places = [[-1, 0, 0] if c is None else [c.file, c.group, c.row] for c in self._places]
        return self._state(turn=self._turn, next_file=self._next_file, places=places)

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "turn", "next_file", "places")
        self._close_files()
        self._restart(state["turn"], state["next_file"], state["places"])

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        places, files = state["places"], len(self._ds._paths)
        if not isinstance(places, list) or len(places) != len(self._places):
            reads = f"{len(places)} files" if isinstance(places, list) else f"{places!r:.40}"
            raise CheckpointError(
                f"{_NAME}.set_state(): the state reads {reads} in turn, this dataset "
                f"{len(self._places)}, at {where}: build it with the same paths and cycle_length."
            )
        for place in places:
            if not (
                isinstance(place, list)
                and len(place) == 3
                and ((place[0] == -1 and type(place[0]) is int) or is_int(place[0], files - 1))
                and is_int(place[1])
                and is_int(place[2])
            ):
                raise CheckpointError(f"{_NAME}.set_state(): bad place {place!r} at {where}.")
        turn, next_file = state["turn"], state["next_file"]
        if not (is_int(turn, len(places) - 1) and is_int(next_file, files)):
            raise CheckpointError(f"{_NAME}.set_state(): bad position in the state {state}.")

    def _close_files(self) -> None:
        for cursor in self._places:
            if cursor is not None:
                cursor.close()

    def close(self) -> None:
        if not self._closed:
            self._close_files()
            self._restart(0, len(self._ds._paths), [])
        super().close()
