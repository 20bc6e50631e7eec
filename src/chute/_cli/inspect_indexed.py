"""``chute inspect`` of shards in a bucket, or of a ``.chute-index``: read by chute's reader.

The shards (``s3://b/train``, ``'s3://b/train-*.array_record'``, ``s3://b/train@3``,
one shard's URL) or the index (``s3://b/train.chute-index``, or a local one) open as
one ``ArrayRecordDataSource``: the counts come from the shards' footers (or the index's
header) and only the chunks of the first records are fetched, never whole shards.
"""

from __future__ import annotations

from dataclasses import dataclass

from chute._cli.bucket import bucket_error, is_bucket_url, resolve_url
from chute._cli.errors import CliError
from chute._sources.array_record.index import SUFFIX

__all__ = ["Indexed", "is_indexed", "read_indexed"]

_STORE_ERRORS = (OSError, RuntimeError)


@dataclass
class Indexed:
    """The shards read, each one's record count and size, and the first records."""

    files: list[str]
    counts: list[int]
    sizes: list[int]
    head: list[bytes]


def is_indexed(spec: str) -> bool:
    """Whether ``inspect`` reads ``spec`` through ``read_indexed``: a URL or an index.

    >>> is_indexed("s3://b/train"), is_indexed("data/train.chute-index"), is_indexed("data/x")
    (True, True, False)
    """
    return is_bucket_url(spec) or spec.endswith(SUFFIX)


def _error(spec: str, exc: Exception) -> CliError:
    text = str(exc).removeprefix("ArrayRecordDataSource: ")
    if isinstance(exc, ValueError):
        return CliError(f"{spec}: cannot be read ({text})")
    if isinstance(exc, FileNotFoundError):
        return CliError(f"{spec}: not found ({text}); check the URL or path")
    if is_bucket_url(spec):
        return bucket_error(spec, exc, "reading")
    return CliError(f"{spec}: cannot be read ({type(exc).__name__}: {text})")


def read_indexed(spec: str, want: int) -> Indexed:
    """The shards ``spec`` names, their counts and sizes, and their first ``want`` records."""
    from chute._sources.array_record.indexed import IndexedArrayRecordDataSource

    what: str | list[str] = spec if spec.endswith(SUFFIX) else resolve_url(spec)
    try:
        source = IndexedArrayRecordDataSource(what)
    except (ValueError, *_STORE_ERRORS) as exc:
        raise _error(spec, exc) from None
    with source:
        shards = source.shards
        try:
            n = min(want, len(source))
            head = list(source.__getitems__(list(range(n)))) if n else []
        except (ValueError, *_STORE_ERRORS) as exc:
            raise _error(spec, exc) from None
    return Indexed(
        [s.path for s in shards], [s.records for s in shards], [s.size for s in shards], head
    )
