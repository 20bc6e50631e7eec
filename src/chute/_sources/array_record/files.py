"""The files an ``ArrayRecordDataSource`` reads: found, counted, opened, and told apart.

``resolve`` turns the paths given into ``(file, start, stop, sliced)`` entries,
counting the records of whole files, and takes each file's identity (size,
modification time, inode) before it is opened, so that every process reads a file
only while it is the one counted (``file_identity``, ``how_changed``).
``options_string`` merges the options given into chute's defaults;
``open_reader`` opens array_record's reader with them, or raises an error that
names the file and what is wrong with it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chute._remote.ranged_source import LocalRanges
from chute._sources.array_record.native import native_class, native_module
from chute._sources.array_record.paths import expand
from chute._sources.array_record.ranged import RangedArrayRecordReader

__all__ = ["file_identity", "how_changed", "open_reader", "options_string", "resolve"]

logger = logging.getLogger("chute")
_WHAT = "ArrayRecordDataSource"
# Random access reads one record at a time: reading ahead only wastes work.
# These are the options that array_record's own documentation gives for it.
_DEFAULT_OPTIONS = {"readahead_buffer_size": "0", "max_parallelism": "0"}
_DEFAULT_STRING = ",".join(f"{k}:{v}" for k, v in _DEFAULT_OPTIONS.items())
_GROUP = re.compile(r"(?:^|,)group_size:(\d+)")


def _reader_class() -> Any:
    return native_class("ArrayRecordReader", _WHAT)


def options_string(options: object) -> str:
    """array_record's option string: chute's defaults, overridden by ``options``."""
    if options is None:
        given: dict[str, str] = {}
    elif isinstance(options, str):
        pairs = [p.split(":", 1) for p in options.split(",") if p.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ValueError(
                f"{_WHAT}: reader_options must be 'name:value' pairs separated by commas, "
                f"like 'readahead_buffer_size:0,max_parallelism:0' (got {options!r})."
            )
        given = {k.strip(): v.strip() for k, v in pairs}
    elif isinstance(options, Mapping):
        given = {str(k): str(v) for k, v in options.items()}
    else:
        raise TypeError(
            f"{_WHAT}: reader_options must be a str like 'readahead_buffer_size:0' or a dict "
            f"of str (got {options!r} that is a {type(options).__name__})."
        )
    return ",".join(f"{k}:{v}" for k, v in {**_DEFAULT_OPTIONS, **given}.items())


def open_reader(path: str, options: str) -> Any:
    """An open reader for ``path``, or an error that names the file and what is wrong."""
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"{_WHAT}: {path!r} is a directory; pass the files in it, for example "
            f"{os.path.join(path, '*.array_record')!r}."
        )
    if not os.path.exists(path):
        raise FileNotFoundError(f"{_WHAT}: no such file: {path!r}.")
    try:
        reader = _reader_class()(path, options)
    except ValueError as exc:
        raise ValueError(f"{_WHAT}: bad reader_options {options!r}: {exc}") from exc
    if not reader.ok():
        try:
            reader.close()
            reason = "the reader failed"
        except RuntimeError as exc:
            reason = str(exc)
        raise ValueError(
            f"{_WHAT}: {path!r} is not a readable ArrayRecord file (truncated, corrupt or "
            f"another format): {reason}"
        )
    return reader


def file_identity(path: str) -> tuple[int, int, int]:
    """(size, modification time in ns, inode) of a file, to tell whether it changed or was
    replaced; (-1, -1, -1) if it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1, -1)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def how_changed(before: tuple[int, int, int], now: tuple[int, int, int]) -> str:
    """What differs between two identities of a file, in words."""
    if now[0] < 0:
        return "now gone"
    sizes = f"{before[0]} bytes then, {now[0]} bytes now" if now[0] != before[0] else ""
    if now[2] != before[2]:
        return "replaced by another file" + (f": {sizes}" if sizes else "")
    return sizes or f"modified, still {now[0]} bytes"


def _count(path: str, options: str) -> int:
    """The records in ``path``; logs a warning if its chunks hold more than one record.

    chute's own footer parser counts, so that making a source starts no native
    threads and its workers can still be forked; array_record's reader counts
    where that parser cannot (a compressed footer without cramjam), and names
    what is wrong with a file that is not readable.
    """
    native_module(_WHAT)  # array_record must be installed to read the records later
    counted = _count_by_footer(path) if options == _DEFAULT_STRING else None
    if counted is None:  # given options are checked by opening the file with them
        reader = open_reader(path, options)
        try:
            counted = int(reader.num_records()), reader.writer_options_string() or ""
        finally:
            reader.close()
    records, writer_options = counted
    group = _GROUP.search(writer_options)
    if group and group[1] != "1":
        logger.warning(
            "%s: %s was written with group_size:%s, so every random read decodes that "
            "many records; rewrite it with group_size:1 (write_array_record's default).",
            _WHAT,
            path,
            group[1],
        )
    return records


def _count_by_footer(path: str) -> tuple[int, str] | None:
    """(records, writer options) of ``path`` from its footer, or None where chute's own
    parser cannot read it (array_record's reader then counts, or says what is wrong)."""
    try:
        with LocalRanges(path) as source:
            reader = RangedArrayRecordReader(source, cache_bytes=0)
            return len(reader), reader.writer_options
    except Exception:
        return None


def _entry(path: object) -> list[tuple[str, int | None, int | None]]:
    if isinstance(path, (str, os.PathLike)):
        return expand(os.fspath(path))
    if all(hasattr(path, a) for a in ("filename", "skip", "take")):
        skip, take = int(path.skip), int(path.take)  # type: ignore[attr-defined]
        return [(os.fspath(path.filename), skip, skip + take)]  # type: ignore[attr-defined]
    raise TypeError(
        f"{_WHAT}: a path must be a str, a pathlib.Path or a FileInstruction (an object with "
        f"filename, skip and take); got {path!r} that is a {type(path).__name__}."
    )


def resolve(
    paths: Any, options: str
) -> tuple[list[tuple[str, int, int, bool]], dict[str, tuple[int, int, int]]]:
    """``(file, start, stop, sliced)`` for every file, counting the records of whole files,
    and each file's identity, taken before it is opened to count."""
    single = isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Sequence)
    entries = [e for p in ([paths] if single else paths) for e in _entry(p)]
    if not entries:
        raise ValueError(
            f"Paths sequence can not be of 0 length. chute: {_WHAT}: paths is empty; pass at "
            "least one file."
        )
    identity = {f: file_identity(f) for f, _, _ in entries}
    whole = [f for f, start, _ in entries if start is None]
    with ThreadPoolExecutor(min(32, max(1, len(whole)))) as pool:
        counts = dict(zip(whole, pool.map(lambda f: _count(f, options), whole)))
    out = []
    for f, start, stop in entries:
        sliced = start is not None and stop is not None
        if start is None or stop is None:
            start, stop = 0, counts[f]
        elif not os.path.isfile(f):
            open_reader(f, options)  # raises the error that says what is wrong
        if not 0 <= start <= stop:
            raise ValueError(
                f"{_WHAT}: the record range [{start}:{stop}] of {f!r} is not a range; "
                "give 0 <= start <= stop."
            )
        out.append((f, start, stop, sliced))
    return out, identity
