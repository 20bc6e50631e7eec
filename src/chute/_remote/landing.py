"""Reading a download's bytes as they land, so that epoch 1 does not fetch them twice.

While the shard cache (``shard_cache``) downloads an object into ``partial/<name>``, the
records a training loop asks for would otherwise come from the bucket too, by ranged
GETs that compete with the download for the network, the store and the cores.  The
download writes the object in order and says how far it got in a small record,
``landed/<name>``, that every process of the host can read: after each chunk of its one
streamed GET (obstore's transport), or after each group of ``PART_BYTES *
PARTS_IN_FLIGHT`` bytes (fsspec's).  A ``LandingSource`` wraps an object's bucket source
and, for each range asked:

* reads it from the partial file when it has landed;
* waits for it (at most ``WAIT_S``, polling the record) when the download's process is
  alive (it holds the partial file's lock) and the range is in what it fetches now, or
  when this process downloads the object now or next and has not begun writing it;
* reads it from the bucket otherwise, while it waits for the others.

**Never a wrong byte.**  A record holds the download's attempt (a random number), the
partial file's inode, how many bytes have landed, the end of what it fetches now and a
checksum of those.  A reader trusts a record only if its checksum holds (a read that
raced a write is not taken) and it names the inode the reader opened.  A process that
takes over a dead download's partial file writes a new attempt *before* it truncates the
file, and a reader checks after reading that the attempt it read before is still there,
so bytes of a file truncated meanwhile are never returned.  A dead download's landed
bytes stay good (the file is named by the object's version); the rest comes from the
bucket without waiting.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from chute._core import metrics
from chute._core.fork import ForkCheck
from chute._remote.ranged_source import _pread_all

__all__ = ["LandingSource", "LandingView", "Progress"]

WAIT_S = 2.0  # the longest a read waits for a group being downloaded, then the bucket
POLL_S = 0.002  # how often a waiting read looks at the record
RETRY_OPEN_S = 0.01  # a read looks for a download not yet begun at most this often

_RECORD = struct.Struct("<QQQQQ")  # attempt, inode, landed, landing_to, check
_MASK = (1 << 64) - 1


def _check(attempt: int, inode: int, landed: int, landing_to: int) -> int:
    return (
        attempt * 0x9E3779B97F4A7C15
        ^ inode * 0xC2B2AE3D27D4EB4F
        ^ landed * 0x165667B19E3779F9
        ^ landing_to * 0x27D4EB2F165667C5
        ^ 0x6368757465
    ) & _MASK


class Progress:
    """A download's side: the record of how far it got (``landed/<name>``).

    Made right after the partial file is claimed and before it is truncated, with a new
    attempt, so that readers of an earlier attempt on the same file stop trusting it.
    """

    def __init__(self, path: str, partial_fd: int) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._attempt = secrets.randbits(64)
        try:
            self._inode = os.fstat(partial_fd).st_ino
            self.say(0, 0)
        except BaseException:  # a full disk: nothing of it is left
            self.close()
            raise

    def say(self, landed: int, landing_to: int) -> None:
        """Bytes ``[0, landed)`` are in the partial file; ``[landed, landing_to)`` come next."""
        fields = (self._attempt, self._inode, landed, landing_to)
        os.pwrite(self._fd, _RECORD.pack(*fields, _check(*fields)), 0)

    def close(self) -> None:
        """Closes the record and deletes it: the download is over, whole or abandoned."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class LandingView:
    """A reader's side: what the download of one object on this host has landed so far."""

    def __init__(self, partial_path: str, record_path: str,
                 queued: Callable[[], bool] | None = None) -> None:  # fmt: skip
        self._partial_path, self._record_path = partial_path, record_path
        self._queued = queued  # whether this process downloads it now or next
        self._fds: tuple[int, int] | None = None
        self._inode = 0
        self._looked = -RETRY_OPEN_S
        self._opening = threading.Lock()  # the reads of one shard run on several threads
        self._made = ForkCheck()
        self.landing_to = 0  # the end of what the download fetches now, at the last look

    def _open(self) -> bool:
        """Whether a download's files are open (opened now if one has begun)."""
        if self._made.forked():  # a child looks again for itself
            self._fds, self._made, self._opening = None, ForkCheck(), threading.Lock()
        if self._fds is not None:
            return True
        with self._opening:
            return self._fds is not None or self._open_now()

    def _open_now(self) -> bool:
        now = time.monotonic()
        if now - self._looked < RETRY_OPEN_S:
            return False
        self._looked = now
        try:
            record = os.open(self._record_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            partial = os.open(self._partial_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # just renamed (the copy is whole) or abandoned
            os.close(record)
            return False
        self._fds, self._inode = (partial, record), os.fstat(partial).st_ino
        return True

    def _record(self) -> tuple[int, int, int] | None:
        """``(attempt, landed, landing_to)`` of the download of the opened file; None when
        the record belongs to another file or was read while being written."""
        assert self._fds is not None
        data = os.pread(self._fds[1], _RECORD.size, 0)
        if len(data) != _RECORD.size:
            return None
        attempt, inode, landed, landing_to, check = _RECORD.unpack(data)
        if inode != self._inode or check != _check(attempt, inode, landed, landing_to):
            return None
        return attempt, landed, landing_to

    def take(self, ranges: list[tuple[int, int]]) -> list[bytes | None]:
        """The bytes of each range that has landed; None for the others."""
        out: list[bytes | None] = [None] * len(ranges)
        if not ranges or not self._open():
            return out
        before = self._record()
        if before is None:
            return out
        attempt, landed, self.landing_to = before
        assert self._fds is not None
        for i, (offset, length) in enumerate(ranges):
            if offset >= 0 and length >= 0 and offset + length <= landed:
                out[i] = _pread_all(self._fds[0], length, offset)
        if any(b is not None for b in out):
            after = self._record()
            if after is None or after[0] != attempt:  # the file was taken over meanwhile
                return [None] * len(ranges)
            metrics.count("cache_bytes_read", sum(len(b) for b in out if b is not None))
        return out

    def coming(self, ranges: list[tuple[int, int]], which: list[int]) -> list[int]:
        """Those of ``which`` whose bytes are being downloaded now, by a process that is
        alive, or all of them where this process's download of the object has not written
        its record yet but runs now or next (``queued``): worth waiting for."""
        if not which:
            return []
        if self._fds is None:
            return list(which) if self._queued is not None and self._queued() else []
        soon = [i for i in which if sum(ranges[i]) <= self.landing_to]
        return soon if soon and self._downloading() else []

    def _downloading(self) -> bool:
        """Whether a process holds the partial file's lock (its download goes on)."""
        assert self._fds is not None
        try:
            fcntl.flock(self._fds[0], fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._fds[0], fcntl.LOCK_UN)
        return False

    def close(self) -> None:
        fds, self._fds = self._fds, None
        if fds is not None and not self._made.forked():
            for fd in fds:
                os.close(fd)

    def __del__(self) -> None:
        self.close()


def _unread(out: list[Any]) -> list[int]:
    return [i for i, data in enumerate(out) if data is None]


def _count_read(from_bucket: bool) -> None:
    """One read of an object the cache keeps: a miss where the bucket served some of it,
    else a hit (all of it had landed)."""
    metrics.count("cache_misses" if from_bucket else "cache_hits")


class LandingSource:
    """An object's bucket source whose reads take what a download of it has landed (see
    the module); everything else is the bucket source's.

    Args:
        inner: The bucket source (``RangedSource``).
        view: The download's ``LandingView``.
    """

    def __init__(self, inner: Any, view: LandingView) -> None:
        self._inner, self._view = inner, view
        self.url, self.version = inner.url, inner.version

    @property
    def retries(self) -> int:
        return int(getattr(self._inner, "retries", 0) or 0)

    @property
    def on_io_loop(self) -> bool:
        return bool(getattr(self._inner, "on_io_loop", False))

    def size(self) -> int:
        return int(self._inner.size())

    def read_all(self) -> bytes:
        return self.read_ranges([(0, self.size())])[0]

    def _plan(self, ranges: list[tuple[int, int]]) -> tuple[list[Any], list[int], set[int]]:
        """What has landed (taken now), the ranges to fetch from the bucket, and those
        worth waiting for."""
        out = self._view.take(ranges)
        missing = [i for i, b in enumerate(out) if b is None]
        coming = set(self._view.coming(ranges, missing))
        return out, [i for i in missing if i not in coming], coming

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        out, fetch, coming = self._plan(ranges)
        self._fill(out, fetch, self._inner.read_ranges, ranges)
        deadline = time.monotonic() + WAIT_S
        while coming and time.monotonic() < deadline:
            time.sleep(POLL_S)
            coming = self._landed(out, ranges, coming)
        # The bucket serves what did not land: given up on, or no longer coming.
        unread = _unread(out)
        self._fill(out, unread, self._inner.read_ranges, ranges)
        _count_read(bool(fetch or unread))
        return out  # every range read: none left None

    async def read_ranges_async(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """``read_ranges`` on the I/O loop (``read_many``): the bucket's reads and the
        waits for landing bytes go on together."""
        out, fetch, coming = self._plan(ranges)

        async def from_bucket(which: list[int]) -> None:
            if which:
                got = await self._inner.read_ranges_async([ranges[i] for i in which])
                for i, data in zip(which, got):
                    out[i] = data

        async def landing() -> None:
            nonlocal coming
            deadline = time.monotonic() + WAIT_S
            while coming and time.monotonic() < deadline:
                await asyncio.sleep(POLL_S)
                coming = self._landed(out, ranges, coming)

        if coming:
            from chute._remote.ranged_object import gather_or_cancel

            await gather_or_cancel([from_bucket(fetch), landing()])
        else:
            await from_bucket(fetch)
        unread = _unread(out)
        await from_bucket(unread)  # gave up on them, or they are no longer coming
        _count_read(bool(fetch or unread))
        return out  # every range read: none left None

    def _landed(self, out: list[Any], ranges: list[tuple[int, int]], coming: set[int]) -> set[int]:
        """Takes those of ``coming`` that landed; the ones still worth waiting for."""
        which = sorted(coming)
        got = self._view.take([ranges[i] for i in which])
        for i, data in zip(which, got):
            if data is not None:
                out[i] = data
        left = [i for i, data in zip(which, got) if data is None]
        return set(self._view.coming(ranges, left)) if left else set()

    @staticmethod
    def _fill(out: list[Any], which: list[int], read: Any, ranges: list[tuple[int, int]]) -> None:
        if which:
            for i, data in zip(which, read([ranges[i] for i in which])):
                out[i] = data

    def close(self) -> None:
        self._view.close()
        self._inner.close()

    def __enter__(self) -> LandingSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return str(self._inner)

    def __repr__(self) -> str:
        return f"LandingSource({self._inner!r})"
