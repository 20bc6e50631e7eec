"""array_record's C++ reader and writer, loaded lazily, and the fork hazard they leave.

Once either has run in a process, forking that process is unsafe: array_record
starts native threads (a pool of about 64 when a reader opens) and a forked
child that then reads crashes or spins in them (seen in every fork after a
write, and in most after a read). ``native_class`` records that the library is
about to run, and the hazard it registers makes chute start workers from the
fork server from then on.
"""

from __future__ import annotations

import importlib
from typing import Any

from chute._execution.processes import add_fork_hazard

__all__ = ["native_class", "native_module"]

_used = False  # array_record's C++ code has run in this process


def native_class(name: str, what: str) -> Any:
    """``ArrayRecordReader`` or ``ArrayRecordWriter``, for ``what`` (named in the error
    when array_record is not installed); marks this process unsafe to fork."""
    global _used
    module = native_module(what)
    _used = True
    return getattr(module, name)


def native_module(what: str) -> Any:
    """array_record's module (importing it starts nothing), or an ImportError naming the
    extra that ``what`` needs."""
    try:
        module = importlib.import_module("array_record.python.array_record_module")
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the array_record package: pip install chute[array_record]"
        ) from exc
    return module


def _hazard() -> str | None:
    if _used:
        return "array_record's reader or writer ran here (a forked worker crashes in its threads)"
    return None


add_fork_hazard(_hazard)
