"""What ``convert`` and ``inspect`` need of a bucket: listings, small objects, and errors.

URLs are ``s3://``, ``gs://`` and ``az://`` (see ``chute._remote`` for where the
credentials and endpoints come from).  Every failure of the store becomes a
one-line ``CliError`` that names the URL and says what to do: a bucket that
does not exist, no credentials found (what to set), credentials that may not
read or write it, a refused connection (check the endpoint), or a store that
kept failing after its retries.

>>> is_bucket_url("s3://data/train"), is_bucket_url("data/train")
(True, False)
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chute._cli.errors import CliError
from chute._core.errors import CredentialsNotFoundError
from chute._remote import credentials
from chute._remote.retry import RetryBudgetExceeded, is_transient, status_of
from chute._remote.urls import REMOTE_SCHEMES, is_remote_url, split_url, url_scheme
from chute._sources.array_record.paths import shard_sets_in

__all__ = [
    "bucket_error",
    "check_prefix",
    "is_bucket_url",
    "listed",
    "read_json",
    "resolve_url",
    "shard_sets_in",
    "sizes",
]

WRITABLE = ("s3", "gs", "az", "abfs")
_SPEC = re.compile(r"(.+)@(\d+)")  # PREFIX@N, as ArrayRecordDataSource takes
_CREDENTIALS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, AWS_REGION)",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS",
    "az": "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY",
    "abfs": "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY",
}
_ENDPOINTS = {"s3": "AWS_ENDPOINT_URL", "gs": "STORAGE_EMULATOR_HOST"}


def is_bucket_url(path: str) -> bool:
    """Whether ``path`` is an object-store URL (``is_remote_url``) rather than a local path;
    a ``CliError`` for a URL of a scheme chute does not read (``hdfs://``), which is neither."""
    scheme = url_scheme(path)
    if scheme not in ("", "file", *REMOTE_SCHEMES):
        schemes = ", ".join(s + "://" for s in REMOTE_SCHEMES)
        raise CliError(
            f"{path}: chute cannot read or write {scheme}:// URLs; give a path or {schemes}"
        )
    return is_remote_url(path)


def check_prefix(prefix: str) -> str:
    """A bucket OUTPUT_PREFIX, checked: a writable scheme, a name, no wildcards."""
    scheme = url_scheme(prefix)
    if scheme not in WRITABLE:
        raise CliError(
            f"{prefix}: cannot write to {scheme}:// URLs; give an OUTPUT_PREFIX in a bucket "
            "(s3://, gs:// or az://) or a local path"
        )
    example = f"{prefix.rstrip('/')}/data"
    try:
        split_url(prefix)
    except ValueError:
        raise CliError(
            f"{prefix}: OUTPUT_PREFIX names a bucket but no file-name prefix; give one, "
            f"e.g. {example}"
        ) from None
    if prefix.endswith("/"):
        raise CliError(
            f"{prefix}: OUTPUT_PREFIX is a folder; give a file-name prefix inside it, "
            f"e.g. {example}"
        )
    if any(c in prefix for c in "*?["):
        raise CliError(f"{prefix}: OUTPUT_PREFIX holds a wildcard (*, ? or [); remove it")
    return prefix


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split("\n", 1)[0].split())
    return text if len(text) <= 200 else text[:200] + "..."


def _denied(exc: BaseException) -> bool:
    names = ("PermissionDeniedError", "UnauthenticatedError")
    return (
        isinstance(exc, PermissionError)
        or type(exc).__name__ in names
        or status_of(exc) in (401, 403)
        or _first_line(exc).startswith("Forbidden")  # gcsfs's OSError for a 403
    )


