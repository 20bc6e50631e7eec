"""``write_array_record``: records into sharded ArrayRecord files, atomically.

Each shard is written under a temporary name (the final name plus ``.tmp``),
flushed to disk, and renamed to its final name only once every shard is
complete.  A run that fails (the iterable raises, the disk fills up, the
process dies) therefore never leaves a half-written file under a final name;
the next run overwrites its temporary files.  A failure to write (a full disk,
a file size limit) raises an ``OSError`` with the system's errno
(``errno.ENOSPC``, ``errno.EFBIG``, ...) whose ``filename`` is the shard's final
name; the temporary files are removed.  A run whose final files all
exist already writes nothing, so a conversion script can simply be run again.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from chute._core.progress import bar_type
from chute._core.validate import check_int
from chute._sources.array_record.native import native_class

__all__ = ["write_array_record"]

_WHAT = "write_array_record"
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EIO)


def _writer_class() -> Any:
    return native_class("ArrayRecordWriter", _WHAT)


def _encoder(serializer: Callable[[Any], bytes] | None) -> Callable[[Any, int], bytes]:
    """A function from (record, index) to the bytes to store."""

    def encode(record: Any, k: int) -> bytes:
        if isinstance(record, bytes):
            return record
        if isinstance(record, str):
            return record.encode("utf-8")
        if isinstance(record, (bytearray, memoryview)):
            return bytes(record)
        if serializer is None:
            raise TypeError(
                f"{_WHAT}: record {k} is a {type(record).__name__}, not bytes or str; pass "
                "serializer=... to turn records into bytes (for example pickle.dumps, or "
                "lambda a: a.tobytes() for NumPy arrays)."
            )
        out = serializer(record)
        if not isinstance(out, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"{_WHAT}: serializer returned a {type(out).__name__} for record {k}; it must "
                "return bytes."
            )
        return bytes(out)

    return encode


def _progress(records: Iterable[Any], show: bool) -> Iterator[Any]:
    if not show:
        return iter(records)
    bar = bar_type()
    if bar is None:
        raise ImportError(f"{_WHAT}(progress=True) needs tqdm: pip install chute[cli]")
    total = len(records) if hasattr(records, "__len__") else None  # type: ignore[arg-type]
    return iter(bar(records, total=total, unit=" records", desc="write_array_record"))


def _sync(path: str) -> None:
    """Flushes a closed file's data to disk, so that the rename never exposes a torn file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_error(exc: Exception, temp: str) -> OSError:
    """``exc``, a failure to write ``temp``, as an ``OSError`` with its errno, naming the shard.

    array_record's writer raises a ``RuntimeError`` whose text holds the system's
    ``strerror`` (``write() failed: No space left on device; ...``); its errno is the
    one whose ``os.strerror`` the text holds.
    """
    final = temp.removesuffix(".tmp")
    if isinstance(exc, OSError) and exc.errno is not None:
        return OSError(exc.errno, exc.strerror or str(exc), final)
    code = next((c for c in _WRITE_ERRNOS if os.strerror(c) in str(exc)), None)
    return OSError(code, str(exc) if code is None else os.strerror(code), final)


def _open_writers(temps: list[str], options: str) -> list[Any]:
    """One array_record writer per temporary file; none is left open if one fails."""
    cls = _writer_class()
    writers: list[Any] = []
    try:
        for temp in temps:
            try:
                writer = cls(temp, options)
            except ValueError as exc:
                raise ValueError(f"{_WHAT}: bad options {options!r}: {exc}") from exc
            if not writer.ok():
                try:
                    writer.close()
                except RuntimeError as exc:
                    raise OSError(f"{_WHAT}: cannot create {temp!r}: {exc}") from exc
            writers.append(writer)
    except BaseException:
        _close_quietly(writers)
        raise
    return writers


def _close_quietly(writers: list[Any]) -> None:
    """Closes ``writers`` after a failure, whose error is the one to report."""
    for writer in writers:
        try:
            writer.close()
        except (RuntimeError, OSError):
            pass


