"""What chute's Parquet readers share: pyarrow, paths, opening files, rows.

pyarrow is an extra (``pip install chute[parquet]``), imported only when a
Parquet reader is built.

**Where files can live.**  A path is a local path or a URL:

* ``s3://``, ``gs://``, ``az://``, ``abfs://`` and ``http(s)://`` URLs are read through
  chute's own object-store transport (``chute._remote``), as ArrayRecord files in a
  bucket are: credentials and endpoints come from the usual environment variables
  (``AWS_*`` with ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``,
  ``STORAGE_EMULATOR_HOST``, ``AZURE_*``; see ``chute._remote.ranged_object``), transient
  failures are retried with backoff, a missing object raises ``FileNotFoundError`` and
  a denied one ``PermissionError`` at once, naming the URL, and an object replaced
  while it is read raises ``SourceChangedError``.  Opening a file costs a HEAD and one
  ranged GET for its footer; a row group costs one concurrent read of its column chunks.
* Any other URL goes to ``pyarrow.fs.FileSystem.from_uri`` (``file://``, ``hdfs://``)
  or, failing that, fsspec (``memory://``, ...; needs fsspec installed).

A ``filesystem=`` keyword takes control: an obstore store (``obstore.store.S3Store``)
reads through chute's transport with that store's credentials; a
``pyarrow.fs.FileSystem`` or an fsspec filesystem reads through that filesystem, as
pyarrow does.  Paths are then URLs or paths inside that store or filesystem.

**A local cache.**  With ``cache_dir=`` (``ParquetDataSource``, ``ParquetIterDataset``),
the files read through chute's transport are kept as whole local copies
(``chute._sources.cached_files``): a file's first open starts its download and reads the
bucket meanwhile; later opens of the same version, and open files at their next row
group, read the copy as a local file.

**Records.**  Rows are converted as Grain converts them: each column of a row
group becomes a NumPy array (``pyarrow.ChunkedArray.to_numpy()``'s result, built by
``chute._sources.parquet.columns`` without importing pandas where it can) and a row is
the dict of its values, column name to value: NumPy scalars for numbers,
dates and times, ``str`` and ``bytes``, NumPy arrays for lists, dicts for
structs, ``None`` for nulls (``nan``/``NaT`` in number and time columns that
hold nulls in that row group).

**Checksums.**  Files are opened with ``page_checksum_verification=True`` (unless the
keyword says otherwise), so the pages of a file written with checksums are checked as
they are read (``chute._sources.parquet.checks``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

import numpy as np

from chute._core.errors import CredentialsNotFoundError, SourceChangedError
from chute._remote.backends import is_obstore
from chute._remote.retry import RetryBudgetExceeded
from chute._remote.shard_cache import CopySource, ShardCache, open_through
from chute._remote.urls import is_remote_url, url_scheme
from chute._sources.cached_files import whole_copy
from chute._sources.parquet import checks as parquet_checks
from chute._sources.parquet import columns as parquet_columns


def pyarrow_parquet() -> ModuleType:
    """``pyarrow.parquet``, or an ``ImportError`` that names the extra to install."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(
            "chute's Parquet readers need pyarrow, which is not installed; "
            "install it with `pip install chute[parquet]`."
        ) from exc
    return pq


def check_paths(path: Any, owner: str) -> tuple[str, ...]:
    """``path`` (one path or a sequence of them) as a non-empty tuple of strings."""
    items = [path] if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(items, Sequence):
        raise TypeError(
            f"{owner}: path must be a str, an os.PathLike or a sequence of them "
            f"(got {path!r} that is a {type(path).__name__})."
        )
    for p in items:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(
                f"{owner}: every path must be a str or an os.PathLike "
                f"(got {p!r} that is a {type(p).__name__})."
            )
    if not items:
        raise ValueError(f"{owner}: got an empty list of paths; pass at least one Parquet file.")
    return tuple(os.fspath(p) for p in items)


def check_read_kwargs(kwargs: dict[str, Any], owner: str) -> dict[str, Any]:
    """``kwargs`` if ``pyarrow.parquet.ParquetFile`` takes them all, else a ``TypeError``."""
    params = inspect.signature(pyarrow_parquet().ParquetFile.__init__).parameters
    valid = sorted(set(params) - {"self", "source"})
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise TypeError(
            f"{owner}: unknown keyword argument(s) {unknown}; extra keywords go to "
            f"pyarrow.parquet.ParquetFile, which takes {valid}."
        )
    return dict(kwargs)


def _remote_file(path: str, filesystem: Any, cache: ShardCache | None) -> Any:
    """A ``RangedFile`` over ``path`` read through chute's transport (``chute._remote``),
    or, where ``cache`` holds the bucket's version of it whole, a ``CopySource`` of it."""
    from chute._remote import RangedFile

    source = open_through(cache, path, filesystem=filesystem)
    return source if isinstance(source, CopySource) else RangedFile(source, name=path)


