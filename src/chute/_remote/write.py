"""Writing an object all at once or not at all: ``ObjectWriter``, ``write_object``,
``upload_file``; and ``delete_object``.

The bytes are staged in a spooled temporary file (memory up to 64 MiB, then local disk)
and uploaded only at ``commit()``: as one PUT, or as a multipart upload that the store
completes only after its last part, so no reader ever sees a half-written object under
the final name.  A writer that fails before ``commit()`` sends nothing at all; an upload
that fails midway leaves no object (an S3 multipart upload left incomplete costs storage
until the bucket's lifecycle rule for incomplete uploads removes it).  Local files are
written to a temporary file beside the target and renamed over it.  ``upload_file``
uploads a finished local file the same way, reading it in place instead of through a
spool.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from typing import IO, Any

from chute._remote import backends, io_loop
from chute._remote.io_loop import run_on_io_loop
from chute._remote.retry import RetryPolicy, with_retries
from chute._remote.urls import split_url

_SPOOL = 64 << 20


class ObjectWriter:
    """A file-like writer whose object appears under ``url`` only at ``commit()``.

    Used as a context manager it commits when the block ends normally and aborts when
    it raises.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "shard-0"
        >>> with ObjectWriter(path) as w:
        ...     _ = w.write(b"abc")
        ...     path.exists()
        False
        >>> path.read_bytes()
        b'abc'
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        filesystem: Any = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.url = os.fspath(url)
        self._scheme, self._bucket, self._key = split_url(self.url)
        self._filesystem = filesystem
        self._retry = retry if retry is not None else RetryPolicy()
        self._spool: IO[bytes] | None = tempfile.SpooledTemporaryFile(max_size=_SPOOL)  # noqa: SIM115
        self.committed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._spool is None:
            raise ValueError(f"the writer for {self.url} was already committed or aborted.")
        return self._spool.write(data)

    def commit(self) -> None:
        """Uploads what was written and makes it visible under the URL, all at once."""
        spool = self._spool
        if spool is None:
            raise ValueError(f"the writer for {self.url} was already committed or aborted.")
        spool.seek(0)
        try:
            self._upload(spool)
        finally:
            self.abort()
        self.committed = True

    def abort(self) -> None:
        """Drops what was written; nothing appears under the URL."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def _upload(self, spool: IO[bytes]) -> None:
        if self._scheme == "file" and self._filesystem is None:
            _replace_local(self._key, spool)
            return
        client = backends.client_for(self._scheme, self._bucket, self._filesystem)
        if not backends.is_obstore(client):
            _upload_fsspec(client, f"{self._bucket}/{self._key}", spool)
            return
        obstore = backends._import_obstore()

        async def put() -> Any:
            spool.seek(0)
            return await asyncio.to_thread(obstore.put, client, self._key, spool)

        describe = f"PUT {self.url}"
        run_on_io_loop(lambda: with_retries(put, self._retry, lambda exc: None, lambda: describe))


def write_object(
    url: str | os.PathLike[str],
    chunks: Iterable[bytes | bytearray | memoryview],
    *,
    filesystem: Any = None,
) -> None:
    """Writes the concatenated ``chunks`` to ``url`` atomically (see ``ObjectWriter``).

    If iterating ``chunks`` raises, nothing is written and the exception propagates.
    """
    with ObjectWriter(url, filesystem=filesystem) as writer:
        for chunk in chunks:
            writer.write(chunk)


def upload_file(
    path: str | os.PathLike[str],
    url: str | os.PathLike[str],
    *,
    filesystem: Any = None,
    retry: RetryPolicy | None = None,
) -> None:
    """Uploads the local file ``path`` to ``url`` all at once or not at all.

    Like ``ObjectWriter.commit()`` (one PUT or a multipart upload completed after its
    last part, retried on transient failures), but read from the file in place.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "local").write_bytes(b"abc")
        >>> upload_file(folder / "local", folder / "copy")
        >>> (folder / "copy").read_bytes()
        b'abc'
    """
    writer = ObjectWriter(url, filesystem=filesystem, retry=retry)
    writer.abort()  # its spool is not needed: the file is the spool
    with open(path, "rb") as file:
        writer._upload(file)


def delete_object(
    url: str | os.PathLike[str], *, filesystem: Any = None, retry: RetryPolicy | None = None
) -> None:
    """Deletes the object at ``url``; one that is not there is no error.

    Transient failures are retried as reads are; 403 raises ``PermissionError``.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "gone"
        >>> _ = path.write_bytes(b"x")
        >>> delete_object(path); delete_object(path)
        >>> path.exists()
        False
    """
    url = os.fspath(url)
    scheme, bucket, key = split_url(url)
    if scheme == "file" and filesystem is None:
        try:
            os.remove(key)
        except FileNotFoundError:
            pass
        return
    client = backends.client_for(scheme, bucket, filesystem)
    if backends.is_obstore(client):
        remove = _remove_obstore(client, key)
    else:
        remove = _remove_fsspec(client, f"{bucket}/{key}")
    policy = retry if retry is not None else RetryPolicy()
    run_on_io_loop(lambda: with_retries(remove, policy, lambda exc: None, lambda: f"DELETE {url}"))


def _remove_fsspec(fs: Any, path: str) -> Callable[[], Awaitable[None]]:
    async def remove() -> None:
        try:
            await asyncio.to_thread(fs.rm_file, path)
        except FileNotFoundError:
            pass

    return remove


def _remove_obstore(store: Any, key: str) -> Callable[[], Awaitable[None]]:
    obstore = backends._import_obstore()

    async def remove() -> None:
        try:
            await io_loop.client(obstore.delete_async(store, key))
        except (FileNotFoundError, obstore.exceptions.NotFoundError):
            pass  # stores other than S3 answer 404 for a key that is not there

    return remove


def _replace_local(path: str, spool: IO[bytes]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(
        dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(spool, out)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _upload_fsspec(fs: Any, path: str, spool: IO[bytes]) -> None:
    out = fs.open(path, "wb")
    try:
        shutil.copyfileobj(spool, out)
    except BaseException:
        discard = getattr(out, "discard", None)
        if discard is not None:
            discard()  # abort the multipart or resumable upload: nothing is committed
        raise
    out.close()
