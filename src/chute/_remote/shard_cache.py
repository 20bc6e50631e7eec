"""``ShardCache``: whole local copies of objects in a bucket, shared by every process of a host.

Reading from a bucket pays a request per chunk, every epoch.  With a cache, a source's
first read of an object starts a download of the whole object in the background, and
once the copy is complete the source reads it as a local file: epoch 2 costs what
reading local files costs.  A global shuffle's first batch touches nearly every shard,
so the shards are fetched in the order the reads first need them.  A download streams
its object in one GET and writes it as it arrives; meanwhile the reads take what it has
written and wait for the rest, rather than fetch those bytes again (``landing``; the
record of each download's progress is ``landed/<name>``).  Only the reads of an object
whose download neither runs nor comes next go to the bucket, so a data set of many
more shards than ``DOWNLOADS`` is not held up by downloads that have not begun.

**One copy per host.**  Every process and iterator that names the same directory
shares its copies.  A download is claimed with a lock on its partial file, so a second
process that wants the same object reads from the bucket meanwhile instead of
fetching it twice.

**Never stale, never half.**  A copy's name is a hash of the object's URL and its
version (ETag or generation), so a replaced object is a different copy.  A download
writes ``partial/<name>`` and is renamed into ``objects/<name>`` only once every byte
arrived: a copy under ``objects/`` is always whole.  A process killed mid-download
leaves a partial file whose lock died with it; the next reservation deletes it.

**Bounded.**  ``limit`` bytes of copies and downloads in flight, all processes
together: a download reserves its object's full size (``posix_fallocate``) under the
directory's lock, after evicting the least recently used copies that no reader holds
(a reader holds a shared lock on its copy).  When nothing can be evicted, the object is
simply read from the bucket.  Without a limit, it is the disk's whole size: the copies
take what is free, as a download starts only while the disk's free space stays above
``min_free`` beyond the bytes it reserves.  A full disk (found before a download
starts, or as it allocates) or a file size limit stops caching, logs once, and reads go
on from the bucket.  A directory this user cannot write is refused at open.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import functools
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from chute._core import metrics
from chute._core.fork import ForkCheck
from chute._remote import io_loop
from chute._remote.landing import LandingSource, LandingView, Progress
from chute._remote.ranged_source import _pread_all

logger = logging.getLogger("chute")

__all__ = ["CachedCopy", "CopySource", "ShardCache", "open_through", "parse_bytes"]

DOWNLOADS = 32  # objects downloaded at once, per process (small ones: latency bounds them)
# Sources that cannot stream (fsspec's) download in ranged GETs of PART_BYTES, in groups
# of PARTS_IN_FLIGHT that land one after the other, within BYTES_IN_FLIGHT requested and
# not yet written per process; a stream holds one chunk (backends.STREAM_CHUNK) at a time.
PART_BYTES = 4 << 20
PARTS_IN_FLIGHT = 4
BYTES_IN_FLIGHT = 64 << 20
CONFIRMED_FOR_S = 60.0  # a version the bucket confirmed this recently needs no new request
ASK_AGAIN_S = 60.0  # a download that did not happen (no room, another process's) is retried after
_FULL_DISK = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}  # fmt: skip


def parse_bytes(value: int | str, what: str) -> int:
    """A size in bytes from an int or a string such as ``"20GB"``, ``"512 MiB"``, ``"1.5TB"``.

    >>> parse_bytes("20GB", "x"), parse_bytes("512 MiB", "x"), parse_bytes(4096, "x")
    (20000000000, 536870912, 4096)
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(
            f"{what} must be a number of bytes or a string like '20GB' (got {value!r})."
        )
    if isinstance(value, int):
        number = value
    else:
        found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        unit = found.group(2).lower() if found else ""
        if found is None or unit not in _UNITS:
            raise ValueError(
                f"{what}: cannot read {value!r} as a size; write bytes as an int or a string "
                "like '20GB', '512MiB' or '1.5TB'."
            )
        number = int(float(found.group(1)) * _UNITS[unit])
    if number <= 0:
        raise ValueError(f"{what} must be more than 0 bytes (got {value!r}).")
    return number


