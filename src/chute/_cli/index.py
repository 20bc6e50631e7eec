"""``chute index``: the data-set index that opens huge shard sets in bounded memory.

``chute index 'data/train-*.array_record'`` reads every shard's footer once and
writes ``data/train.chute-index`` (see ``chute._sources.array_record.index``);
``ArrayRecordDataSource("data/train.chute-index")`` then opens the set without
reading any shard.  ``chute convert`` writes this index beside its shards.
"""

from __future__ import annotations

import argparse
import os
import re

from chute._cli.bucket import is_bucket_url, resolve_url
from chute._cli.decode import human_size
from chute._cli.errors import CliError
from chute._remote.urls import is_remote_url
from chute._sources.array_record.format import ArrayRecordFormatError
from chute._sources.array_record.index import SUFFIX, write_index
from chute._sources.array_record.paths import expand

__all__ = ["default_index_path", "register", "run"]

_SHARD = re.compile(r"-\d{5}-of-\d{5}(\.array_record)?$|\.array_record$")


def default_index_path(first_shard: str) -> str | None:
    """``data/train.chute-index`` for ``data/train-00000-of-00008.array_record``."""
    stem, n = _SHARD.subn("", first_shard)
    return stem + SUFFIX if n else None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``index`` subcommand."""
    parser = subparsers.add_parser(
        "index",
        help="write the index that opens a huge set of ArrayRecord shards in bounded memory",
        description=(
            "Read the footer of every shard once and write one index file; "
            "ArrayRecordDataSource(INDEX) then opens the set without reading the shards, "
            "and holds only the chunk offsets a read needs (memory-mapped)."
        ),
        epilog="example: chute index 'data/train-*.array_record'  (writes data/train.chute-index)",
    )
    parser.add_argument(
        "shards", metavar="SHARDS", help="a quoted glob, PREFIX@N, or a convert OUTPUT_PREFIX"
    )
    parser.add_argument(
        "-o", "--output", help=f"the index file (default: the shards' prefix + {SUFFIX})"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Runs ``chute index``; returns the exit status."""
    if is_bucket_url(args.shards):  # a bucket: a glob, PREFIX@N or a convert OUTPUT_PREFIX
        files = resolve_url(args.shards)
    else:
        try:
            files = [f for f, _, _ in expand(args.shards)]
        except (OSError, ValueError) as exc:
            raise CliError(f"{args.shards}: {exc}") from None
    if not files:
        raise CliError(f"{args.shards}: no ArrayRecord files match.")
    output = args.output or default_index_path(files[0])
    if output is None:
        raise CliError(f"{args.shards}: cannot tell a name for the index; give --output.")
    if not output.endswith(SUFFIX):
        raise CliError(f"{output}: an index file's name must end in {SUFFIX}.")
    try:
        write_index(files, output)
    except (OSError, ArrayRecordFormatError) as exc:
        raise CliError(f"{args.shards}: cannot index: {exc}") from None
    size = "" if is_remote_url(output) else f", {human_size(os.path.getsize(output))}"
    print(f"{output}: {len(files)} shard(s) indexed{size}")
    return 0
