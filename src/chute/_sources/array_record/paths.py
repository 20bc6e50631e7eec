"""How ``ArrayRecordDataSource`` and ``chute inspect`` turn a path into files.

A path names files in one of these ways, tried in this order:

* an existing file;
* ``path[start:stop]``: a slice of one file's records, as in Grain;
* ``prefix@N``: the shards ``prefix-00000-of-0000N`` to ``prefix-0000(N-1)-of-0000N``,
  with or without the ``.array_record`` suffix that ``write_array_record`` adds;
* a glob pattern (``data/*.array_record``), its matches sorted;
* a shard prefix: ``prefix`` alone stands for its one complete set of shards
  (what ``chute convert`` printed as OUTPUT_PREFIX), else for ``prefix.array_record``.

A wrong shard count, a set with shards missing and a prefix with several sets
raise ``FileNotFoundError`` naming the counts that do exist.  Shards in a bucket are
named by URL in the same forms but a slice, found by listing the bucket
(``bucket_files``).

>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> for name in ("train-00000-of-00002", "train-00001-of-00002"):
...     open(os.path.join(folder, name + ".array_record"), "wb").close()
>>> [os.path.basename(f) for f, _, _ in expand(os.path.join(folder, "train"))]
['train-00000-of-00002.array_record', 'train-00001-of-00002.array_record']
>>> expand(os.path.join(folder, "train@3"))
Traceback (most recent call last):
...
FileNotFoundError: ArrayRecordDataSource: ...train@3 names 3 shards, but ...(use ...train@2).
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from chute._remote.urls import is_remote_url

__all__ = ["bucket_files", "expand", "shard_sets", "shard_sets_in", "shard_sets_text", "url_for"]

_WHAT = "ArrayRecordDataSource"
_SUFFIX = ".array_record"
_SLICE = re.compile(r"(.+)\[(\d+):(\d+)\]")
_SHARDS = re.compile(r"(.+)@(\d+)")
_SHARD_NAME = re.compile(r"-(\d{5})-of-(\d{5})(?:\.array_record)?")

Entry = tuple[str, "int | None", "int | None"]


def shard_sets(prefix: str) -> dict[int, list[str]]:
    """The shard files at ``prefix``, by shard count, each list sorted by shard index.

    Files ``prefix-IIIII-of-NNNNN`` count with or without the ``.array_record``
    suffix (TFDS names its shards ``name.array_record-00000-of-00010``).
    """
    sets: dict[int, list[str]] = {}
    for name in glob.glob(f"{glob.escape(prefix)}-*-of-*"):
        match = _SHARD_NAME.fullmatch(name[len(prefix) :])
        if match and os.path.isfile(name):
            sets.setdefault(int(match[2]), []).append(name)
    return {count: sorted(files) for count, files in sorted(sets.items())}


def shard_sets_text(prefix: str, sets: dict[int, list[str]]) -> str:
    """What ``sets`` holds, for a message: ``'x has 4 shards (use x@4)'``."""
    if not sets:
        return f"no shards named {prefix}-NNNNN-of-NNNNN exist"
    parts = []
    for count, files in sets.items():
        found = "" if len(files) == count else f", only {len(files)} of them there"
        parts.append(f"{count} shards (use {prefix}@{count}{found})")
    return f"{prefix} has " + " and ".join(parts)


def _numbered(prefix: str, count: int) -> list[str]:
    """The ``count`` shards of ``prefix``, with the suffix when the files have it."""
    names = [f"{prefix}-{i:05d}-of-{count:05d}" for i in range(count)]
    if count and not os.path.exists(names[0]) and os.path.exists(names[0] + _SUFFIX):
        names = [n + _SUFFIX for n in names]
    return names


def _spec(path: str, prefix: str, count: int) -> list[Entry]:
    """The shards ``prefix@count`` names, or an error that says which shards exist."""
    names = _numbered(prefix, count)
    missing = [n for n in names if not os.path.exists(n)]
    if not missing:
        return [(n, None, None) for n in names]
    sets = shard_sets(prefix)
    if count in sets:
        shown = ", ".join(os.path.basename(n) for n in missing[:4])
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise FileNotFoundError(
            f"{_WHAT}: {path} names {count} shards, but {len(missing)} are missing: "
            f"{shown}{more}; rewrite them or pass the files that exist."
        )
    if not sets:  # the names it looked for, with the suffix and without
        first, last = (f"{prefix}-{i:05d}-of-{count:05d}" for i in (0, count - 1))
        raise FileNotFoundError(
            f"{_WHAT}: no such file: {first}{_SUFFIX}, nor any of the {count} shards {path} "
            f"names ({first}{_SUFFIX} to {last}{_SUFFIX}, each with or without {_SUFFIX}); "
            "check the path."
        )
    raise FileNotFoundError(
        f"{_WHAT}: {path} names {count} shards, but {shard_sets_text(prefix, sets)}."
    )


def _prefix(path: str) -> list[Entry]:
    """The one complete shard set at ``path``, else ``path.array_record``."""
    sets = shard_sets(path)
    complete = {count: files for count, files in sets.items() if len(files) == count}
    if len(sets) == 1 and complete:
        return [(f, None, None) for f in next(iter(complete.values()))]
    if sets:
        raise FileNotFoundError(
            f"{_WHAT}: no file {path!r}, and as a shard prefix it is ambiguous or "
            f"incomplete: {shard_sets_text(path, sets)}; pass PREFIX@N or the files."
        )
    if os.path.isfile(path + _SUFFIX):
        return [(path + _SUFFIX, None, None)]
    raise FileNotFoundError(
        f"{_WHAT}: no such file: {path!r} (nor shards {path}-NNNNN-of-NNNNN or "
        f"{path}{_SUFFIX}); check the path."
    )


def expand(path: str) -> list[Entry]:
    """The files, each with a record range or ``None`` for the whole file, that ``path`` names."""
    if os.path.exists(path):
        return [(path, None, None)]
    if m := _SLICE.fullmatch(path):
        return [(m[1], int(m[2]), int(m[3]))]
    if m := _SHARDS.fullmatch(path):
        return _spec(path, m[1], int(m[2]))
    if glob.has_magic(path):
        found = sorted(glob.glob(path))
        if not found:
            raise FileNotFoundError(f"{_WHAT}: no files match the pattern {path!r}.")
        return [(f, None, None) for f in found]
    return _prefix(path)


def url_for(path: str, filesystem: Any) -> str:
    """``path`` itself; with a ``filesystem``, only if it is a URL (the filesystem holds the
    credentials, the URL still names the object)."""
    if filesystem is not None and not is_remote_url(path):
        raise ValueError(
            f"{_WHAT}: with filesystem=, name the objects by URL (s3://bucket/key, "
            f"gs://bucket/key, ...), not {path!r}; the filesystem supplies the credentials "
            "and endpoint."
        )
    return path


_URL_FORMS = (
    "name an object (s3://bucket/data/train-00000-of-00004.array_record), a glob "
    "(s3://bucket/data/train-*.array_record), PREFIX@N (s3://bucket/data/train@4), a shard "
    "prefix (s3://bucket/data/train) or an index (s3://bucket/data/train.chute-index)"
)


def _is_object_name(url: str) -> bool:
    """A URL that names one object as it stands: opened without listing the bucket."""
    name = url.rsplit("/", 1)[-1]
    return name.endswith(_SUFFIX) or bool(re.search(r"-\d{5}-of-\d{5}$", name))


def shard_sets_in(prefix: str, urls: list[str]) -> dict[int, list[str]]:
    """The shards ``prefix-IIIII-of-NNNNN[.array_record]`` among ``urls``, by shard count,
    each list sorted (``shard_sets`` for names a listing of a bucket returned).

    >>> shard_sets_in("s3://b/out", ["s3://b/out-00001-of-00002.array_record",
    ...     "s3://b/out-00000-of-00002.array_record", "s3://b/out.manifest.json"])
    {2: ['s3://b/out-00000-of-00002.array_record', 's3://b/out-00001-of-00002.array_record']}
    """
    sets: dict[int, list[str]] = {}
    for url in urls:
        match = _SHARD_NAME.fullmatch(url[len(prefix) :]) if url.startswith(prefix) else None
        if match:
            sets.setdefault(int(match[2]), []).append(url)
    return {count: sorted(files) for count, files in sorted(sets.items())}


def _listed_sets(prefix: str, filesystem: Any) -> tuple[list[str], dict[int, list[str]]]:
    """The URLs under ``prefix`` (a listing), and the shard sets among them by count."""
    from chute._remote import list_prefix

    urls = list_prefix(prefix, filesystem=filesystem)
    return urls, shard_sets_in(prefix, urls)


def _bucket_entry(url: str, filesystem: Any) -> list[str]:
    """The objects one URL names, in the forms a local path takes (``expand``)."""
    from chute._remote import list_prefix

    if _SLICE.fullmatch(url):
        raise ValueError(f"{_WHAT}: {url}: a slice of an object's records is read only from "
                         f"local files; in a bucket, {_URL_FORMS}.")  # fmt: skip
    if any(c in url for c in "*?["):
        found = list_prefix(url, filesystem=filesystem)
        if not found:
            raise FileNotFoundError(f"{_WHAT}: no objects match the pattern {url!r}.")
        return found
    if url.partition("://")[0].lower() in ("http", "https"):
        return [url]  # a server cannot be listed: the URL names the object
    if m := _SHARDS.fullmatch(url):
        prefix, count = m[1], int(m[2])
        sets = _listed_sets(prefix, filesystem)[1]
        if len(sets.get(count, [])) == count:
            return sets[count]
        raise FileNotFoundError(
            f"{_WHAT}: {url} names {count} shards, but {shard_sets_text(prefix, sets)}."
        )
    if _is_object_name(url):
        return [url]
    urls, sets = _listed_sets(url, filesystem)
    complete = [files for count, files in sets.items() if len(files) == count]
    if url in urls:
        return [url]
    if len(sets) == 1 and complete:
        return complete[0]
    if sets:
        raise FileNotFoundError(
            f"{_WHAT}: no object {url!r}, and as a shard prefix it is ambiguous or "
            f"incomplete: {shard_sets_text(url, sets)}; pass PREFIX@N or the objects."
        )
    if url + _SUFFIX in urls:
        return [url + _SUFFIX]
    raise FileNotFoundError(
        f"{_WHAT}: no object at {url} (nor shards {url}-NNNNN-of-NNNNN or {url}{_SUFFIX}); "
        f"{_URL_FORMS}."
    )


def bucket_files(paths: Any, filesystem: Any = None) -> list[str]:
    """The shard URLs that ``paths`` names: a URL in any form a local path takes (an
    object, a glob, ``PREFIX@N``, a shard prefix), or a list of those.

    An object whose name ends in ``.array_record`` or ``-NNNNN-of-NNNNN`` is taken as it
    stands; the other forms list the bucket once each.
    """
    given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[str] = []
    for p in given:
        files += _bucket_entry(url_for(os.fspath(p), filesystem), filesystem)
    if not files:
        raise FileNotFoundError(f"{_WHAT}: no objects match {paths!r}.")
    return files
