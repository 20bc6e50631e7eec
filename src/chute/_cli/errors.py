"""``CliError``: a mistake the user can fix (or a failed write), reported in one line with exit
status 2."""

from __future__ import annotations

import errno
import importlib
from types import ModuleType

__all__ = ["ARRAY_RECORD_MODULE", "CliError", "need", "write_failure"]

ARRAY_RECORD_MODULE = "array_record.python.array_record_module"  # what reads and writes


class CliError(Exception):
    """A problem with the command's input or output, worded for the user.

    ``chute.cli.main`` prints the message on one line to stderr (no
    traceback) and returns exit status 2.  The message names the file and
    what to do about it.
    """


def need(module: str, what: str, install: str) -> ModuleType:
    """Imports an optional ``module``, or raises a ``CliError`` naming the package.

    Args:
        module: The module to import (``"pyarrow.parquet"``).
        what: What needs it, for the message (``"reading Parquet"``).
        install: The package to install (``"pyarrow"``).

    >>> need("json", "reading JSON", "json").__name__
    'json'
    >>> need("no_such_module_here", "reading things", "things")
    Traceback (most recent call last):
    ...
    chute._cli.errors.CliError: reading things needs the things package: pip install things
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise CliError(f"{what} needs the {install} package: pip install {install}") from None


# errno: (what it means, what to do about it)
_WRITE_CAUSES = {
    errno.ENOSPC: (
        "the disk is full",
        "free space on it or choose an OUTPUT_PREFIX on another disk",
    ),
    errno.EDQUOT: ("the disk quota is used up", "free space or choose an OUTPUT_PREFIX elsewhere"),
    errno.EFBIG: (
        "the file grew past the largest size allowed, by ulimit -f or by the filesystem",
        "raise the limit, or pass a larger --num-shards so that each shard is smaller",
    ),
    errno.EROFS: ("the filesystem is read-only", "choose an OUTPUT_PREFIX on a writable one"),
    errno.EACCES: ("permission denied", "fix the folder's permissions or choose another place"),
    errno.EIO: ("the disk reported an I/O error", "check the disk"),
}


def write_failure(exc: OSError, name: str, left: str, full_disk: str | None = None) -> CliError:
    """A failed write (``exc``) as a ``CliError``: the file, the cause and what to do.

    Args:
        exc: The error; its ``filename``, when set, is the file named (else ``name``).
        name: The file or prefix that was being written.
        left: What the failed run left behind, as a sentence.
        full_disk: What to do when the disk is full, instead of the usual advice.

    >>> import errno, os
    >>> error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "out/a-00000-of-00001.array_record")
    >>> print(write_failure(error, "out/a", "Nothing was left under a final name."))
    out/a-00000-of-00001.array_record: cannot write it: No space left on device (the disk is full); free space on it or choose an OUTPUT_PREFIX on another disk, then run the command again. Nothing was left under a final name.
    """  # noqa: E501
    text = exc.strerror or str(exc)
    cause, advice = _WRITE_CAUSES.get(exc.errno or 0, ("", "check the output folder"))
    if full_disk is not None and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = full_disk
    because = f" ({cause})" if cause else ""
    return CliError(
        f"{exc.filename or name}: cannot write it: {text}{because}; {advice}, then run the "
        f"command again. {left}"
    )
