"""Ranged reads from S3 (moto, through obstore) and GCS (the emulator, through gcsfs)."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest

from chute import SourceChangedError
from chute._remote import open_source
from chute._remote.backends import run_on_io_loop
from chute._remote.ranged_object import RangedSource, read_many


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest):
    return request.getfixturevalue(request.param)


def _ranges(size: int, count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        start = rng.randrange(size)
        out.append((start, rng.randrange(min(70_000, size - start) + 1)))
    return out


def test_ranges_match_the_uploaded_bytes(store) -> None:
    data = os.urandom(3 << 20)
    url = store.put("blob.bin", data)
    with open_source(url) as source:
        assert source.size() == len(data) and source.url == url
        assert source.version
        ranges = [*_ranges(len(data), 60, seed=1), (0, 0), (len(data) - 1, 1), (0, 10)]
        got = source.read_ranges(ranges)
        assert got == [data[o : o + n] for o, n in ranges]
        assert source.read_all() == data
        assert source.retries == 0


def test_far_apart_ranges_each_get_their_own_request(s3) -> None:
    data = os.urandom(8 << 20)
    url = s3.put("sparse.bin", data)
    source = open_source(url)
    s3.proxy.configure()
    ranges = [(i * (2 << 20), 100) for i in range(4)]
    assert source.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
    assert s3.proxy.requests == 4


def test_requests_in_flight_stay_within_the_bound(s3) -> None:
    data = os.urandom(1 << 20)
    url = s3.put("many.bin", data)
    source = open_source(url, max_in_flight=4)
    source.coalesce = 0
    s3.proxy.configure(latency=0.02)
    ranges = [(i * 4096, 1000) for i in range(40)]
    assert source.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
    assert s3.proxy.requests == 40
    assert 1 <= s3.proxy.max_in_flight <= 4


@pytest.mark.parametrize("size", [100_000, 1_000])
def test_an_object_opened_with_its_first_bytes_opens_in_one_get(s3, size: int) -> None:
    data = os.urandom(size)
    url = s3.put("head.bin", data)
    s3.proxy.configure()
    source = open_source(url, first=4096)
    assert dict(s3.proxy.methods) == {"GET": 1}  # no HEAD: the GET's answer tells the size
    assert source.size() == size and source.version
    assert source.read_ranges([(0, 10), (100, 900), (0, 0)]) == [data[:10], data[100:1000], b""]
    assert s3.proxy.requests == 1  # within the bytes taken at open: nothing sent
    assert source.read_ranges([(size - 5, 5)]) == [data[-5:]]
    assert s3.proxy.requests == (2 if size > 4096 else 1)


def test_an_object_opened_with_its_first_bytes_still_holds_its_version(s3) -> None:
    url = s3.put("moving-head.bin", b"a" * 10_000)
    source = open_source(url, first=100)
    s3.put("moving-head.bin", b"b" * 10_000)
    assert source.read_ranges([(0, 3)]) == [b"aaa"]  # taken at open, of the version opened
    with pytest.raises(SourceChangedError, match=url):
        source.read_ranges([(5000, 3)])


def test_an_empty_object_opened_with_its_first_bytes_falls_back_to_a_head(s3) -> None:
    url = s3.put("empty.bin", b"")  # no range of it to answer: the GET is refused
    s3.proxy.configure()
    assert open_source(url, first=4096).size() == 0
    assert dict(s3.proxy.methods) == {"GET": 1, "HEAD": 1}


def test_a_missing_object_opened_with_its_first_bytes_raises_file_not_found(store) -> None:
    missing = store.url("no-such-head")
    with pytest.raises(FileNotFoundError, match=missing):
        open_source(missing, first=4096)


def test_a_failed_first_get_at_open_falls_back_to_a_head(s3) -> None:
    data = os.urandom(10_000)
    url = s3.put("flaky-head.bin", data)
    s3.proxy.configure(fault_rate=1.0, faults=(503,), methods=("GET",))
    source = open_source(url, first=100)  # the GET fails; the HEAD opens it
    assert dict(s3.proxy.methods) == {"GET": 1, "HEAD": 1}
    s3.proxy.configure()
    assert source.size() == len(data)
    assert source.read_ranges([(0, 100)]) == [data[:100]]
    assert s3.proxy.requests == 1  # nothing was taken at open: read now


def test_missing_object_raises_file_not_found_naming_it(store) -> None:
    url = store.url("no-such-object")
    with pytest.raises(FileNotFoundError, match=url):
        open_source(url)
    if store.scheme == "s3":
        assert store.proxy.requests == 1  # one HEAD, no retries


def test_forbidden_object_raises_permission_error_at_once(s3) -> None:
    url = s3.put("secret.bin", b"x" * 100)
    source = open_source(url)
    s3.proxy.configure(fault_rate=1.0, faults=(403,))
    with pytest.raises(PermissionError, match=url):
        source.read_ranges([(0, 10)])
    assert s3.proxy.requests == 1 and source.retries == 0


def test_object_overwritten_after_open_raises_source_changed(store) -> None:
    url = store.put("moving.bin", b"a" * 1000)
    source = open_source(url)
    assert source.read_ranges([(0, 3)]) == [b"aaa"]
    store.put("moving.bin", b"b" * 1000)
    with pytest.raises(SourceChangedError, match=url):
        source.read_ranges([(0, 3)])


def test_out_of_bounds_range_is_a_value_error(s3) -> None:
    source = open_source(s3.put("small.bin", b"0123456789"))
    with pytest.raises(ValueError, match="outside"):
        source.read_ranges([(5, 6)])


def test_local_paths_and_file_urls_read_with_pread(tmp_path) -> None:
    path = tmp_path / "local.bin"
    path.write_bytes(b"0123456789")
    for url in (str(path), f"file://{path}"):
        with open_source(url) as source:
            assert source.read_ranges([(8, 2), (0, 3)]) == [b"89", b"012"]
    source = open_source(path)
    path.write_bytes(b"changed, and longer")
    with pytest.raises(SourceChangedError):
        source.read_ranges([(0, 1)])


def test_unknown_scheme_is_rejected() -> None:
    with pytest.raises(ValueError, match="unsupported URL scheme 'ftp'"):
        open_source("ftp://host/file")
    with pytest.raises(ValueError, match="does not name an object"):
        open_source("s3://bucket-only")


class StalledBackend:
    """GETs that wait until told to go, except the one at ``fail_at``, which raises a
    non-transient error once ``batch`` GETs of ``after`` (itself by default) have started."""

    checks_each_read = True

    def __init__(self, fail_at: int | None, batch: int, after: Any = None) -> None:
        self.fail_at, self.batch, self.after = fail_at, batch, after or self
        self.started: list[int] = []
        self.cancelled: list[int] = []
        self.all_started = asyncio.Event()
        self.release = asyncio.Event()  # never set while the test waits

    async def head(self) -> tuple[int, str | None]:
        return 1 << 20, "v1"

    async def get(self, start: int, end: int, version: str | None) -> bytes:
        self.started.append(start)
        if len(self.started) == self.batch:
            self.all_started.set()
        if start == self.fail_at:
            await self.after.all_started.wait()
            raise PermissionError(f"no access to bytes {start}-{end}")
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(start)
            raise
        return bytes(end - start)

    def is_changed_error(self, exc: BaseException) -> bool:
        return False

    def run(self, make: Any) -> Any:
        return run_on_io_loop(make)


def _source(backend: StalledBackend) -> RangedSource:
    return RangedSource("s3://bucket/key", backend, coalesce=0, known=(1 << 20, "v1"))


def _released(*backends: StalledBackend) -> None:
    async def release() -> None:
        for backend in backends:
            backend.release.set()

    run_on_io_loop(release)  # what the old gather left waiting can end


def test_a_failed_get_cancels_the_other_gets_of_its_read() -> None:
    backend = StalledBackend(fail_at=3000, batch=4)
    try:
        with pytest.raises(PermissionError, match="denied"):
            _source(backend).read_ranges([(0, 10), (1000, 10), (2000, 10), (3000, 10)])
        assert sorted(backend.started) == [0, 1000, 2000, 3000]
        assert sorted(backend.cancelled) == [0, 1000, 2000]  # before read_ranges returned
    finally:
        _released(backend)


def test_a_failed_source_cancels_the_other_sources_of_a_batch() -> None:
    waiting = StalledBackend(None, batch=2)
    failing = StalledBackend(fail_at=0, batch=1, after=waiting)
    try:
        with pytest.raises(PermissionError, match="denied"):
            read_many([(_source(waiting), [(0, 10), (5000, 10)]), (_source(failing), [(0, 5)])])
        assert failing.started == [0] and sorted(waiting.started) == [0, 5000]
        assert sorted(waiting.cancelled) == [0, 5000]
    finally:
        _released(failing, waiting)


def test_a_blocking_filesystem_reads_inside_a_running_event_loop() -> None:
    """Its calls run on chute's I/O loop, as obstore's do: a notebook's loop is no obstacle."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/chute-loop-test/k.bin", b"0123456789")

    async def main() -> list[bytes]:
        return open_source("s3://chute-loop-test/k.bin", filesystem=fs).read_ranges([(2, 3)])

    try:
        assert asyncio.run(main()) == [b"234"]
    finally:
        fs.rm("/chute-loop-test", recursive=True)
