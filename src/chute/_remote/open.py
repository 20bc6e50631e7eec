"""``open_source`` and ``list_prefix``: from a URL to a ranged source, or to a shard list."""

from __future__ import annotations

import fnmatch
import glob as _glob
import os
from typing import Any

from chute._remote import backends, io_loop
from chute._remote.io_loop import run_on_io_loop
from chute._remote.ranged_object import RangedSource
from chute._remote.ranged_source import LocalRanges
from chute._remote.retry import RetryPolicy, with_retries
from chute._remote.urls import split_url

_WILDCARDS = "*?["


def _fsspec_path(scheme: str, bucket: str, key: str) -> str:
    return f"{bucket}/{key}" if scheme not in ("http", "https") else f"{scheme}://{bucket}/{key}"


def _backend(url: str, filesystem: Any) -> Any:
    scheme, bucket, key = split_url(url)
    client = backends.client_for(scheme, bucket, filesystem)
    if backends.is_obstore(client):
        return backends.ObstoreBackend(client, key.lstrip("/") if scheme == "file" else key)
    path = key if scheme == "file" else _fsspec_path(scheme, bucket, key)
    return backends.FsspecBackend(client, path)


def open_source(
    url: str | os.PathLike[str],
    *,
    filesystem: Any = None,
    max_in_flight: int = 32,
    retry: RetryPolicy | None = None,
    known: tuple[int, str] | None = None,
    first: int = 0,
) -> RangedSource | LocalRanges:
    """Opens the object at ``url`` for ranged reads; see ``chute._remote.ranged_object``.

    Args:
        url: ``s3://``, ``gs://``, ``az://``, ``https://`` or ``file://`` URL, or a path.
        filesystem: An fsspec filesystem or an obstore store to read through instead of
            the one the URL's scheme and the environment pick.  With it, ``url`` may also
            be a path inside it (``bucket/key`` for fsspec, ``key`` for obstore).
        max_in_flight: The most requests one ``read_ranges`` call runs at once.
        retry: How transient failures are retried (``RetryPolicy()``: 5 retries, 60 s).
        known: The object's ``(size, version)`` when an index recorded them: a remote
            object then opens without a request, and its first read that finds another
            version raises ``SourceChangedError``.
        first: Bytes at the object's start to take at open, where it is opened with a
            request: through obstore, its open is then one ranged GET (whose answer
            tells the size and version) instead of a HEAD, and reads within those bytes
            send nothing.  For objects whose start is always read first (an index's
            header).

    Raises:
        FileNotFoundError: No object at ``url``.
        PermissionError: The credentials may not read it.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        ...     _ = f.write(b"0123456789"); f.flush()
        ...     source = open_source("file://" + f.name)
        ...     source.size(), source.read_ranges([(2, 3)])
        (10, [b'234'])
    """
    url = os.fspath(url)
    scheme, _, key = split_url(url)
    if scheme == "file" and filesystem is None:
        local = LocalRanges(key, url)
        local.size()  # opens now: its version is the file's at open, as a remote object's is
        return local
    return RangedSource(
        url,
        _backend(url, filesystem),
        max_in_flight=max_in_flight,
        retry=retry,
        known=known,
        first=first,
    )


def list_prefix(url: str | os.PathLike[str], *, filesystem: Any = None) -> list[str]:
    """The sorted URLs of the objects a glob names (``s3://b/train-*.array_record``).

    A URL without wildcards lists every object under it as a prefix.  A listing is
    retried as a read is (``chute._remote.retry``).
    """
    url = os.fspath(url)
    scheme, bucket, key = split_url(url)
    pattern = key if any(c in key for c in _WILDCARDS) else key + "*"
    if scheme == "file" and filesystem is None:
        return sorted(p for p in _glob.glob(pattern) if os.path.isfile(p))
    if scheme in ("http", "https"):
        raise ValueError(f"{url!r}: http(s) servers cannot be listed; name each object.")
    folder = pattern[: min(pattern.find(c) % (len(pattern) + 1) for c in _WILDCARDS)]
    folder = folder.rpartition("/")[0]
    client = backends.client_for(scheme, bucket, filesystem)
    if not backends.is_obstore(client):
        found = client.find(f"{bucket}/{folder}" if folder else bucket)
        root = getattr(client, "root_marker", "")  # "/" for fsspec's memory filesystem
        found = [p[len(root) :] if root and p.startswith(root) else p for p in found]
        keys = [path.split("/", 1)[1] for path in found if "/" in path]
    else:
        obstore = backends._import_obstore()

        async def collect() -> Any:
            return await io_loop.client(obstore.list(client, prefix=folder or None).collect_async())

        where = f"LIST {url}"
        listed = run_on_io_loop(
            lambda: with_retries(collect, RetryPolicy(), lambda exc: None, lambda: where)
        )
        keys = [meta["path"] for meta in listed]
    return sorted(f"{scheme}://{bucket}/{k}" for k in keys if fnmatch.fnmatchcase(k, pattern))
