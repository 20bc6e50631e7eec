"""``chute inspect``: what ArrayRecord files (or any input of ``convert``) hold.

Prints the number of files, records and bytes, then the first few records
decoded as well as it can (see ``chute._cli.decode``).  Files whose name does
not say another format are read as ArrayRecord (TFDS names its shards
``name.array_record-00000-of-00010``).  Bucket URLs (an OUTPUT_PREFIX, a quoted
glob, ``PREFIX@N``, one shard) and ``.chute-index`` files are read through chute's
own reader instead (``chute._cli.inspect_indexed``).
"""

from __future__ import annotations

import argparse
import glob
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from chute._cli.decode import describe, human_size, show
from chute._cli.errors import ARRAY_RECORD_MODULE, CliError, need
from chute._cli.inspect_indexed import is_indexed, read_indexed
from chute._cli.readers import READERS, detect_format
from chute._sources.array_record.paths import shard_sets, shard_sets_text
from chute._sources.parquet import checks as parquet_checks

__all__ = ["register", "resolve", "run"]

_MAX_FILES_SHOWN = 10
_SHARD = re.compile(r"^(?P<prefix>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.array_record$")
_SPEC = re.compile(r"(.+)@(\d+)")  # PREFIX@N, as ArrayRecordDataSource takes
_READ_ERRORS = (OSError, ValueError, RuntimeError, EOFError)


@dataclass
class _Summary:
    """What ``inspect`` found: per-file record counts and the first records."""

    counts: list[int] = field(default_factory=list)
    head: list[tuple[str, int | None, str]] = field(default_factory=list)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``inspect`` subcommand."""
    parser = subparsers.add_parser(
        "inspect",
        help="show what ArrayRecord files (or convert's inputs) hold",
        description=(
            "Show the number of files, records and bytes under PATH, and its first records "
            "decoded as well as possible: pickle, JSON, NumPy .npy bytes, UTF-8 text, "
            "msgpack, else a hex preview.  Reads ArrayRecord files, and every input format "
            "of 'chute convert' (TFRecord, Parquet, JSONL, .npy, .npz, image folders, "
            "Hugging Face datasets) as convert would.  ArrayRecord shards in a bucket "
            "(s3://, gs://, az://) and .chute-index files are read with chute's own "
            "reader: only the footers and the chunks of the first records are fetched."
        ),
    )
    parser.add_argument(
        "path",
        metavar="PATH",
        help="a file, a quoted glob, a folder, PREFIX@N, an OUTPUT_PREFIX given to "
        "'chute convert', or an index (PREFIX.chute-index); local, or a bucket URL "
        "(s3://bucket/data/train, 's3://bucket/data/train-*.array_record', ...)",
    )
    parser.add_argument(
        "-n", "--num-records", type=int, default=3, help="records to show (default: 3)"
    )
    parser.add_argument(
        "--max-chars", type=int, default=600, help="characters per record shown (default: 600)"
    )
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load pickles of any class (this runs code from the file); by default only "
        "plain Python, datetime and NumPy values are loaded",
    )
    parser.set_defaults(run=run)


def resolve(spec: str) -> list[Path]:
    """The files ``spec`` names: a file, a glob, a folder, ``PREFIX@N`` or a prefix.

    A folder stands for its ``*.array_record`` files when it has any, else
    for itself (an image folder or a Hugging Face dataset).
    """
    path = Path(spec)
    if glob.has_magic(spec):
        found = [Path(p) for p in glob.glob(spec)]
    elif path.is_file():
        return [path]
    elif path.is_dir():
        return sorted(path.glob("*.array_record")) or [path]
    elif match := _SPEC.fullmatch(spec):
        count, sets = int(match[2]), shard_sets(match[1])
        found = [Path(f) for f in sets.get(count, [])]
        if not found and sets:
            raise CliError(f"{spec}: no such shards; {shard_sets_text(match[1], sets)}")
    else:
        found = [Path(f) for files in shard_sets(spec).values() for f in files]
        found = found or [Path(f"{spec}.array_record")]
    files = sorted(p for p in found if p.exists())
    if not files:
        raise CliError(
            f"{spec}: no such file, and no ArrayRecord files match it as a folder, glob, "
            "PREFIX@N or OUTPUT_PREFIX; check the path"
        )
    return files


def _kind(files: list[Path]) -> str:
    """``array_record``, or the ``convert`` input format that the names say."""
    kinds = set()
    for path in files:
        try:
            kinds.add("array_record" if ".array_record" in path.name else detect_format([path]))
        except CliError:
            if path.is_dir():
                raise
            kinds.add("array_record")
    if len(kinds) > 1:
        raise CliError(f"the files mix formats ({', '.join(sorted(kinds))}); inspect one at a time")
    return kinds.pop()


def _entry(record: bytes, trust: bool) -> tuple[str, int | None, str]:
    kind, text = describe(record, trust_pickle=trust)
    return kind, len(record), text


def _unreadable(path: Path, exc: Exception) -> CliError:
    """The source's error for a file it cannot read, said once (not nested in ours)."""
    text = str(exc).removeprefix("ArrayRecordDataSource: ")
    if "readable ArrayRecord file" in text:
        return CliError(text)
    return CliError(f"{path}: not a readable ArrayRecord file ({text})")


