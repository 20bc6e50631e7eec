"""``chute convert s3://bucket/data/*.parquet ...``: INPUT read from a bucket.

Parquet, JSON Lines and TFRecord objects are read where they lie, through chute's
object-store transport (ranged GETs, retries, a changed object refused): Parquet a row
group at a time (``chute._sources.parquet.io``), JSON Lines through a read-ahead file
object (``chute._remote.RangedFile``), TFRecord with ``read_tfrecord``.  INPUT is one
object, a quoted glob, or a prefix (every object under it).  The manifest records each
object's URL, size and ETag (or generation), so a rerun skips when nothing changed and
another version of an object counts as another input.  Other formats (NumPy files,
image folders, Hugging Face datasets) are refused with what to do.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from chute._cli.bucket import bucket_error, listed
from chute._cli.errors import CliError
from chute._cli.manifest import describe_listing
from chute._cli.readers import json_rows, parquet_rows

__all__ = ["describe", "detect", "read", "resolve"]

_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl",
             ".ndjson": "jsonl", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord"}  # fmt: skip
_READABLE = ("parquet", "jsonl", "tfrecord")


def resolve(spec: str) -> list[str]:
    """The object URLs that ``spec`` (an object, a glob or a prefix) names, sorted."""
    found = listed(spec)  # a glob's matches; else every object whose name starts so
    if any(c in spec for c in "*?["):
        pass
    elif spec in found:  # one object
        found = [spec]
    else:  # a prefix: the objects under it
        folder = spec.rstrip("/") + "/"
        found = [u for u in found if u.startswith(folder) and not u.endswith("/")]
    if not found:
        raise CliError(f"{spec}: no object matches; check the URL")
    return found


def detect(urls: list[str], fmt: str) -> str:
    """The format of ``urls``: ``fmt`` itself, or told by the objects' names."""
    if fmt == "auto":
        found = {_SUFFIXES.get("." + u.rsplit(".", 1)[-1].lower()) for u in urls}
        if None in found or len(found) != 1:
            raise CliError(
                f"{urls[0]}: cannot tell one format from the object names; pass --format "
                f"({', '.join(_READABLE)}), or convert each format on its own"
            )
        fmt = found.pop()  # type: ignore[assignment]
    if fmt not in _READABLE:
        raise CliError(
            f"--format {fmt}: read from a bucket are {', '.join(_READABLE)} only; copy "
            f"{fmt} input to a local folder first (the OUTPUT_PREFIX may be a bucket)"
        )
    return fmt


def describe(urls: list[str], fmt: str, args: Any) -> dict[str, Any]:
    """The manifest's account of the input: each object's URL, size and version."""
    from chute._remote import open_source

    listing: list[list[Any]] = []
    for url in urls:
        try:
            with open_source(url) as source:
                listing.append([url, source.size(), str(source.version)])
        except Exception as exc:
            raise bucket_error(url, exc, "reading") from None
    return describe_listing(listing, fmt, args)


def read(urls: list[str], fmt: str) -> tuple[Iterator[Any], int | None]:
    """The rows of ``urls`` and their number when the format tells it cheaply."""
    if fmt == "parquet":
        return _parquet(urls)
    if fmt == "jsonl":
        return (row for url in urls for row in _jsonl(url)), None
    from chute._sources.tfrecord import read_tfrecord

    return (record for url in urls for record in read_tfrecord(url)), None


def _parquet(urls: list[str]) -> tuple[Iterator[Any], int | None]:
    from chute._sources.parquet import io as parquet_io

    files = []
    for url in urls:
        try:
            files.append(parquet_io.open_file(url, {}, "chute convert"))
        except (OSError, ValueError) as exc:
            raise CliError(
                f"{url}: not a readable Parquet file ({exc}); check the object"
            ) from None
    total = sum(f.metadata.num_rows for f in files)

    def rows() -> Iterator[Any]:
        for url, f in zip(urls, files):
            yield from parquet_rows(f, url)

    return rows(), total


def _jsonl(url: str) -> Iterator[Any]:
    from chute._remote import RangedFile, open_source

    with io.BufferedReader(RangedFile(open_source(url)), 1 << 20) as lines:
        yield from json_rows(lines, url)
