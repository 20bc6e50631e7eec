"""``chute convert INPUT OUTPUT_PREFIX`` into a local folder: the shards, the manifest, the index.

For OUTPUT_PREFIX ``out/train`` and N shards, the writes come in this order:

1. ``train.manifest.json`` and ``train.chute-index`` are removed (with ``--overwrite``,
   only once step 2 is done), so that nothing vouches for shards being written.
2. The shards are written under temporary names, flushed to disk and renamed to
   their final names once all are complete (``write_array_record``); with
   ``--overwrite`` they are written as ``.train.overwrite-*`` and then replace the old
   shards, whose other ``--num-shards`` are removed.
3. The manifest is written (a temporary file renamed), then the index.

A failed write (a full disk, a file size limit) is one line naming the file, the
cause and what to do (``chute._cli.errors.write_failure``), and leaves no shard
under a final name and no manifest or index; when ``--overwrite`` fails in step 2
before any old shard was replaced, the old set stays as it was, index and all.  An
index that cannot be written is only a note: ``chute index`` writes it later.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from chute._cli.errors import CliError, write_failure
from chute._cli.manifest import Plan, manifest_path, write_manifest
from chute._sources.array_record.index import SUFFIX, write_index
from chute._sources.array_record.paths import shard_sets
from chute._sources.array_record.writer import write_array_record

__all__ = ["check_output", "write_index_or_note", "write_shards"]


class Counted(Protocol):
    """Records that count themselves as they are read (``convert``'s progress bar)."""

    count: int

    def __iter__(self) -> Iterator[bytes]: ...


def check_output(prefix: str) -> str:
    """``prefix`` once its folder exists and is writable, else a ``CliError``."""
    path = Path(prefix)
    if prefix.endswith(("/", os.sep)) or path.is_dir():
        raise CliError(
            f"{prefix}: OUTPUT_PREFIX is a folder; give a file-name prefix inside it, "
            f"e.g. {path / 'data'}"
        )
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(
            f"{folder}: cannot create the output folder ({exc.strerror}); "
            "choose an OUTPUT_PREFIX in a writable folder"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CliError(
            f"{folder}: the output folder is not writable; choose another OUTPUT_PREFIX "
            "or fix the folder's permissions"
        )
    return str(path)


def _staging(prefix: str) -> str:
    """Where ``--overwrite`` writes the new shards before they replace the old ones."""
    folder, name = os.path.split(prefix)
    return os.path.join(folder, f".{name}.overwrite")


def _unclaim(prefix: str) -> None:
    """Removes the manifest and the index, which vouch for the shards at ``prefix``."""
    manifest_path(prefix).unlink(missing_ok=True)
    Path(prefix + SUFFIX).unlink(missing_ok=True)


def _discard(paths: Iterable[str | Path]) -> None:
    """Removes what a failed run wrote, as far as it can (the run's error is the one to say)."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)


def write_shards(
    records: Counted,
    prefix: str,
    finals: list[str],
    args: argparse.Namespace,
    todo: Plan,
    described: dict[str, Any],
) -> list[str]:
    """Writes the shards, then the manifest; with ``--overwrite``, the old shards go only
    once the new are done.  A failed write leaves no shard under a final name and no
    manifest or index, and says what failed, why and what to do."""
    replace = todo.action == "replace"
    target = _staging(prefix) if replace else prefix
    published = not replace  # whether the final names may hold this run's shards
    try:
        if replace:  # a killed --overwrite run's: never taken as done
            _discard(f for files in shard_sets(target).values() for f in files)
        else:
            _unclaim(prefix)
        written = write_array_record(
            records, target, num_shards=args.num_shards, options=args.options
        )
        if replace:
            published = True
            _unclaim(prefix)
            for new, final in zip(written, finals):
                os.replace(new, final)
            for old in todo.stale:
                os.remove(old)
        write_manifest(prefix, described, records.count)
        return finals
    except ValueError as exc:
        raise CliError(f"{prefix}: cannot write the shards: {exc}") from None
    except OSError as exc:
        staged = [f for files in shard_sets(target).values() for f in files] if replace else []
        _discard([*staged, f"{manifest_path(prefix)}.tmp"])
        if published:
            _discard(finals)
            _unclaim(prefix)
        left = (
            "No shard was left under its final name."
            if published
            else f"The old shards at {prefix} are as they were."
        )
        raise write_failure(exc, prefix, left) from None


def write_index_or_note(shards: list[str], prefix: str) -> None:
    """The index that opens the set in bounded memory (``ArrayRecordDataSource(index)``)."""
    try:
        write_index(shards, prefix + SUFFIX)
    except (OSError, ValueError) as exc:
        _discard([prefix + SUFFIX + ".tmp"])
        print(f"note: no index written ({exc}); 'chute index {prefix}' writes it")
