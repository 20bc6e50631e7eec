"""Objects are written whole under their final name, or not at all."""

from __future__ import annotations

import asyncio

import pytest

from chute._remote import ObjectWriter, RetryPolicy, list_prefix, open_source, write_object
from chute._remote.write import delete_object, upload_file


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest):
    return request.getfixturevalue(request.param)


def _chunks(fail_after: int | None = None):
    for i in range(8):
        if fail_after is not None and i == fail_after:
            raise RuntimeError("the producer failed")
        yield bytes([i]) * 100_000


def test_written_object_reads_back(store) -> None:
    url = store.url("out/shard-0")
    write_object(url, _chunks())
    assert open_source(url).read_all() == b"".join(_chunks())


def test_failed_writer_leaves_no_object(store) -> None:
    url = store.url("out/shard-1")
    with pytest.raises(RuntimeError, match="the producer failed"):
        write_object(url, _chunks(fail_after=5))
    assert store.keys() == []


def test_object_appears_only_at_commit(s3) -> None:
    url = s3.url("out/shard-2")
    writer = ObjectWriter(url)
    writer.write(b"abc")
    assert not s3.exists("out/shard-2")
    writer.commit()
    assert s3.exists("out/shard-2") and open_source(url).read_all() == b"abc"
    with pytest.raises(ValueError, match="already committed"):
        writer.write(b"more")


def test_failed_upload_leaves_the_old_object(s3) -> None:
    url = s3.put("out/shard-3", b"old")
    s3.proxy.configure(fault_rate=1.0, faults=(503,), methods=("PUT", "POST"))
    writer = ObjectWriter(url, retry=RetryPolicy(attempts=1, base_delay=0.001))
    writer.write(b"new")
    with pytest.raises(OSError, match=url):
        writer.commit()
    s3.proxy.configure()
    assert open_source(url).read_all() == b"old"


def test_local_writes_rename_into_place(tmp_path) -> None:
    path = tmp_path / "shard"
    with pytest.raises(RuntimeError):
        write_object(path, _chunks(fail_after=2))
    assert list(tmp_path.iterdir()) == []
    write_object(f"file://{path}", [b"ab", b"cd"])
    assert path.read_bytes() == b"abcd" and len(list(tmp_path.iterdir())) == 1


def test_glob_lists_matching_shards_sorted(store) -> None:
    for name in ("train-00002.ar", "train-00000.ar", "train-00001.ar", "test-00000.ar"):
        store.put(f"data/{name}", b"x")
    store.put("data/sub/train-00003.ar", b"x")
    found = list_prefix(store.url("data/train-*.ar"))
    assert found == [store.url(f"data/train-0000{i}.ar") for i in range(3)]
    assert list_prefix(store.url("data/t")) == sorted(
        store.url(f"data/{n}")
        for n in ("train-00000.ar", "train-00001.ar", "train-00002.ar", "test-00000.ar")
    )


def test_writes_and_deletes_work_inside_a_running_event_loop(store, tmp_path) -> None:
    """As in a notebook or an async program: the calls wait for chute's own loop."""
    local = tmp_path / "local"
    local.write_bytes(b"abc")

    async def main() -> bytes:
        write_object(store.url("async/written"), [b"x" * 10])
        upload_file(local, store.url("async/uploaded"))
        delete_object(store.url("async/written"))
        return open_source(store.url("async/uploaded")).read_all()

    assert asyncio.run(main()) == b"abc"
    assert store.keys() == ["async/uploaded"]