def _array_record(files: list[Path], want: int, trust: bool) -> _Summary:
    from chute._sources.array_record.source import ArrayRecordDataSource

    summary = _Summary()
    for path in files:
        try:
            source = ArrayRecordDataSource(str(path))
        except _READ_ERRORS as exc:
            if "no records" not in str(exc):  # the source refuses files without records
                raise _unreadable(path, exc) from None
            summary.counts.append(0)
            continue
        with source:
            summary.counts.append(len(source))
            for i in range(min(want - len(summary.head), len(source))):
                try:
                    record = source[i]
                except _READ_ERRORS as exc:
                    raise CliError(f"{path}: cannot read record {i} ({exc})") from None
                summary.head.append(_entry(record, trust))
    return summary


def _rows(files: list[Path], fmt: str, want: int, trust: bool) -> _Summary:
    """Like ``convert`` reads them: the rows of each file, counted, and the first shown."""
    summary = _Summary()
    for path in files:
        rows, total = READERS[fmt]([path])
        head = list(itertools.islice(rows, max(0, want - len(summary.head))))
        for row in head:
            if isinstance(row, bytes):
                summary.head.append(_entry(row, trust))
            else:
                summary.head.append((f"{fmt} row", None, show(row)))
        summary.counts.append(len(head) + sum(1 for _ in rows) if total is None else total)
    return summary


def _missing_shards(files: list[Path] | list[str]) -> list[str]:
    """Warnings for ``convert`` outputs with shards missing (deleted, or a run killed
    while renaming its finished shards)."""
    found: dict[tuple[str, int], int] = {}
    for path in files:
        match = _SHARD.match(str(path))
        if match:
            key = (match["prefix"], int(match["count"]))
            found[key] = found.get(key, 0) + 1
    return [
        f"warning: only {n} of the {count} shards of {prefix} are there; rerun "
        "'chute convert' to write them all"
        for (prefix, count), n in found.items()
        if n < count
    ]


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(+{len(text) - limit} chars)"


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _print(spec: str, files: list[Path] | list[str], summary: _Summary, limit: int,
           sizes: list[int]) -> None:  # fmt: skip
    total = sum(summary.counts)
    print(f"{spec}: {len(files)} file(s), {total} record(s), {human_size(sum(sizes))}")
    shown = list(zip(files, summary.counts, sizes))[:_MAX_FILES_SHOWN]
    for path, count, size in shown:
        print(f"  {path}: {count} record(s), {human_size(size)}")
    if len(files) > len(shown):
        print(f"  ... and {len(files) - len(shown)} more file(s)")
    for warning in _missing_shards(files):
        print(warning)
    if summary.head:
        print(f"first {len(summary.head)} record(s):")
    for i, (kind, nbytes, text) in enumerate(summary.head):
        length = f", {nbytes} bytes" if nbytes is not None else ""
        body = _cut(text, limit).replace("\n", "\n    ")
        print(f"  [{i}] {kind}{length}:\n    {body}")


def run(args: argparse.Namespace) -> int:
    """Runs ``chute inspect`` with parsed ``args``; returns the exit status."""
    if args.num_records < 0 or args.max_chars < 1:
        raise CliError("--num-records must be 0 or more and --max-chars 1 or more")
    if is_indexed(args.path):  # chute's own reader: no array_record needed
        found = read_indexed(args.path, args.num_records)
        head = [_entry(record, args.trust_pickle) for record in found.head]
        summary = _Summary(found.counts, head)
        _print(args.path, found.files, summary, args.max_chars, found.sizes)
        return 0
    files = resolve(args.path)
    fmt = _kind(files)
    if fmt == "array_record":
        need(ARRAY_RECORD_MODULE, "reading ArrayRecord files", "array_record")
        summary = _array_record(files, args.num_records, args.trust_pickle)
    else:
        summary = _rows(files, fmt, args.num_records, args.trust_pickle)
    _print(args.path, files, summary, args.max_chars, [_size(path) for path in files])
    if fmt == "parquet":
        _note_unchecked(files)
    return 0


def _note_unchecked(files: list[Path]) -> None:
    """Says once which Parquet files carry no page checksums, so their damage goes unseen."""
    pq = need("pyarrow.parquet", "reading Parquet", "pyarrow")
    unchecked = []
    for path in files:
        try:
            found = parquet_checks.local_has_page_checksums(str(path), pq.read_metadata(path))
        except _READ_ERRORS as exc:
            raise CliError(f"{path}: not a readable Parquet file ({exc}); check the file") from None
        if found is False:
            unchecked.append(str(path))
    note = parquet_checks.unchecked_note(unchecked, len(files))
    if note is not None:
        print(note)
