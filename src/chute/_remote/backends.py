"""The clients behind a remote source: obstore (primary) and fsspec (fallback).

Chosen by measurement (``benchmarks/bench_remote_clients.py``: moto's S3 server behind a
proxy adding 20 ms to every request, 200 concurrent ranged GETs, median of 5, 2 cores):

=====================================  ===========  =============  ===========  ============
client                                 1 KiB wall   1 KiB CPU      64 KiB wall  64 KiB CPU
=====================================  ===========  =============  ===========  ============
obstore ``get_ranges`` (merges <1 MiB)     28 ms         2 ms          28 ms         2 ms
obstore, 200 requests, 32 in flight       525 ms        59 ms         558 ms        81 ms
s3fs ``cat_ranges``, 32 in flight         537 ms       220 ms         538 ms       232 ms
s3fs ``cat_ranges``, default batch        600 ms       202 ms         729 ms       219 ms
=====================================  ===========  =============  ===========  ============

With one request per range both clients wait on the same local server, but obstore spends
3-4x less of the client's CPU per request (its HTTP stack is Rust and runs without the
GIL, which a data loader's own threads need), and merging nearby ranges into one request
turns 200 round trips into one.  So obstore is the primary transport: ``s3://``, ``az://``,
``gs://`` and ``http(s)://``, each request a ranged GET with ``If-Match`` on the ETag taken
at open.  fsspec serves what obstore cannot: an explicit fsspec ``filesystem=``, and
``gs://`` while ``STORAGE_EMULATOR_HOST`` points at a GCS emulator (object_store's GCS client
has no emulator hook; gcsfs honours the variable).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from chute._remote import io_loop
from chute._remote.io_loop import run_on_io_loop

T = TypeVar("T")

STREAM_CHUNK = 1 << 20  # what a streamed GET hands over at a time (a download's writes)

_NO_RETRIES: Any = {"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=60)}
_stores: dict[tuple[Any, ...], Any] = {}
_stores_lock = threading.Lock()
io_loop.on_stop(_stores.clear)  # the loop's end releases the clients it served


def request_timeout() -> float:
    """Seconds an object-store request may go unanswered (``remote_request_timeout_s``)."""
    from chute._core.config import config

    timeout = float(config.remote_request_timeout_s)
    if not timeout > 0:
        raise ValueError(
            f"remote_request_timeout_s must be a number of seconds > 0 (got {timeout!r}); set "
            "it with chute.config.update('remote_request_timeout_s', 60.0) or "
            "CHUTE_REMOTE_REQUEST_TIMEOUT_S=60."
        )
    return timeout


def _client_options(allow_http: bool) -> Any:
    """obstore's client options: the request timeout chute's config sets (the connection
    timeout is obstore's 5 s, or the request timeout if that is shorter)."""
    timeout = request_timeout()
    return {
        "allow_http": allow_http,
        "timeout": datetime.timedelta(seconds=timeout),
        "connect_timeout": datetime.timedelta(seconds=min(5.0, timeout)),
    }


def _import_obstore() -> Any:
    try:
        import obstore
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading s3://, gs://, az:// and https:// URLs needs obstore: "
            "pip install 'chute[remote]'"
        ) from exc
    return obstore


def _s3_store(bucket: str) -> Any:
    from obstore.store import S3Store

    env = os.environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    config: Any = {}
    if endpoint:
        config["endpoint"] = endpoint
    if region:
        config["region"] = region
    options = _client_options(bool(endpoint and endpoint.startswith("http://")))
    return S3Store(bucket, config=config, client_options=options, retry_config=_NO_RETRIES)


def obstore_store(scheme: str, bucket: str) -> Any:
    """A cached obstore store for ``scheme://bucket``, configured from the environment."""
    obstore = _import_obstore()
    keys = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID")
    key = (os.getpid(), scheme, bucket, request_timeout(), *(os.environ.get(k) for k in keys))
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            if scheme == "s3":
                store = _s3_store(bucket)
            elif scheme in ("http", "https"):
                store = obstore.store.HTTPStore.from_url(
                    f"{scheme}://{bucket}",
                    client_options=_client_options(scheme == "http"),
                    retry_config=_NO_RETRIES,
                )
            else:
                store = obstore.store.from_url(
                    f"{scheme}://{bucket}",
                    client_options=_client_options(False),
                    retry_config=_NO_RETRIES,
                )
            _stores[key] = store
    return store


