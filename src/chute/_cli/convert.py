"""``chute convert``: rows of Parquet, JSONL, NumPy, images, TFRecord or a Hugging
Face dataset into ArrayRecord shards (the record format is in ``chute.cli``), in a
local folder (see ``convert_local``: the order of the writes, and what a failed write
leaves) or a bucket (``s3://``, ``gs://``, ``az://``: see ``convert_bucket``)."""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import Iterator
from typing import Any

from chute._cli import bucket_input, convert_bucket, convert_local
from chute._cli.bucket import check_prefix, is_bucket_url
from chute._cli.bucket import sizes as object_sizes
from chute._cli.decode import human_size
from chute._cli.errors import ARRAY_RECORD_MODULE, CliError, need
from chute._cli.manifest import Found, describe_input, plan
from chute._cli.readers import FORMATS, READERS, detect_format, notes, resolve_inputs
from chute._cli.records import SERIALIZERS, encoder
from chute._core.progress import bar_type
from chute._sources.array_record.index import SUFFIX

__all__ = ["register", "run", "shard_paths"]

DEFAULT_OPTIONS = "group_size:1"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1 (got {text!r})")
    return value


def register(subparsers: argparse._SubParsersAction, epilog: str) -> None:
    """Adds the ``convert`` subcommand, whose help ends with ``epilog``."""
    parser = subparsers.add_parser(
        "convert",
        help="convert a data set into ArrayRecord shards",
        description="Convert a data set into ArrayRecord shards, one record per row.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "input",
        metavar="INPUT",
        help="a file, a folder or a quoted glob; or a bucket URL, glob or prefix of "
        "Parquet, JSON Lines or TFRecord objects",
    )
    parser.add_argument(
        "output_prefix",
        metavar="OUTPUT_PREFIX",
        help="where to write: OUTPUT_PREFIX-00000-of-0000N.array_record, ...; a local "
        "path or a bucket URL (s3://bucket/data/train, gs://..., az://...)",
    )
    parser.add_argument(
        "--format", default="auto", choices=("auto", *FORMATS), help="input format (default: auto)"
    )
    parser.add_argument(
        "--num-shards", type=_positive, default=1, help="number of output files (default: 1)"
    )
    parser.add_argument(
        "--serializer",
        default="pickle",
        choices=SERIALIZERS,
        help="how rows that are not bytes become records (default: pickle)",
    )
    parser.add_argument(
        "--options",
        default=DEFAULT_OPTIONS,
        help=f"ArrayRecord writer options (default: {DEFAULT_OPTIONS!r}, for fast random access)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the shards at OUTPUT_PREFIX, whatever they were converted from",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    parser.set_defaults(run=run)


def shard_paths(prefix: str, num_shards: int) -> list[str]:
    """The files ``convert`` writes for ``prefix``.

    >>> shard_paths("out/train", 2)
    ['out/train-00000-of-00002.array_record', 'out/train-00001-of-00002.array_record']
    """
    return [f"{prefix}-{i:05d}-of-{num_shards:05d}.array_record" for i in range(num_shards)]


class _Progress:
    """Iterates over ``records``, counting them, with a tqdm bar on stderr.

    The bar shows when tqdm is installed, ``hide`` is false and stderr is a
    terminal.
    """

    def __init__(self, records: Iterator[bytes], total: int | None, hide: bool) -> None:
        self.records, self.total, self.hide, self.count = records, total, hide, 0

    def __iter__(self) -> Iterator[bytes]:
        bar = self._bar()
        try:
            for record in self.records:
                self.count += 1
                yield record
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    def _bar(self) -> Any:
        if self.hide:
            return None
        bar = bar_type()
        return None if bar is None else bar(total=self.total, unit=" records", disable=None)


def _first_and_rest(records: Iterator[bytes], source: str) -> Iterator[bytes]:
    """``records`` whole, after checking that there is at least one."""
    first = next(records, None)
    if first is None:
        raise CliError(f"{source}: has no records; nothing to convert, check the input")
    return itertools.chain([first], records)


def _check_shard_count(total: int | None, num_shards: int, source: str) -> None:
    if total is not None and 0 < total < num_shards:
        raise CliError(
            f"{source}: --num-shards {num_shards} is more than its {total} records, which "
            f"would leave shards empty; use --num-shards {total} or fewer"
        )


def _report(lead: str, shards: list[str], sizes: list[int] | None = None) -> None:
    """The shards and their total size; each one's size too for a bucket's (``sizes``)."""
    each = sizes if sizes is not None else [os.path.getsize(p) for p in shards]
    print(f"{lead} {len(shards)} shard(s), {human_size(sum(each))}:")
    for path, size in zip(shards, each):
        print(f"  {path} ({human_size(size)})" if sizes is not None else f"  {path}")


def run(args: argparse.Namespace) -> int:
    """Runs ``chute convert`` with parsed ``args``; returns the exit status."""
    need(ARRAY_RECORD_MODULE, "writing ArrayRecord files", "array_record")  # before any work
    from_bucket = is_bucket_url(args.input)
    if from_bucket:  # Parquet, JSON Lines or TFRecord objects, read where they lie
        urls = bucket_input.resolve(args.input)
        fmt = bucket_input.detect(urls, args.format)
    else:
        paths = resolve_inputs(args.input)
        fmt = detect_format(paths, args.format)
    remote = is_bucket_url(args.output_prefix)
    prefix = (
        check_prefix(args.output_prefix)
        if remote
        else convert_local.check_output(args.output_prefix)
    )
    shards = shard_paths(prefix, args.num_shards)
    described = (
        bucket_input.describe(urls, fmt, args) if from_bucket else describe_input(paths, fmt, args)
    )
    found: Found | None = None
    listed: list[str] = []
    if remote:  # before any work: a missing bucket or denied access is said now
        found, listed = convert_bucket.found_in_bucket(prefix)
    todo = plan(prefix, shards, described, args.overwrite, found)
    if todo.action == "skip":
        lead = f"{prefix}: nothing to do (converted from this input already; --overwrite redoes it)"
        if not remote:
            _report(f"{lead}, found", shards)
            if not os.path.exists(prefix + SUFFIX):  # a run that died before its index
                convert_local.write_index_or_note(shards, prefix)
            return 0
        _report(f"{lead}, found", shards, object_sizes(shards))
        convert_bucket.index_if_missing(prefix, shards, listed)
        return 0
    for line in [] if from_bucket else notes(fmt, paths):
        print(line)
    encode = encoder(args.serializer)
    rows, total = bucket_input.read(urls, fmt) if from_bucket else READERS[fmt](paths)
    _check_shard_count(total, args.num_shards, args.input)
    records = _Progress(
        _first_and_rest((encode(row) for row in rows), args.input), total, args.no_progress
    )
    if remote:
        sizes = convert_bucket.write_shards(records, shards, args, todo, listed)
        convert_bucket.write_manifest_and_index(prefix, shards, described, records.count)
        _report(f"{fmt} input {args.input}: {records.count} records into", shards, sizes)
        return 0
    written = convert_local.write_shards(records, prefix, shards, args, todo, described)
    convert_local.write_index_or_note(written, prefix)
    _report(f"{fmt} input {args.input}: {records.count} records into", written)
    return 0
