"""``chute convert INPUT s3://bucket/prefix``: shards converted locally, then uploaded whole.

For OUTPUT_PREFIX ``s3://b/train`` and N shards, the writes come in this order:

1. The rows are converted into N shards in a local temporary folder (which
   needs room for them).  Nothing in the bucket has changed yet: a bad row, a
   full disk or Ctrl-C here leaves the bucket as it was.
2. ``train.chute-index`` and ``train.manifest.json`` are deleted.  From here
   until step 5 no index vouches for the shards, and a rerun does not take
   them as done.
3. Each shard is uploaded under its final name, 8 at once, with one PUT or a
   multipart upload that the store completes only after its last part
   (``chute._remote.write.upload_file``), transient failures retried: an
   object under a final name is always a whole shard.
4. With ``--overwrite``, the old shards of another ``--num-shards`` are deleted.
5. The manifest is uploaded, then the index (which records the size and ETag or
   generation of each shard, read back from the bucket).

What a reader sees if the run dies midway:

* in step 1: the old data set, index and all, untouched;
* in steps 2-4: no index (``ArrayRecordDataSource("s3://b/train.chute-index")``
  raises ``FileNotFoundError``); a glob or prefix read finds whole shards, but
  maybe only some of them (``chute inspect`` warns that shards are missing)
  or, with ``--overwrite``, old ones beside new ones; a source opened from
  the old index before the run raises ``SourceChangedError`` on a replaced
  shard rather than mix versions;
* in step 5, between the manifest and the index: the complete new shards and
  their manifest; the rerun does nothing but write the missing index.

And what a rerun does then (``chute._cli.manifest``): with only some shards
there and no manifest, converts again; with all of them there but no manifest
(a run that died after its last upload), refuses unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from chute._cli.bucket import bucket_error, listed, read_json, shard_sets_in
from chute._cli.errors import CliError, write_failure
from chute._cli.manifest import Found, Plan, manifest_bytes
from chute._remote.write import delete_object, upload_file, write_object
from chute._sources.array_record.index import SUFFIX, write_index
from chute._sources.array_record.writer import write_array_record

__all__ = ["found_in_bucket", "index_if_missing", "write_manifest_and_index", "write_shards"]

_UPLOADS_AT_ONCE = 8
_LOCAL_ROOM = (
    "the shards are converted in a local temporary folder before the upload: set TMPDIR "
    "to a folder on a disk with room for them"
)


def _manifest_url(prefix: str) -> str:
    return f"{prefix}.manifest.json"


def found_in_bucket(prefix: str) -> tuple[Found, list[str]]:
    """What is at ``prefix`` in its bucket (shards, manifest), and every object listed."""
    urls = listed(prefix)
    shards = [f for files in shard_sets_in(prefix, urls).values() for f in files]
    manifest = _manifest_url(prefix)
    recorded = read_json(manifest) if manifest in urls else None
    return Found(shards, recorded, manifest.rsplit("/", 1)[-1]), urls


def _delete(urls: Iterable[str]) -> None:
    for url in urls:
        try:
            delete_object(url)
        except Exception as exc:
            raise bucket_error(url, exc, "deleting") from None


def _upload(pairs: list[tuple[str, str]]) -> None:
    """Uploads each local file to its URL; raises the first failure as a ``CliError``."""

    def one(pair: tuple[str, str]) -> None:
        path, url = pair
        try:
            upload_file(path, url)
        except Exception as exc:
            raise bucket_error(url, exc, "uploading the shard") from None

    with ThreadPoolExecutor(min(_UPLOADS_AT_ONCE, len(pairs))) as pool:
        for _ in pool.map(one, pairs):
            pass


def write_shards(
    records: Iterable[bytes],
    finals: list[str],
    args: argparse.Namespace,
    todo: Plan,
    listed: list[str],
) -> list[int]:
    """Steps 1-4 of the module docstring; returns the size of each shard written.

    ``listed`` is what ``found_in_bucket`` listed: an index or manifest not in it
    needs no deleting.
    """
    prefix = args.output_prefix
    with tempfile.TemporaryDirectory(prefix="chute-convert-") as folder:
        try:
            local = write_array_record(
                records,
                os.path.join(folder, "shard"),
                num_shards=args.num_shards,
                options=args.options,
            )
        except ValueError as exc:
            raise CliError(f"{prefix}: cannot write the shards: {exc}") from None
        except OSError as exc:  # step 1 failed: nothing is in the bucket
            name = os.path.join(folder, "shard")
            raise write_failure(exc, name, "The bucket is as it was.", _LOCAL_ROOM) from None
        sizes = [os.path.getsize(path) for path in local]
        _delete(url for url in (prefix + SUFFIX, _manifest_url(prefix)) if url in listed)
        _upload(list(zip(local, finals)))
    _delete(todo.stale)
    return sizes


def _index(prefix: str, shards: list[str]) -> bool:
    """Writes the index that opens the set in bounded memory; a failure is only a note."""
    try:
        write_index(shards, prefix + SUFFIX)
    except Exception as exc:
        print(f"note: no index written ({bucket_error(prefix + SUFFIX, exc, 'writing')}); "
              f"'chute index {prefix}' writes it")  # fmt: skip
        return False
    return True


def write_manifest_and_index(
    prefix: str, shards: list[str], described: dict[str, object], records: int
) -> None:
    """Step 5: the manifest, then the index."""
    url = _manifest_url(prefix)
    try:
        write_object(url, [manifest_bytes(described, records)])
    except Exception as exc:
        raise bucket_error(url, exc, "uploading the manifest") from None
    _index(prefix, shards)


def index_if_missing(prefix: str, shards: list[str], urls: list[str]) -> None:
    """Writes the index of a set that a run left without one (it died in step 5)."""
    if prefix + SUFFIX not in urls and _index(prefix, shards):
        print(f"{prefix + SUFFIX}: was missing; written")
