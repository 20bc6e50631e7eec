"""``cache_dir=`` and ``cache_limit=`` of the readers that open files by URL (Parquet, TFRecord).

The cache is a ``chute._remote.shard_cache.ShardCache``: a file in a bucket is opened
through it (``open_through``, one HEAD) and read from its whole local copy where the
cache holds the version the bucket has now, else from the bucket while the copy
downloads in the background.  A reader that opened a file from the bucket moves onto
the copy once it is whole (``whole_copy``), so a second epoch reads local files even
within one iterator.  A reader holds its copy (no process evicts it) until it closes.
Local files are read where they are.
"""

from __future__ import annotations

import os
from typing import Any

from chute._remote.shard_cache import CopySource, ShardCache

__all__ = ["cache_option", "whole_copy"]


def cache_option(
    owner: str, cache_dir: Any, cache_limit: Any, *, remote: bool
) -> ShardCache | None:
    """The cache that ``cache_dir`` and ``cache_limit`` ask for; None without ``cache_dir``,
    or where no file is read from a bucket (``remote`` false).

    A limit smaller than a file is refused when that file is opened, the first time its
    size is known (``ShardCache.check_fits``).
    """
    if cache_dir is None:
        if cache_limit is not None:
            raise ValueError(f"{owner}: cache_limit needs cache_dir, the directory of the copies.")
        return None
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(
            f"{owner}: cache_dir must be a directory, a str or an os.PathLike (got "
            f"{cache_dir!r} that is a {type(cache_dir).__name__})."
        )
    if not remote:
        return None  # local files are read where they are
    return ShardCache(cache_dir, cache_limit)


def whole_copy(cache: ShardCache | None, url: str, version: Any) -> CopySource | None:
    """A source over ``cache``'s whole copy of ``url`` at ``version``, held until it closes;
    None where the copy is not (yet) there."""
    if cache is None or not version or not cache.has(url, str(version)):
        return None
    copy = cache.open_copy(url, str(version))  # None where it was evicted meanwhile
    return None if copy is None else CopySource(copy, url, str(version))