def _resolve(
    path: str, kwargs: dict[str, Any], owner: str, cache: ShardCache | None = None
) -> tuple[Any, dict[str, Any]]:
    """The source and keywords for ``ParquetFile``: a file object, a cached copy, or a path
    and filesystem."""
    filesystem = kwargs.get("filesystem")
    if is_obstore(filesystem):
        rest = {k: v for k, v in kwargs.items() if k != "filesystem"}
        return _remote_file(path, filesystem, cache), rest
    if filesystem is not None or not url_scheme(path):  # a plain path
        return path, kwargs
    if is_remote_url(path):
        return _remote_file(path, None, cache), kwargs
    from pyarrow import fs as pafs

    try:
        filesystem, inner = pafs.FileSystem.from_uri(path)
    except ValueError as pyarrow_error:  # a scheme pyarrow does not know: try fsspec
        try:
            import fsspec.core

            filesystem, inner = fsspec.core.url_to_fs(path)
        except (ImportError, ValueError) as exc:
            raise ValueError(
                f"{owner}: cannot open {path!r}: pyarrow does not know its filesystem "
                f"({pyarrow_error}) and fsspec could not open it either ({exc}). Pass "
                "filesystem= (a pyarrow or fsspec filesystem) with a path inside it."
            ) from exc
    return inner, {**kwargs, "filesystem": filesystem}


def reads_through_chute(paths: Sequence[str], kwargs: dict[str, Any]) -> bool:
    """Whether any of ``paths`` is read through chute's transport (an object in a bucket):
    the files a cache can keep copies of."""
    return is_obstore(kwargs.get("filesystem")) or any(is_remote_url(p) for p in paths)


def check_cache_filesystem(kwargs: dict[str, Any], cache_dir: Any, owner: str) -> None:
    """Refuses ``cache_dir`` with a pyarrow or fsspec filesystem, which pyarrow reads itself."""
    filesystem = kwargs.get("filesystem")
    if cache_dir is not None and filesystem is not None and not is_obstore(filesystem):
        raise ValueError(
            f"{owner}: cache_dir keeps copies of objects read through chute's transport, "
            f"and a {type(filesystem).__name__} is read by pyarrow itself. Pass URLs "
            "(s3://, gs://, ...) or an obstore store as filesystem=, or drop cache_dir."
        )


def reraise(exc: BaseException, message: str) -> NoReturn:
    """Raises ``message`` as the builtin (or chute) kind of ``exc``, chained to it."""
    kinds = (
        SourceChangedError,
        CredentialsNotFoundError,
        RetryBudgetExceeded,
        FileNotFoundError,
        PermissionError,
        IsADirectoryError,
        ValueError,
        OSError,
    )
    for kind in kinds:
        if isinstance(exc, kind):
            raise kind(message) from exc
    raise exc


def open_file(
    path: str, kwargs: dict[str, Any], owner: str, cache: ShardCache | None = None
) -> Any:
    """``pyarrow.parquet.ParquetFile(path)``, with errors that name the file.

    With ``cache``, an object in a bucket is read from the cache's whole copy where it
    holds the bucket's version (pyarrow reads the local file), else from the bucket
    while the copy downloads.  Close the file with ``close_file``: it lets go of the copy.
    A ``ValueError`` from the cache (a limit smaller than the file) is raised as it is.
    """
    try:
        source, kwargs = _resolve(path, kwargs, owner, cache)
    except FileNotFoundError as exc:
        reraise(exc, f"{owner}: Parquet file {path!r} does not exist ({exc}).")
    except OSError as exc:
        reraise(exc, f"{owner}: {path!r} is not a readable Parquet file: {exc}")
    return _parquet_file(source, path, kwargs, owner)


def _parquet_file(source: Any, path: str, kwargs: dict[str, Any], owner: str) -> Any:
    """``ParquetFile`` over what ``_resolve`` gave; a cached copy is read from its local path
    and kept on the file (``_chute_copy``), a ``RangedFile`` too (``_chute_file``); every file
    opened here has both (``None`` where it has neither)."""
    pq = pyarrow_parquet()
    copy = source if isinstance(source, CopySource) else None
    try:
        pf = pq.ParquetFile(
            source if copy is None else copy.path, **parquet_checks.verified(kwargs)
        )
    except BaseException as exc:
        if copy is not None:
            copy.close()
        if isinstance(exc, FileNotFoundError):
            reraise(exc, f"{owner}: Parquet file {path!r} does not exist ({exc}).")
        if isinstance(exc, (OSError, ValueError)):
            reraise(exc, f"{owner}: {path!r} is not a readable Parquet file: {exc}")
        raise
    pf._chute_copy = copy
    # chute's RangedFile: read_group prefetches through it
    pf._chute_file = source if copy is None and not isinstance(source, str) else None
    return pf