def _name(url: str, version: str) -> str:
    """The file name of ``url`` at ``version``: a hash of both, and the object's own name."""
    digest = hashlib.sha256(f"{url}\0{version}".encode()).hexdigest()[:32]
    tail = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rpartition("/")[2])[-80:]
    return f"{digest}-{tail}"


class CachedCopy:
    """A whole local copy, held open: while held, no process evicts it.

    Attributes:
        path: The copy's path, to open with a local reader.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path, self._fd = path, fd
        self._made = ForkCheck()

    def close(self) -> None:
        """Lets go of the copy (it may be evicted once no reader holds it)."""
        fd, self._fd = self._fd, -1
        if fd >= 0 and not self._made.forked():
            os.close(fd)  # the shared lock goes with it

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CachedCopy({self.path!r})"


class ShardCache:
    """A directory of whole copies of remote objects, at most ``limit`` bytes (see the module).

    Args:
        directory: Where the copies live; made if missing.  Every process that names it
            shares it.
        limit: The most bytes of copies (an int, or a string like ``"20GB"``); None: as
            much as the disk holds, ``min_free`` kept free.
        min_free: Free bytes to leave on the directory's disk (default: 5% of the disk,
            at most 1 GiB).

    Picklable: worker processes get the same directory and limit.
    """

    def __init__(self, directory: str | os.PathLike[str], limit: int | str | None = None,
                 min_free: int | None = None) -> None:  # fmt: skip
        self.directory = os.path.abspath(os.fspath(directory))
        self._objects = os.path.join(self.directory, "objects")
        self._partial = os.path.join(self.directory, "partial")
        self._marks = os.path.join(self.directory, "confirmed")  # when each version was seen
        self._landed = os.path.join(self.directory, "landed")  # how far each download got
        try:
            for path in (self._objects, self._partial, self._marks, self._landed):
                os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cache_dir {self.directory!r} cannot be made: {exc.strerror}"
            ) from None
        _check_writable(self.directory)
        disk = os.statvfs(self.directory)
        whole = disk.f_blocks * disk.f_frsize
        self.limit = whole if limit is None else parse_bytes(limit, "cache_limit")
        self.min_free = min(1 << 30, whole // 20) if min_free is None else min_free
        with contextlib.suppress(OSError):  # what the host holds here, whoever downloaded it
            metrics.set_gauge("cache_bytes_held", self._held_now())
        self._closing = threading.Event()  # set while close() stops this cache's downloads

    def close(self) -> None:
        """Stops this cache's downloads in this process: those queued are dropped, those
        running end at their next chunk (their partial files deleted), and the download
        threads that have no other work end before it returns.  The cache stays usable: a
        later read starts its downloads again."""
        self._closing.set()
        try:
            _downloads().cancel(self)
        finally:
            self._closing.clear()

    def abandon(self) -> None:
        """What ``close()`` does, without waiting (for a source's finalizer, which may run in
        any thread, holding any lock): this cache's downloads stop at their next chunk, and
        those queued are skipped; their threads end by themselves."""
        self._closing.set()  # for good: the source that used it is gone

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "limit": self.limit, "min_free": self.min_free}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"], state["limit"], state["min_free"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"ShardCache({self.directory!r}, limit={self.limit})"

    def check_fits(self, url: str, size: int) -> None:
        """Refuses a limit smaller than the object at ``url``: it could never be cached."""
        if size > self.limit:
            raise ValueError(
                f"cache_limit of {self.limit:,} bytes is smaller than {url} ({size:,} "
                f"bytes): no copy of it could ever be kept. Raise cache_limit above the "
                f"largest shard, or read without a cache (cache_dir=None)."
            )

    # -- reading ---------------------------------------------------------------------

    def path_of(self, url: str, version: str | None) -> str:
        """Where the whole copy of ``url`` at ``version`` is (or would be)."""
        return os.path.join(self._objects, _name(url, str(version)))

    def has(self, url: str, version: str | None) -> bool:
        """Whether a whole copy is there now (it may be evicted before it is opened)."""
        return bool(version) and os.path.exists(self.path_of(url, version))

    def _mark(self, url: str, version: str) -> str:
        """The file whose modification time says when ``url`` at ``version`` was last seen."""
        return os.path.join(self._marks, _name(url, version))

    def confirmed_lately(self, url: str, version: str | None) -> bool:
        """Whether some process of this host saw the bucket hold ``url`` at ``version``
        (a HEAD, or the download's own requests) less than ``CONFIRMED_FOR_S`` ago."""
        if not version:
            return False
        try:
            seen = os.stat(self._mark(url, version)).st_mtime
        except FileNotFoundError:
            return False
        return time.time() - seen < CONFIRMED_FOR_S

    def mark_confirmed(self, url: str, version: str | None) -> None:
        """Notes, for every process of the host, that the bucket holds ``url`` at ``version``
        now."""
        if not version:
            return
        path = self._mark(url, version)
        try:
            with open(path, "a"):
                os.utime(path)
        except OSError:  # a mark is a shortcut only
            pass

    def open_copy(self, url: str, version: str | None) -> CachedCopy | None:
        """The whole copy of ``url`` at ``version``, held; None where there is none."""
        if not version:
            return None
        path = self.path_of(url, version)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)  # an eviction holds the exclusive lock for an instant
        if os.fstat(fd).st_nlink == 0:  # evicted between the open and the lock
            os.close(fd)
            return None
        try:
            os.utime(fd)  # the least recently used copies are evicted first
        except PermissionError:  # another user's copy, in a directory shared with them
            pass
        return CachedCopy(path, fd)  # (its reads count the hits: CopySource, the readers)

    def landing(self, url: str, version: str | None, source: Any) -> Any:
        """``source`` (``url``'s bucket source, at ``version``), reading what a download of
        it on this host has landed instead of the bucket (``landing.LandingSource``)."""
        if not version:
            return source
        name = _name(url, version)
        view = LandingView(
            os.path.join(self._partial, name),
            os.path.join(self._landed, name),
            queued=functools.partial(_downloading_soon, (self.directory, name)),
        )
        return LandingSource(source, view)

    # -- downloading -----------------------------------------------------------------

    def fetch_later(self, url: str, version: str | None, size: int,
                    open_source: Callable[[], Any]) -> None:  # fmt: skip
        """Downloads ``url`` at ``version`` in the background, unless there, claimed by
        another process, or this process already did or does; ``open_source()`` gives a
        ranged source of exactly that version."""
        if not version:
            return
        _downloads().submit(self, url, version, size, open_source)

    def _download(self, url: str, version: str, size: int, open_source: Callable[[], Any],
                  in_flight: _Bytes) -> bool:  # fmt: skip
        """Fetches one object into the cache, within the budget ``in_flight`` of bytes
        requested and not yet written; whether the copy is there at the end."""
        name = _name(url, version)
        final = os.path.join(self._objects, name)
        if os.path.exists(final):
            return True
        try:
            reserved = self._reserve(name, size)
        except OSError as exc:  # a disk full before any check: creating a file fails
            if exc.errno not in _FULL_DISK:
                raise
            _once(f"disk:{self.directory}", "chute: the disk of the cache at %s is full "
                  "(%s); objects are read from the bucket.", self.directory,
                  exc.strerror)  # fmt: skip
            return False
        if reserved is None:
            return os.path.exists(final)
        fd, progress = reserved
        partial = os.path.join(self._partial, name)
        done = False
        try:
            source = open_source()
            try:
                if getattr(source, "streams", False):
                    _stream(source, fd, size, progress, self._closing)
                else:
                    _in_groups(source, fd, size, progress, in_flight, self._closing)
            finally:
                source.close()
            if os.fstat(fd).st_size != size:
                raise OSError(f"{partial} holds {os.fstat(fd).st_size} bytes, not {size}")
            os.fdatasync(fd)  # the data is on disk before its name says it is whole
            with _Locked(os.path.join(self.directory, ".lock")):  # as _used() counts
                os.rename(partial, final)  # (between the two folders, it would miss it)
            self.mark_confirmed(url, version)  # its requests named the version
            done = True
        except _Stopped:
            pass  # close() stops it: the partial file goes
        except Exception as exc:
            logger.info("chute: the cache did not keep %s (%s); it is read from the bucket.",
                        url, exc)  # fmt: skip
        finally:
            if not done:
                _unlink(partial)
            progress.close()
            os.close(fd)  # the claim goes with it
        return done

    def _reserve(self, name: str, size: int) -> tuple[int, Progress] | None:
        """The claimed partial file of ``name``, ``size`` bytes allocated within the limit,
        and the record of its progress; None where another process downloads it, or no
        room can be made."""
        with _Locked(os.path.join(self.directory, ".lock")):
            if os.path.exists(os.path.join(self._objects, name)):
                return None
            path = os.path.join(self._partial, name)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another process downloads it
                os.close(fd)
                return None
            progress = None
            try:
                # A new attempt first: readers of a dead download's bytes in this file
                # stop trusting them before they are truncated (see landing).
                progress = Progress(os.path.join(self._landed, name), fd)
                os.ftruncate(fd, 0)  # a dead process's partial file of the same object
                used = self._used(mine=path)
                if used + size > self.limit:
                    used -= self._evict(used + size - self.limit)
                if used + size > self.limit:
                    _once(f"full:{self.directory}", "chute: the cache at %s is full of copies "
                          "in use (limit %s bytes); the other objects are read from the "
                          "bucket.", self.directory, f"{self.limit:,}")  # fmt: skip
                    raise _NoRoom
                disk = os.statvfs(self.directory)
                if disk.f_bavail * disk.f_frsize - size < self.min_free:
                    _once(f"disk:{self.directory}", "chute: the disk of the cache at %s has "
                          "less than %s bytes free; objects are read from the bucket.",
                          self.directory, f"{self.min_free + size:,}")  # fmt: skip
                    raise _NoRoom
                try:
                    if size:  # (an empty object has nothing to allocate: EINVAL)
                        os.posix_fallocate(fd, 0, size)
                except OSError as exc:
                    if exc.errno not in _FULL_DISK:
                        raise
                    _once(f"disk:{self.directory}", "chute: the cache at %s could not "
                          "allocate %s bytes (%s); objects are read from the bucket.",
                          self.directory, f"{size:,}", exc.strerror)  # fmt: skip
                    raise _NoRoom from None
                metrics.set_gauge("cache_bytes_held", used + size)
                return fd, progress
            except BaseException as exc:
                _unlink(path)
                if progress is not None:
                    progress.close()
                os.close(fd)
                if isinstance(exc, _NoRoom):
                    return None
                raise

    def _used(self, mine: str = "") -> int:
        """Bytes of copies and of downloads in flight; a dead process's partial files
        are deleted on the way (their lock died with it)."""
        total = 0
        for entry in os.scandir(self._objects):
            total += _size(entry)
        for entry in os.scandir(self._partial):
            if entry.path == mine:
                continue
            if _claimable(entry.path):
                _unlink(entry.path)
                _unlink(os.path.join(self._landed, entry.name))
            else:
                total += _size(entry)
        return total

    def _evict(self, wanted: int) -> int:
        """Deletes the least recently used copies no reader holds, until ``wanted`` bytes
        are free; the bytes freed."""
        copies = []
        for entry in os.scandir(self._objects):
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            copies.append((stat.st_mtime_ns, entry.path, stat.st_size))
        freed = 0
        for _, path, size in sorted(copies):
            if freed >= wanted:
                break
            if _claimable(path, unlink=True):
                _unlink(os.path.join(self._marks, os.path.basename(path)))
                freed += size
                metrics.count("cache_evictions")
        return freed

    def held_bytes(self) -> int:
        """Bytes of whole copies now."""
        return sum(_size(e) for e in os.scandir(self._objects))

    def _held_now(self) -> int:
        """Bytes of whole copies and of downloads under way, by any process of the host."""
        return self.held_bytes() + sum(_size(e) for e in os.scandir(self._partial))