def bucket_error(url: str, exc: BaseException, doing: str) -> CliError:
    """The one-line ``CliError`` for a store's failure at ``url`` while ``doing`` something.

    >>> print(bucket_error("s3://b/x", PermissionError("403 Forbidden"), "listing"))
    s3://b/x: access denied while listing (403 Forbidden); check the credentials \
for s3://b: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, AWS_REGION)
    """
    scheme, bucket, _ = split_url(url)
    where = f"{scheme}://{bucket}"
    first = _first_line(exc)
    if isinstance(exc, CredentialsNotFoundError):
        hint = credentials.HINTS.get(scheme, "set the store's credentials in the environment")
        return CliError(f"{url}: no credentials found while {doing}; {hint}")
    if _denied(exc):
        return CliError(
            f"{url}: access denied while {doing} ({first}); check the credentials for "
            f"{where}: {_CREDENTIALS.get(scheme, 'the environment')}"
        )
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in str(exc):
        endpoint = f" and {_ENDPOINTS[scheme]}" if scheme in _ENDPOINTS else ""
        return CliError(
            f"{url}: the bucket {where} does not exist or cannot be found while {doing} "
            f"({first}); create it, or check the URL{endpoint}"
        )
    if credentials.is_refused(exc):
        return CliError(
            f"{url}: {doing} failed: the connection was refused ({first}); "
            f"{credentials.endpoint_hint(url)}"
        )
    if isinstance(exc, RetryBudgetExceeded) or is_transient(exc):
        return CliError(
            f"{url}: {doing} failed: the store kept failing ({first}); try again later "
            "(a rerun picks up where this one stopped)"
        )
    return CliError(f"{url}: {doing} failed ({type(exc).__name__}: {first})")


def listed(prefix: str) -> list[str]:
    """The URLs of every object whose name starts with ``prefix``, sorted."""
    from chute._remote import list_prefix

    try:
        return list_prefix(prefix)
    except Exception as exc:
        raise bucket_error(prefix, exc, "listing the bucket") from None


def read_json(url: str) -> dict[str, Any] | None:
    """The JSON object at ``url``; ``None`` if there is none, ``{}`` if it does not parse."""
    from chute._remote import open_source

    try:
        source = open_source(url)
        try:
            data = source.read_all()
        finally:
            source.close()
    except FileNotFoundError:
        return None
    except Exception as exc:
        raise bucket_error(url, exc, "reading") from None
    try:
        found = json.loads(data)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def sizes(urls: list[str]) -> list[int]:
    """The size in bytes of each object, asked for 16 at a time."""
    from chute._remote import open_source

    def size(url: str) -> int:
        try:
            source = open_source(url)
        except Exception as exc:
            raise bucket_error(url, exc, "reading its size") from None
        source.close()
        return source.size()

    if not urls:
        return []
    with ThreadPoolExecutor(min(16, len(urls))) as pool:
        return list(pool.map(size, urls))


def _sets_text(prefix: str, sets: dict[int, list[str]]) -> str:
    return ", ".join(f"{len(files)} of {n} shards" for n, files in sets.items())


def resolve_url(spec: str) -> list[str]:
    """The objects ``spec`` names: a glob, ``PREFIX@N``, one object, or an OUTPUT_PREFIX.

    An OUTPUT_PREFIX stands for its one complete set of shards
    (``PREFIX-IIIII-of-NNNNN.array_record``), else for ``PREFIX.array_record``.
    Raises a ``CliError`` when nothing matches, or when the shards are ambiguous
    or incomplete.
    """
    if any(c in spec for c in "*?["):
        found = listed(spec)
        if not found:
            raise CliError(f"{spec}: no objects match this pattern; check the URL")
        return found
    if match := _SPEC.fullmatch(spec):
        prefix, count = match[1], int(match[2])
        sets = shard_sets_in(prefix, listed(prefix))
        if len(sets.get(count, [])) == count:
            return sets[count]
        there = _sets_text(prefix, sets) or "no shards"
        raise CliError(f"{spec}: not all {count} shards are there ({there} found); check the URL")
    urls = listed(spec)
    if spec in urls:
        return [spec]
    sets = shard_sets_in(spec, urls)
    complete = [files for n, files in sets.items() if len(files) == n]
    if len(sets) == 1 and complete:
        return complete[0]
    if sets:
        raise CliError(
            f"{spec}: as a shard prefix it is ambiguous or incomplete ({_sets_text(spec, sets)} "
            f"found); give PREFIX@N or a glob, or rerun 'chute convert'"
        )
    if spec + ".array_record" in urls:
        return [spec + ".array_record"]
    raise CliError(
        f"{spec}: no such object, nor shards {spec}-NNNNN-of-NNNNN.array_record; check the URL"
    )
