"""The manifest that ``chute convert`` writes beside its shards, and what a rerun does.

``OUTPUT_PREFIX.manifest.json`` records what the shards were converted from:
the input's files (their number, total size, and a digest of their paths,
sizes and modification times), the format, serializer, writer options and
shard count.  A rerun compares it with the input as it is now:

* nothing at OUTPUT_PREFIX: convert;
* the same input, all shards there: nothing to do;
* the same input (or no manifest yet), only some of the shards there (a run
  killed while renaming its shards): convert again;
* anything else (another input, changed files, other options, shards of
  another ``--num-shards``, shards with no manifest): refuse, unless
  ``--overwrite``, which writes the new shards under other names and only
  then replaces the old ones (and removes the old shards of other counts).

The same rules hold for an OUTPUT_PREFIX in a bucket: ``chute._cli.convert_bucket``
lists its shards and reads its manifest into a ``Found`` and passes it to ``plan``.

>>> differences({"format": "npy", "num_shards": 2}, {"format": "npy", "num_shards": 4})
['--num-shards 2 then, 4 now']
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chute._cli.errors import CliError
from chute._sources.array_record.paths import shard_sets

__all__ = [
    "Found",
    "Plan",
    "describe_input",
    "differences",
    "found_locally",
    "manifest_bytes",
    "manifest_path",
    "plan",
    "write_manifest",
]

VERSION = 1
_LISTED = 1000  # inputs of at most this many files keep their listing, to name a changed one
_SETTINGS = (("format", "--format"), ("serializer", "--serializer"), ("options", "--options"))


def manifest_path(prefix: str) -> Path:
    """``OUTPUT_PREFIX.manifest.json``."""
    return Path(f"{prefix}.manifest.json")


def _input_files(paths: list[Path], prefix: str) -> list[Path]:
    """The files under ``paths``, less the output's own (an output inside an input folder)."""
    files = []
    for path in paths:
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    own = str(Path(prefix).resolve())
    return [p for p in files if not str(p.resolve()).startswith((own + "-", own + "."))]


def describe_input(paths: list[Path], fmt: str, args: Any) -> dict[str, Any]:
    """What ``convert`` is about to read and how it will write, as the manifest records it."""
    listing: list[list[Any]] = []
    for path in _input_files(paths, args.output_prefix):
        stat = path.stat()
        listing.append([str(path.resolve()), stat.st_size, stat.st_mtime_ns])
    return describe_listing(listing, fmt, args)


def describe_listing(listing: list[list[Any]], fmt: str, args: Any) -> dict[str, Any]:
    """The manifest's account of input files ``[name, size, version]`` and of the settings."""
    digest = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    described = {
        "version": VERSION,
        "input": args.input,
        "format": fmt,
        "serializer": args.serializer,
        "options": args.options,
        "num_shards": args.num_shards,
        "files": len(listing),
        "bytes": sum(size for _, size, _ in listing),
        "digest": digest,
    }
    if len(listing) <= _LISTED:
        described["listing"] = listing
    return described


def _changed_file(then: list[list[Any]], now: list[list[Any]]) -> str:
    old = {path: (size, mtime) for path, size, mtime in then}
    new = {path: (size, mtime) for path, size, mtime in now}
    for path in sorted(old.keys() | new.keys()):
        if path not in new:
            return f"{path} is gone"
        if path not in old:
            return f"{path} is new"
        if old[path] != new[path]:
            what = "size" if old[path][0] != new[path][0] else "modification time"
            return f"{path} changed ({what})"
    return "the input's files changed"


def differences(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How the input and settings recorded ``then`` differ from those ``now``."""
    found = [
        f"{flag} {then.get(key)} then, {now.get(key)} now"
        for key, flag in (*_SETTINGS, ("num_shards", "--num-shards"))
        if then.get(key) != now.get(key)
    ]
    if then.get("digest") != now.get("digest"):
        if "listing" in then and "listing" in now:
            found.append(_changed_file(then["listing"], now["listing"]))
        else:
            counts = f"{then.get('files')} files of {then.get('bytes')} bytes then"
            found.append(f"{counts}, {now['files']} of {now['bytes']} now")
    return found


@dataclass
class Plan:
    """What ``convert`` does at OUTPUT_PREFIX: ``skip``, ``write`` or ``replace``."""

    action: str
    stale: list[str] = field(default_factory=list)  # old shards that the new ones replace


@dataclass
class Found:
    """What is at OUTPUT_PREFIX now: its shards, and the manifest's content (``None``: none)."""

    shards: list[str]
    recorded: dict[str, Any] | None
    manifest_name: str


def found_locally(prefix: str) -> Found:
    """The shards and the manifest in the local folder of ``prefix``."""
    shards = [f for files in shard_sets(prefix).values() for f in files]
    path = manifest_path(prefix)
    return Found(shards, _recorded(path), path.name)


def _recorded(path: Path) -> dict[str, Any] | None:
    try:
        with path.open(encoding="utf-8") as file:
            recorded = json.load(file)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: differs from any input
    return recorded if isinstance(recorded, dict) else {}


def plan(
    prefix: str,
    targets: list[str],
    now: dict[str, Any],
    overwrite: bool,
    found: Found | None = None,
) -> Plan:
    """What to do at ``prefix``, whose shards will be ``targets``; refuses with a ``CliError``.

    ``found`` is what is at ``prefix`` (``found_locally(prefix)`` when not given).
    """
    found = found if found is not None else found_locally(prefix)
    existing = found.shards
    others = [f for f in existing if f not in targets]
    if not existing:
        return Plan("write")
    if overwrite:
        return Plan("replace", stale=others)
    then = found.recorded
    changes = differences(then, now) if then is not None else []
    if not others and not changes and len(existing) < len(targets):
        return Plan("write")  # a run killed while renaming its shards: convert again
    if not others and not changes and then is not None:
        return Plan("skip")
    if then is None:
        reason = f"no manifest ({found.manifest_name}) says what they were converted from"
    elif changes:
        reason = f"they were converted from another input or with other options: {changes[0]}"
    else:
        reason = f"shards of another --num-shards are there ({os.path.basename(others[0])})"
    raise CliError(
        f"{prefix}: {len(existing)} shard(s) exist, but {reason}; pass --overwrite to "
        "replace them, or choose another OUTPUT_PREFIX"
    )


def manifest_bytes(described: dict[str, Any], records: int) -> bytes:
    """The manifest's content: ``described`` and the number of ``records`` written."""
    return (json.dumps({**described, "records": records}, indent=1) + "\n").encode()


def write_manifest(prefix: str, described: dict[str, Any], records: int) -> None:
    """Writes the manifest atomically (a temporary file renamed over the old one)."""
    path = manifest_path(prefix)
    temp = path.with_name(path.name + ".tmp")
    temp.write_bytes(manifest_bytes(described, records))
    os.replace(temp, path)
