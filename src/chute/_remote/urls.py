"""What a path or URL names: its scheme, whether chute's transport reads it, its bucket and key.

chute reads ``s3://``, ``gs://``, ``az://``, ``abfs://`` and ``http(s)://`` URLs through
its object-store transport; ``file://`` URLs and plain paths are local files.  Every
module that must tell the two apart asks ``is_remote_url``, so that they all agree.
"""

from __future__ import annotations

import os
import re
import urllib.parse

__all__ = ["REMOTE_SCHEMES", "is_remote_url", "split_url", "url_scheme"]

REMOTE_SCHEMES = ("s3", "gs", "az", "abfs", "http", "https")
# RFC 3986's scheme then "://", or "file:" (whose URLs may leave out the "//")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://|(file):", re.IGNORECASE)


def url_scheme(path: str) -> str:
    """The scheme of ``path``, lowercased (schemes are case-insensitive, RFC 3986); ``""``
    for a path: one that does not start with ``scheme://`` (or ``file:``).

    >>> url_scheme("S3://b/k"), url_scheme("file:/tmp/k"), url_scheme("k:v"), url_scheme("k")
    ('s3', 'file', '', '')
    """
    found = _SCHEME.match(path)
    return (found.group(1) or found.group(2)).lower() if found else ""


def is_remote_url(path: str) -> bool:
    """Whether ``path`` is a URL that chute's transport reads (``s3://``, ``gs://``, ``az://``,
    ``abfs://``, ``http(s)://``, in any case): chute's one answer to "is this a URL".

    ``file://`` URLs and paths are local; a URL of another scheme is neither (opening
    one raises ``ValueError`` naming the schemes chute reads).

    >>> is_remote_url("S3://b/k"), is_remote_url("hdfs://n/k"), is_remote_url("data/k")
    (True, False, False)
    """
    return url_scheme(path) in REMOTE_SCHEMES


def split_url(url: str) -> tuple[str, str, str]:
    """``scheme, bucket, key`` of a URL; ``("file", "", path)`` for local paths."""
    if not isinstance(url, (str, os.PathLike)):
        raise TypeError(f"url must be a str or os.PathLike (got {url!r}).")
    url = os.fspath(url)
    scheme = url_scheme(url)
    if scheme in ("", "file") or len(scheme) == 1:  # a drive letter (C://) on Windows
        return "file", "", urllib.parse.urlsplit(url).path if scheme == "file" else url
    if scheme not in REMOTE_SCHEMES:
        raise ValueError(
            f"unsupported URL scheme {scheme!r} in {url!r}; expected one of "
            f"{', '.join(s + '://' for s in REMOTE_SCHEMES)}, file:// or a local path."
        )
    parsed = urllib.parse.urlsplit(url)
    key = parsed.path.lstrip("/")
    if scheme in ("http", "https"):
        folder, _, key = parsed.path.rpartition("/")
        return scheme, parsed.netloc + folder, key
    if not parsed.netloc or not key:
        raise ValueError(f"{url!r} does not name an object: expected {scheme}://bucket/key")
    return scheme, parsed.netloc, key