def onto_copy(
    pf: Any, path: str, kwargs: dict[str, Any], owner: str, cache: ShardCache | None
) -> Any:
    """``pf``, or where ``pf`` reads ``path`` from the bucket and ``cache`` now holds the whole
    copy of that version, the copy opened in its place (``pf`` closed)."""
    file = pf._chute_file
    copy = None if file is None else whole_copy(cache, path, file.version)
    if copy is None:
        return pf
    local = {k: v for k, v in kwargs.items() if k != "filesystem"}
    moved = _parquet_file(copy, path, local, owner)
    close_file(pf)
    return moved


def close_file(pf: Any) -> None:
    """Closes a file ``open_file`` opened, and lets go of its cached copy if it read one."""
    pf.close()
    if pf._chute_copy is not None:
        pf._chute_copy.close()


def version_of(pf: Any) -> str | None:
    """The version (ETag, generation) of a file opened through chute's transport (or of the
    object a cached copy holds), else ``None``."""
    file = pf._chute_file if pf._chute_file is not None else pf._chute_copy
    version = None if file is None else file.version
    return None if version is None else str(version)


def check_version(pf: Any, path: str, expected: str | None, owner: str) -> None:
    """Raises ``SourceChangedError`` if ``pf`` is another version of ``path`` than ``expected``."""
    now = version_of(pf)
    if expected is not None and now != expected:
        close_file(pf)
        raise SourceChangedError(
            f"{owner}: {path} changed since the source was built (version {expected} then, "
            f"{now} now), so its rows may no longer be where its index says. Build the "
            "source again to read the new version."
        )


def read_group(
    pf: Any, path: str, group: int, columns: Sequence[str] | None, owner: str
) -> tuple[list[str], list[np.ndarray], int]:
    """Column names and NumPy columns of one row group, as Grain converts them.

    Also returns the row group's size in memory as Arrow data, in bytes.  A page
    whose checksum does not match raises an ``OSError`` saying so; bytes that do not
    decode (a damaged file without checksums) raise as pyarrow's kind, or a ``ValueError``.
    """
    from pyarrow import ArrowException

    file = pf._chute_file
    try:
        if file is not None:
            file.prefetch(group_ranges(pf.metadata.row_group(group), columns))
        table = pf.read_row_group(group, columns=None if columns is None else list(columns))
        converted = [parquet_columns.to_numpy(column) for column in table.columns]
    except (OSError, ValueError, ArrowException) as exc:
        message = f"{owner}: cannot read row group {group} of {path!r}: {exc}"
        if parquet_checks.is_checksum_error(exc):
            message = parquet_checks.corrupt_page(owner, path, group, exc)
        if not isinstance(exc, (OSError, ValueError)):  # pyarrow's own kind
            raise ValueError(message) from exc
        reraise(exc, message)
    finally:
        if file is not None:
            file.forget()
    return table.column_names, converted, table.nbytes


def group_ranges(meta: Any, columns: Sequence[str] | None) -> list[tuple[int, int]]:
    """The ``(offset, length)`` of each column chunk of a row group that ``columns`` reads.

    ``meta`` is the row group's ``RowGroupMetaData``; a nested column's chunks belong to
    its top-level name.
    """
    wanted = None if columns is None else set(columns)
    ranges = []
    for c in range(meta.num_columns):
        chunk = meta.column(c)
        if wanted is not None and chunk.path_in_schema.split(".", 1)[0] not in wanted:
            continue
        start = chunk.data_page_offset
        if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
            start = chunk.dictionary_page_offset
        ranges.append((int(start), int(chunk.total_compressed_size)))
    return ranges


def rows(names: list[str], columns: list[np.ndarray], start: int, stop: int) -> list[Any]:
    """Rows ``start`` to ``stop`` of a converted row group, as dicts."""
    return [dict(zip(names, values)) for values in zip(*[c[start:stop] for c in columns])]


def describe_paths(paths: Sequence[str]) -> str:
    """A stable description of ``paths``: all of a few, or a digest of many."""
    if len(paths) <= 8:
        return repr(list(paths))
    digest = hashlib.sha256("\0".join(paths).encode()).hexdigest()[:16]
    return f"[{paths[0]!r}, ..., {paths[-1]!r}] ({len(paths)} files, sha256 {digest})"


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (str, bytes, int, float))


def describe_kwargs(kwargs: dict[str, Any]) -> str:
    """``, k=v`` for each keyword, stable: objects show as ``<TypeName>``."""
    parts = [
        f", {k}={v!r}" if _plain(v) else f", {k}=<{type(v).__name__}>"
        for k, v in sorted(kwargs.items())
    ]
    return "".join(parts)
