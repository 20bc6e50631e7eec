"""What chute's Parquet readers share: pyarrow, paths, opening files, rows.

pyarrow is an extra (``pip install chute[parquet]``), imported only when a
Parquet reader is built.

**Where files can live.**  A path is a local path, or a URL that
``pyarrow.fs.FileSystem.from_uri`` understands (``file://``, ``s3://``,
``gs://``, ``hdfs://``, ``abfs://``), or any other URL that fsspec
understands (``memory://``, ``http://``, ...; needs fsspec installed).  A
``filesystem=`` keyword (a ``pyarrow.fs.FileSystem`` or an fsspec
filesystem) takes paths inside that filesystem instead.

**Records.**  Rows are converted as Grain converts them: each column of a row
group becomes a NumPy array (``pyarrow.ChunkedArray.to_numpy()``) and a row is
the dict of its values, column name to value: NumPy scalars for numbers,
dates and times, ``str`` and ``bytes``, NumPy arrays for lists, dicts for
structs, ``None`` for nulls (``nan``/``NaT`` in number and time columns that
hold nulls in that row group).
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np


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


def _resolve(path: str, kwargs: dict[str, Any], owner: str) -> tuple[str, dict[str, Any]]:
    """The path and keywords for ``ParquetFile``: URLs resolved to a filesystem."""
    if "filesystem" in kwargs or "://" not in path:
        return path, kwargs
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


def reraise(exc: BaseException, message: str) -> None:
    """Raises ``message`` as the builtin kind of ``exc``, chained to it."""
    for kind in (FileNotFoundError, PermissionError, IsADirectoryError, ValueError, OSError):
        if isinstance(exc, kind):
            raise kind(message) from exc
    raise exc


def open_file(path: str, kwargs: dict[str, Any], owner: str) -> Any:
    """``pyarrow.parquet.ParquetFile(path)``, with errors that name the file."""
    pq = pyarrow_parquet()
    source, kwargs = _resolve(path, kwargs, owner)
    try:
        return pq.ParquetFile(source, **kwargs)
    except FileNotFoundError as exc:
        reraise(exc, f"{owner}: Parquet file {path!r} does not exist ({exc}).")
    except (OSError, ValueError) as exc:
        reraise(exc, f"{owner}: {path!r} is not a readable Parquet file: {exc}")
    raise AssertionError("unreachable")  # pragma: no cover


def read_group(
    pf: Any, path: str, group: int, columns: Sequence[str] | None, owner: str
) -> tuple[list[str], list[np.ndarray], int]:
    """Column names and NumPy columns of one row group, as Grain converts them.

    Also returns the row group's size in memory as Arrow data, in bytes.
    """
    try:
        table = pf.read_row_group(group, columns=None if columns is None else list(columns))
    except (OSError, ValueError) as exc:
        reraise(exc, f"{owner}: cannot read row group {group} of {path!r}: {exc}")
    return table.column_names, [column.to_numpy() for column in table.columns], table.nbytes


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