def _write_shards(
    records: Iterator[Any], temps: list[str], options: str, encode: Callable[[Any, int], bytes]
) -> None:
    """Writes the records round robin into ``temps``, closes and syncs them.

    A failure to write (a full disk, a file size limit) raises an ``OSError`` with
    its errno that names the shard (``_write_error``).
    """
    writers = _open_writers(temps, options)
    closed = 0
    try:
        n = len(writers)
        for k, record in enumerate(records):
            data = encode(record, k)
            try:
                writers[k % n].write(data)
            except (RuntimeError, OSError) as exc:
                raise _write_error(exc, temps[k % n]) from exc
        for temp, writer in zip(temps, writers):
            closed += 1
            try:
                writer.close()  # closing flushes; a full disk often shows here
            except (RuntimeError, OSError) as exc:
                raise _write_error(exc, temp) from exc
    finally:
        _close_quietly(writers[closed:])
    for temp in temps:
        try:
            _sync(temp)
        except OSError as exc:
            raise _write_error(exc, temp) from exc


def write_array_record(
    records: Iterable[Any],
    path: str | os.PathLike[str],
    *,
    num_shards: int = 1,
    serializer: Callable[[Any], bytes] | None = None,
    options: str = "group_size:1",
    progress: bool = False,
) -> list[str]:
    """Writes ``records`` into ``num_shards`` ArrayRecord files; returns their paths.

    Shard ``i`` is ``f"{path}-{i:05d}-of-{num_shards:05d}.array_record"`` and
    holds records ``i, i + num_shards, ...``, so the records are streamed
    once and their number need not be known.  ``ArrayRecordDataSource`` reads
    the shards back, in order, from the returned list or from
    ``f"{path}@{num_shards}"``; read that way, record ``k`` of the dataset is
    not record ``k`` of the stream unless ``num_shards`` is 1.

    ``bytes`` are stored as they are and ``str`` as UTF-8; anything else goes
    through ``serializer``.  The default ``options`` (``group_size:1``: one
    record per chunk) are what fast random access needs; other writer options
    of array_record (``zstd:9``, ``uncompressed``, ...) can be added to them.

    The write is atomic and resumable: see the module docstring.

    Args:
        records: Any iterable of records, consumed once.
        path: The prefix of the shard names; missing directories are created.
        num_shards: How many files to write (at least 1).
        serializer: Turns a record that is not ``bytes`` or ``str`` into bytes.
        options: array_record writer options.
        progress: Show a tqdm progress bar.

    Returns:
        The shards' paths, in order.

    >>> import tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "numbers")
    >>> files = write_array_record((str(i) for i in range(5)), out, num_shards=2)
    >>> [os.path.basename(f) for f in files]
    ['numbers-00000-of-00002.array_record', 'numbers-00001-of-00002.array_record']
    >>> write_array_record(iter([]), out, num_shards=2) == files  # done already: nothing written
    True
    """
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{_WHAT}: path must be a str or a pathlib.Path (got {path!r}).")
    num_shards = check_int(num_shards, f"{_WHAT}: num_shards", minimum=1)
    if serializer is not None and not callable(serializer):
        raise TypeError(f"{_WHAT}: serializer must be callable (got {serializer!r}).")
    if not isinstance(options, str):
        raise TypeError(f"{_WHAT}: options must be a str like 'group_size:1' (got {options!r}).")
    prefix = os.fspath(path)
    finals = [f"{prefix}-{i:05d}-of-{num_shards:05d}.array_record" for i in range(num_shards)]
    if all(os.path.isfile(f) for f in finals):
        return finals
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    temps = [f + ".tmp" for f in finals]
    try:
        _write_shards(_progress(records, progress), temps, options, _encoder(serializer))
    except BaseException:
        for temp in temps:
            if os.path.isfile(temp):
                os.remove(temp)
        raise
    for temp, final in zip(temps, finals):
        os.replace(temp, final)
    return finals