def _check_writable(directory: str) -> None:
    """Refuses a cache directory (or one of its folders) this process cannot write: made
    by another user, or on a read-only disk."""
    folders = ("", "objects", "partial", "confirmed", "landed")
    paths = [os.path.join(directory, f) for f in folders] + [os.path.join(directory, ".lock")]
    for path in paths:
        if os.path.exists(path) and not os.access(path, os.W_OK):
            owner = os.stat(path).st_uid
            raise PermissionError(
                errno.EACCES,
                f"cache_dir {directory!r} cannot be written by this user ({path} belongs to "
                f"user id {owner}, and this process runs as {os.geteuid()}; or its disk is "
                "read-only). Pass a cache_dir of your own, or let this user write it "
                f"(chmod -R g+w, or chown -R, on {directory}).",
            )


class _NoRoom(Exception):
    """No room for a download: the object is read from the bucket."""


class _Stopped(Exception):
    """The cache was closed while it downloaded the object."""


def _size(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat().st_size
    except FileNotFoundError:
        return 0


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _claimable(path: str, unlink: bool = False) -> bool:
    """Whether no process holds ``path`` (an exclusive lock can be taken); with ``unlink``,
    deletes it while no one can take it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        if unlink:
            _unlink(path)
        return True
    finally:
        os.close(fd)


def _stream(source: Any, fd: int, size: int, progress: Progress, stop: threading.Event) -> None:
    """Downloads the object in one streamed GET, each chunk written and said landed as it
    arrives, so that readers wait only for the bytes they need; a process's streams hold
    a chunk each (``backends.STREAM_CHUNK``)."""
    progress.say(0, size)  # readers may wait for any of it

    def write(offset: int, chunk: Any) -> None:
        if stop.is_set():
            raise _Stopped
        _pwrite_all(fd, chunk, offset)
        progress.say(offset + len(chunk), size)
        metrics.count("cache_bytes_downloaded", len(chunk))

    source.stream_into(0, size, write)


def _in_groups(source: Any, fd: int, size: int, progress: Progress, in_flight: _Bytes,
               stop: threading.Event) -> None:  # fmt: skip
    """Downloads the object in groups of ``PARTS_IN_FLIGHT`` ranged GETs, one group after
    the other, within the process's budget ``in_flight`` (sources that cannot stream)."""
    step = PART_BYTES * PARTS_IN_FLIGHT
    for start in range(0, size, step):
        if stop.is_set():
            raise _Stopped
        end = min(size, start + step)
        parts = [(o, min(PART_BYTES, size - o)) for o in range(start, end, PART_BYTES)]
        with in_flight.taking(end - start):
            progress.say(start, end)  # readers may wait for these bytes
            for (offset, _), data in zip(parts, source.read_ranges(parts)):
                _pwrite_all(fd, data, offset)
        progress.say(end, end)  # in the file now: readers take them from it
        metrics.count("cache_bytes_downloaded", end - start)


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(errno.EIO, f"could not write at offset {offset} of the cache's copy")
        view, offset = view[written:], offset + written


class _Locked:
    """The directory's lock, held by one process (and thread) at a time."""

    _threads = threading.Lock()

    def __init__(self, path: str) -> None:
        self._path = path

    def __enter__(self) -> None:
        self._threads.acquire()
        try:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._threads.release()
            raise

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)
        self._threads.release()

    @classmethod
    def after_fork(cls) -> None:
        """A forked child's lock: a thread of the parent may have held the parent's."""
        cls._threads = threading.Lock()


