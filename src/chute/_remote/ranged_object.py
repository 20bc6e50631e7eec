"""``open_source(url)``: a ranged byte source over an object in a bucket, or a local file.

A ranged source answers ``read_ranges([(offset, length), ...])`` with one ``bytes`` per
range, in order.  Remote ranges less than ``coalesce`` bytes apart are merged into one
ranged GET; at most ``max_in_flight`` GETs run at once; every GET is retried on transient
failures (see ``chute._remote.retry``) and either returns its range whole or the call
raises, so nothing is lost or repeated.  The object's version (ETag, or a GCS generation)
is taken at open; a read that finds another version raises ``SourceChangedError`` rather
than mixing bytes of two versions.

Each request counts in ``chute._core.metrics``: ``remote_requests`` (every GET and HEAD,
each retry included), ``remote_retries``, ``remote_bytes`` (the bytes of each whole
answer) and ``remote_read_seconds`` (each GET's latency, failed ones included); a merged
GET counts once, however many ranges it serves.

Where credentials and endpoints come from:

* ``s3://bucket/key``: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``), ``AWS_ENDPOINT_URL_S3``
  (or ``AWS_ENDPOINT_URL``; an ``http://`` endpoint is allowed), and the other ``AWS_*``
  variables obstore reads.
* ``gs://bucket/key``: ``GOOGLE_APPLICATION_CREDENTIALS`` (or ``GOOGLE_SERVICE_ACCOUNT``);
  with ``STORAGE_EMULATOR_HOST`` set, the emulator at that address, anonymously (gcsfs).
* ``az://container/blob``: ``AZURE_STORAGE_ACCOUNT_NAME``, ``AZURE_STORAGE_ACCOUNT_KEY``
  and the other ``AZURE_*`` variables obstore reads.
* ``https://host/path``: none; the server must answer HEAD and ranged GETs.
* ``file://`` URLs and plain paths: read with ``os.pread``.

Or pass ``filesystem=``: an fsspec filesystem or an obstore store, which then holds the
credentials, and the URL's path (``bucket/key`` for fsspec, ``key`` for obstore) names
the object.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from chute._core import metrics
from chute._core.errors import ChuteError, SourceChangedError
from chute._remote import io_loop
from chute._remote.retry import RetryPolicy, is_transient, with_retries

T = TypeVar("T")


class IncompleteAnswer(ConnectionError):
    """A ranged GET answered with fewer bytes than it asked for (the body was cut off)."""


class RangedSource:
    """Reads byte ranges of one remote object concurrently, retrying transient failures.

    Attributes:
        url: The object's URL.
        version: Its ETag or generation, taken at open (``None`` if the store has none).
        retries: How many transient failures were retried so far.
    """

    def __init__(
        self,
        url: str,
        backend: Any,
        *,
        max_in_flight: int = 32,
        retry: RetryPolicy | None = None,
        coalesce: int = 1 << 20,
        known: tuple[int, str] | None = None,
        first: int = 0,
    ) -> None:
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an int >= 1 (got {max_in_flight!r}).")
        self.url, self._backend = url, backend
        self.max_in_flight, self.coalesce = max_in_flight, coalesce
        self.retry = retry if retry is not None else RetryPolicy()
        self.retries = 0
        self._lock = threading.Lock()
        self._indexed = known is not None
        self._first = b""  # the object's first bytes, taken at open when asked
        self._let_go = io_loop.hold(self)  # the I/O loop's thread lives while it is open
        if known is not None:  # size and version from an index: no request to open
            self._size, self.version = known
            return
        try:
            self._size, self.version, self._first = backend.run(
                lambda: self._guard(
                    self._open(backend, first), "HEAD", anew=lambda: self._open(backend, 0)
                )
            )
        except BaseException:
            self._let_go()
            raise

    def size(self) -> int:
        return int(self._size)

    def read_all(self) -> bytes:
        return self.read_ranges([(0, self._size)])[0] if self._size else b""

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """One ``bytes`` per ``(offset, length)``, in order; raises if any is out of bounds."""
        backend = self._backend
        if backend is None:
            raise ValueError(f"the source for {self.url} was closed.")
        return backend.run(lambda: self.read_ranges_async(ranges))

    @property
    def on_io_loop(self) -> bool:
        """Whether its requests run on the process's I/O loop (``read_many`` can batch them)."""
        from chute._remote.backends import ObstoreBackend

        return isinstance(self._backend, ObstoreBackend)

    async def read_ranges_async(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """``read_ranges`` as a coroutine, for the loop that runs the source's requests."""
        spans = [(int(o), int(o) + int(n)) for o, n in ranges]
        for (offset, length), (_, end) in zip(ranges, spans):
            if offset < 0 or length < 0 or end > self._size:
                raise ValueError(
                    f"range (offset={offset}, length={length}) is outside {self.url} "
                    f"({self._size} bytes)."
                )
        if self._first and all(end <= len(self._first) for _, end in spans):
            return [self._first[start:end] for start, end in spans]  # taken at open
        wanted = [i for i, (start, end) in enumerate(spans) if end > start]
        merged = merge_ranges([spans[i] for i in wanted], self.coalesce)
        out = [b""] * len(spans)
        if not merged:
            return out
        blobs = await self._fetch([(start, end) for start, end, _ in merged])
        for (base, _, members), blob in zip(merged, blobs):
            for i in (wanted[m] for m in members):
                start, end = spans[i]
                whole = (base, len(blob)) == (start, end - start)
                out[i] = blob if whole else blob[start - base : end - base]
        return out

    @property
    def streams(self) -> bool:
        """Whether ``stream_into`` hands a range over as it arrives (obstore's transport);
        fsspec's hands it over whole."""
        return hasattr(self._backend, "stream")

    def stream_into(self, start: int, end: int, write: Callable[[int, Any], None]) -> None:
        """Bytes ``start``-``end`` in one GET, each chunk handed to ``write(offset, chunk)``
        as it arrives (on the I/O loop: ``write`` must be quick); a failure is retried
        from where the bytes stopped, as ``read_ranges``'s requests are.  Only where
        ``streams``."""
        backend = self._backend
        if backend is None:
            raise ValueError(f"the source for {self.url} was closed.")
        if not self.streams:
            raise TypeError(f"{self.url} is read through fsspec, which does not stream.")
        if not 0 <= start <= end <= self._size:
            raise ValueError(f"bytes {start}-{end} are outside {self.url} ({self._size} bytes).")
        if start == end:
            return
        at = start

        async def rest() -> None:
            nonlocal at
            with _timed_request():
                async for chunk in backend.stream(at, end, self.version):
                    write(at, chunk)
                    at += len(chunk)
                    metrics.count("remote_bytes", len(chunk))
            if at != end:
                raise IncompleteAnswer(f"{self.url}: the answer for bytes {start}-{end} "
                                       f"stopped at {at}.")  # fmt: skip

        backend.run(lambda: self._guard(rest(), "GET", start, end, anew=rest))

    def close(self) -> None:
        self._backend = None
        self._let_go()

    def __enter__(self) -> RangedSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RangedSource({self.url!r}, size={self._size}, version={self.version!r})"

    async def _fetch(self, merged: list[tuple[int, int]]) -> list[bytes]:
        backend = self._backend
        if backend is None:
            raise ValueError(f"the source for {self.url} was closed.")
        gate = asyncio.Semaphore(self.max_in_flight)

        async def one(start: int, end: int) -> bytes:
            async with gate:
                return await self._guard(self._get(backend, start, end), "GET", start, end)

        blobs = await gather_or_cancel(one(s, e) for s, e in merged)
        if not backend.checks_each_read and self.version is not None:
            _, now = await self._guard(_head(backend), "HEAD")
            if now != self.version:
                raise self._changed(now)
        return list(blobs)

    async def _guard(self, first: Any, verb: str, start: int = 0, end: int = 0,
                     anew: Callable[[], Any] | None = None) -> Any:  # fmt: skip
        """Awaits ``first`` (a coroutine), retrying it (``anew()``: the call made again,
        by default the same request), and names the URL in errors."""
        backend, calls = self._backend, [first]

        def again() -> Any:
            if calls:
                return calls.pop()
            if anew is not None:
                return anew()
            if verb == "HEAD":
                return _head(backend)
            return self._get(backend, start, end)

        where = f"{verb} {self.url}" + (f" bytes {start}-{end}" if verb == "GET" else "")
        try:
            return await with_retries(again, self.retry, self._count, lambda: where)
        except Exception as exc:
            raise self._translate(exc) from exc

    async def _open(self, backend: Any, first: int) -> tuple[int, str | None, bytes]:
        """The object's size and version, and its first ``first`` bytes: in one GET where
        the transport tells the size with them (obstore's), else a HEAD alone (the bytes
        are then read when asked for)."""
        if first > 0 and hasattr(backend, "head_and_first"):
            try:
                with _timed_request():
                    size, version, data = await backend.head_and_first(first)
            except Exception as exc:  # an empty object (no range to answer), a missing
                # one, ...: the HEAD says which, and is retried as any open is.  A transient
                # failure is a request made again (as a HEAD): a retry, counted as one.
                if is_transient(exc):
                    self._count(exc)
            else:
                metrics.count("remote_bytes", len(data))
                if len(data) == min(first, size):
                    return size, version, data
        size, version = await _head(backend)
        return size, version, b""

    async def _get(self, backend: Any, start: int, end: int) -> bytes:
        """Bytes ``start``-``end``, whole: an answer cut short is a failure to retry."""
        with _timed_request():
            data = await backend.get(start, end, self.version)
        if len(data) != end - start:
            raise IncompleteAnswer(
                f"{self.url}: asked for bytes {start}-{end} and got {len(data)} bytes."
            )
        metrics.count("remote_bytes", len(data))
        return data

    def _count(self, exc: BaseException) -> None:
        with self._lock:
            self.retries += 1
        metrics.count("remote_retries")

    def _translate(self, exc: Exception) -> Exception:
        name = type(exc).__name__
        if isinstance(exc, ChuteError):  # says what it is, and what to do
            return exc
        if self._backend is not None and self._backend.is_changed_error(exc):
            return self._changed(None)
        if isinstance(exc, FileNotFoundError) or name == "NotFoundError":
            return FileNotFoundError(f"no object at {self.url}")
        if isinstance(exc, PermissionError) or name in (
            "PermissionDeniedError",
            "UnauthenticatedError",
        ):
            return PermissionError(f"access to {self.url} denied: {str(exc).splitlines()[0]}")
        return exc

    def _changed(self, now: str | None) -> SourceChangedError:
        seen = f" (now {now})" if now else ""
        if self._indexed:
            return SourceChangedError(
                f"{self.url} changed since its index was written: it was version "
                f"{self.version} then{seen}. Write the index again (chute index), or "
                "restore the object."
            )
        return SourceChangedError(
            f"{self.url} changed while it was being read: it was version {self.version} "
            f"when opened{seen}. Open it again to read the new version."
        )


@contextlib.contextmanager
def _timed_request() -> Iterator[None]:
    """Counts a GET in ``remote_requests`` and its latency in ``remote_read_seconds``,
    a failed one's too (not one cancelled because another of its batch failed)."""
    metrics.count("remote_requests")
    began = time.perf_counter()
    try:
        yield
    except Exception:
        metrics.observe("remote_read_seconds", time.perf_counter() - began)
        raise
    metrics.observe("remote_read_seconds", time.perf_counter() - began)


async def _head(backend: Any) -> tuple[int, str | None]:
    """The object's size and version (a HEAD request, counted)."""
    metrics.count("remote_requests")
    return await backend.head()


def read_many(requests: list[tuple[RangedSource, list[tuple[int, int]]]]) -> list[list[bytes]]:
    """``read_ranges`` of several sources at once: every request of every source in flight
    together on the process's I/O loop (each source still keeps ``max_in_flight``).

    The sources must all be ``on_io_loop``.
    """
    from chute._remote.io_loop import run_on_io_loop

    async def together() -> list[list[bytes]]:
        return await gather_or_cancel(s.read_ranges_async(r) for s, r in requests)

    return run_on_io_loop(together)


async def gather_or_cancel(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """The results of ``awaitables``, run concurrently, in order; the first to fail
    cancels the others (and their retries) and waits for them to end before it raises.

    ``asyncio.gather`` would raise at once and leave the others running, retrying for up
    to a policy's deadline, for a batch that has already failed.
    """
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    failed: list[BaseException] = []
    try:
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        done = [t for t in tasks if t.done() and not t.cancelled()]
        failed = [exc for t in done if (exc := t.exception()) is not None]
    finally:  # after a failure, or when this call is cancelled: nothing outlives it
        unfinished = [t for t in tasks if not t.done()]
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.wait(unfinished)
        for task in unfinished:  # retrieved, so that asyncio does not log them
            _ = task.cancelled() or task.exception()
    if failed:
        raise failed[0]
    return [t.result() for t in tasks]


def merge_ranges(
    spans: Sequence[tuple[int, int]], gap: int, max_bytes: int | None = None
) -> list[tuple[int, int, list[int]]]:
    """``(start, end)`` byte spans merged into as few ranges as read them all: spans at most
    ``gap`` bytes apart (or overlapping) join one range, and a range grows past ``max_bytes``
    only by one span that is larger alone.  Each range comes as ``(start, end, members)``,
    in order of ``start``; ``members`` are the positions in ``spans`` of the spans it covers.

    chute's one range merger: a remote source's reads, ``RangedFile.prefetch`` and the
    ArrayRecord reader's chunks all merge through it.

    >>> merge_ranges([(50, 60), (0, 10), (12, 20)], gap=2)
    [(0, 20, [1, 2]), (50, 60, [0])]
    >>> merge_ranges([(0, 10), (10, 20), (20, 30)], gap=0, max_bytes=20)
    [(0, 20, [0, 1]), (20, 30, [2])]
    """
    merged: list[tuple[int, int, list[int]]] = []
    limit = math.inf if max_bytes is None else max_bytes
    first = last = 0
    members: list[int] = []
    for i in sorted(range(len(spans)), key=spans.__getitem__):
        start, end = spans[i]
        if members and start - last <= gap:
            top = end if end > last else last
            if top - first <= limit:
                members.append(i)
                last = top
                continue
        if members:
            merged.append((first, last, members))
        first, last, members = start, end, [i]
    if members:
        merged.append((first, last, members))
    return merged