def client_for(scheme: str, bucket: str, filesystem: Any = None) -> Any:
    """What serves ``scheme://bucket``: ``filesystem`` when one is given, gcsfs for a GCS
    emulator (``STORAGE_EMULATOR_HOST``), else obstore's store for the bucket.

    Reads, listings, writes and deletes all ask here, so they reach the same store.
    """
    if filesystem is not None:
        return filesystem
    if scheme == "gs" and os.environ.get("STORAGE_EMULATOR_HOST"):
        return gcs_emulator_filesystem()
    return obstore_store(scheme, bucket)


def gcs_emulator_filesystem() -> Any:
    """gcsfs for ``STORAGE_EMULATOR_HOST`` (anonymous, as emulators expect)."""
    try:
        from gcsfs.core import GCSFileSystem  # the plain client: no gRPC bucket-type probe
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "gs:// URLs with STORAGE_EMULATOR_HOST set go through gcsfs: pip install gcsfs"
        ) from exc
    return GCSFileSystem(token="anon")


def is_obstore(store: object) -> bool:
    return type(store).__module__.startswith("obstore")


class ObstoreBackend:
    """Ranged GETs through obstore, each conditional on the version taken at open."""

    checks_each_read = True

    def __init__(self, store: Any, path: str) -> None:
        self.obstore = _import_obstore()
        self.store, self.path = store, path

    async def head(self) -> tuple[int, str | None]:
        meta = await io_loop.client(self.obstore.head_async(self.store, self.path))
        return int(meta["size"]), meta.get("e_tag") or meta.get("version")

    async def head_and_first(self, n: int) -> tuple[int, str | None, bytes]:
        """The object's size and version and its first ``n`` bytes (all of it, if it is
        shorter), in one GET: the answer to a ranged GET tells the whole size.  An empty
        object has no range to answer: the store refuses the request."""
        result = await self._answer(0, n, None)
        meta = result.meta
        data = bytes(await io_loop.client(result.bytes_async()))
        return int(meta["size"]), meta.get("e_tag") or meta.get("version"), data

    async def get(self, start: int, end: int, version: str | None) -> bytes:
        result = await self._answer(start, end, version)
        return bytes(await io_loop.client(result.bytes_async()))

    async def stream(self, start: int, end: int, version: str | None) -> AsyncIterator[Any]:
        """Bytes ``start``-``end`` in one GET, as they arrive, in chunks of about
        ``STREAM_CHUNK`` bytes (buffers, not copied into ``bytes``)."""
        result = await self._answer(start, end, version)
        chunks = result.stream(min_chunk_size=STREAM_CHUNK)
        while True:
            try:
                chunk = await io_loop.client(chunks.__anext__())
            except StopAsyncIteration:
                return
            yield chunk

    async def _answer(self, start: int, end: int, version: str | None) -> Any:
        """obstore's answer to a GET of bytes ``start``-``end``, on condition that the
        object is still ``version`` (when one is given); its body not yet read."""
        options: dict[str, Any] = {"range": (start, end)}
        if version is not None:
            options["if_match"] = version
        return await io_loop.client(self.obstore.get_async(self.store, self.path, options=options))

    def is_changed_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self.obstore.exceptions.PreconditionError)

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return run_on_io_loop(make)


class FsspecBackend:
    """Ranged reads through an fsspec filesystem; the version is checked after each batch."""

    checks_each_read = False

    def __init__(self, fs: Any, path: str) -> None:
        self.fs, self.path = fs, path

    async def head(self) -> tuple[int, str | None]:
        info = await self._call("info", self.path)
        for name in ("generation", "ETag", "etag", "VersionId", "mtime", "LastModified"):
            if info.get(name) is not None:
                return int(info["size"]), str(info[name])
        return int(info["size"]), None

    async def get(self, start: int, end: int, version: str | None) -> bytes:
        return bytes(await self._call("cat_file", self.path, start=start, end=end))

    def is_changed_error(self, exc: BaseException) -> bool:
        return False

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        if getattr(self.fs, "async_impl", False):
            return getattr(self.fs, f"_{name}")(*args, **kwargs)
        return asyncio.to_thread(getattr(self.fs, name), *args, **kwargs)

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if getattr(self.fs, "async_impl", False):
            from fsspec.asyn import sync

            return sync(self.fs.loop, make)
        return run_on_io_loop(make)  # its calls run on threads; the loop only waits