os.register_at_fork(after_in_child=_Locked.after_fork)


_said: set[str] = set()


def _once(key: str, message: str, *args: Any) -> None:
    """Logs ``message`` once per process and ``key``."""
    if key not in _said:
        _said.add(key)
        logger.warning(message, *args)


class _Downloads:
    """This process's downloads: ``DOWNLOADS`` at once on daemon threads, in the order
    asked, each object once (those in groups within ``BYTES_IN_FLIGHT`` requested and not
    yet written).  A thread ends when no download is left to start, so none outlives the
    work; ``cancel`` stops a cache's.  At exit they are abandoned where they are: a partial
    file is never taken for a copy."""

    def __init__(self) -> None:
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._threads: list[threading.Thread] = []
        self._ended: list[threading.Thread] = []  # threads that left _work, to join
        self._running: dict[threading.Thread, tuple[Any, ...]] = {}  # each thread's job
        self._asked: dict[tuple[str, str], float] = {}  # when each was last asked for
        # Each queued or running download's place in the queue, and how many began: the
        # queue is first in, first out, so a place less than DOWNLOADS past the ones that
        # began is a download that runs now or as soon as one of those ends.
        self._places: dict[tuple[str, str], int] = {}
        self._queued = self._began = 0
        self._lock = threading.Condition()
        self._in_flight = _Bytes(BYTES_IN_FLIGHT)  # this process's, as the threads are
        self.made = ForkCheck()

    def submit(self, cache: ShardCache, url: str, version: str, size: int,
               open_source: Callable[[], Any]) -> None:  # fmt: skip
        key = (cache.directory, _name(url, version))
        now = time.monotonic()
        with self._lock:
            if now - self._asked.get(key, -ASK_AGAIN_S) < ASK_AGAIN_S:
                return
            self._asked[key] = now
            self._places[key] = self._queued
            self._queued += 1
            self._queue.append((key, cache, url, version, size, open_source))
            self._ended = [t for t in self._ended if t.is_alive()]  # those gone need no join
            if len(self._threads) < DOWNLOADS:
                name = f"chute-cache_{len(self._threads)}"
                thread = threading.Thread(target=self._work, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()

    def soon(self, key: tuple[str, str]) -> bool:
        """Whether this process downloads ``key`` (``(directory, name)``) now or as soon
        as one of the downloads running now ends: worth waiting for."""
        with self._lock:
            place = self._places.get(key)
            return place is not None and place - self._began < DOWNLOADS

    def cancel(self, cache: ShardCache) -> None:
        """Drops ``cache``'s queued downloads, waits for its running ones (told to stop by
        ``cache``), and joins the threads that ended meanwhile."""
        with self._lock:
            for job in [job for job in self._queue if job[1] is cache]:
                self._queue.remove(job)
                self._places.pop(job[0], None)
                self._asked.pop(job[0], None)  # asked for again after a later read
            me = threading.current_thread()
            stopped = [job for job in self._running.values() if job[1] is cache]
            if not io_loop.on_loop_thread():  # (where the downloads' streams run)
                self._lock.wait_for(
                    lambda: all(j[1] is not cache or t is me for t, j in self._running.items())
                )
            for job in stopped:
                if self._asked.get(job[0]) != float("inf"):  # stopped before it was whole
                    self._asked.pop(job[0], None)
            ended, self._ended = self._ended, []
        for thread in ended:
            if thread is not threading.current_thread():
                thread.join()

    def _work(self) -> None:
        me = threading.current_thread()
        job: tuple[Any, ...] | None = None
        while True:
            with self._lock:
                if job is not None:
                    self._places.pop(job[0], None)
                    del self._running[me]
                while self._queue and self._queue[0][1]._closing.is_set():  # abandoned
                    key = self._queue.popleft()[0]
                    self._places.pop(key, None)
                    self._asked.pop(key, None)
                if not self._queue:  # nothing left: the thread ends (submit starts another)
                    self._threads.remove(me)
                    self._ended.append(me)
                    self._lock.notify_all()
                    return
                job = self._queue.popleft()
                self._running[me] = job
                self._began += 1
                self._lock.notify_all()
            self._run(*job)

    def _run(self, key: tuple[str, str], cache: ShardCache, url: str, version: str, size: int,
             open_source: Callable[[], Any]) -> None:  # fmt: skip
        started = time.perf_counter()
        try:
            if cache._download(url, version, size, open_source, self._in_flight):
                logger.debug("chute: cached %s in %.2f s", url, time.perf_counter() - started)
                with self._lock:
                    self._asked[key] = float("inf")  # there now: never asked for again
        except Exception:  # a download is only ever a shortcut: reads go on from the bucket
            logger.debug("chute: download of %s failed", url, exc_info=True)


class _Bytes:
    """A budget of bytes in flight, shared by a process's downloads."""

    def __init__(self, limit: int) -> None:
        self._limit, self._used = limit, 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def taking(self, n: int) -> Iterator[None]:
        """Holds ``n`` bytes of the budget (all of it, for more than it has) meanwhile."""
        n = min(n, self._limit)
        with self._changed:
            self._changed.wait_for(lambda: self._used + n <= self._limit)
            self._used += n
        try:
            yield
        finally:
            with self._changed:
                self._used -= n
                self._changed.notify_all()


def _downloading_soon(key: tuple[str, str]) -> bool:
    """Whether this process downloads ``key`` now or next (``_Downloads.soon``)."""
    return _downloads().soon(key)


_downloader: _Downloads | None = None
_downloader_lock = threading.Lock()


def _downloads() -> _Downloads:
    global _downloader
    with _downloader_lock:
        if _downloader is None or _downloader.made.forked():
            _downloader = _Downloads()
        return _downloader


def open_through(cache: ShardCache | None, url: str, *, filesystem: Any = None) -> Any:
    """``open_source(url)``, read from ``cache``'s whole copy where it holds the version the
    bucket has now (one HEAD tells), else from the bucket, with the copy's download
    started.  The copy stays held (not evicted) until the returned source closes.

    For readers that open an object by its URL (Parquet, TFRecord); the ArrayRecord
    reader keeps its shards' versions in its index and asks the cache itself.
    """
    from chute._remote.open import open_source
    from chute._remote.ranged_object import RangedSource

    source = open_source(url, filesystem=filesystem)
    if cache is None or not isinstance(source, RangedSource) or not source.version:
        return source
    version, size = str(source.version), source.size()
    cache.check_fits(url, size)
    copy = cache.open_copy(url, version)
    if copy is None:
        known = (size, version)
        cache.fetch_later(
            url, version, size, lambda: open_source(url, filesystem=filesystem, known=known)
        )
        return cache.landing(url, version, source)  # what the download lands is read
    source.close()
    return CopySource(copy, url, version)


class CopySource:
    """A ranged source over a whole copy (``open_through``): ``os.pread`` on the local file,
    under the object's URL and version; ``close()`` lets go of the copy.

    A copy never changes once whole, so reads check no version: its modification time
    moves whenever a reader opens it (the least recently used go first).
    """

    retries = 0

    def __init__(self, copy: CachedCopy, url: str, version: str) -> None:
        self._copy, self.url, self.version = copy, url, version
        self.path = copy.path  # the local file, for readers that open a path
        self._fd = os.open(copy.path, os.O_RDONLY | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size
        self._made = ForkCheck()

    def size(self) -> int:
        return self._size

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        if self._fd < 0:
            raise ValueError(f"{self!r} is closed.")
        out = []
        for offset, length in ranges:
            if offset < 0 or length < 0 or offset + length > self._size:
                raise ValueError(
                    f"{self!r}: range (offset={offset}, length={length}) is outside the "
                    f"object ({self._size} bytes)."
                )
            out.append(_pread_all(self._fd, length, offset))
        metrics.count("cache_bytes_read", sum(len(d) for d in out))
        metrics.count("cache_hits")
        return out

    def read_all(self) -> bytes:
        return self.read_ranges([(0, self.size())])[0]

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0 and not self._made.forked():
            os.close(fd)
        self._copy.close()

    def __enter__(self) -> CopySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"CopySource({self.url!r}, copy={self._copy.path!r})"
