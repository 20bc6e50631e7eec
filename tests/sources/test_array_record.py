"""ArrayRecord: write_array_record's atomic shards and ArrayRecordDataSource's reads."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import chute as grain
from chute._sources.array_record.source import ArrayRecordDataSource
from chute._sources.array_record.writer import write_array_record
from chute.experimental import assert_equal_output_after_checkpoint

RECORDS = [f"record {i:03d}".encode() * (1 + i % 3) for i in range(40)]


def shard_order(records: list[bytes], num_shards: int) -> list[bytes]:
    """The records in the order a source over the shards reads them."""
    return [r for s in range(num_shards) for r in records[s::num_shards]]


@pytest.fixture
def one_file(tmp_path: Path) -> str:
    return write_array_record(RECORDS, tmp_path / "one")[0]


@pytest.fixture
def three_shards(tmp_path: Path) -> list[str]:
    return write_array_record(RECORDS, tmp_path / "three", num_shards=3)


# -- writing and reading back -----------------------------------------------------------------


def test_round_trip_through_one_file(one_file: str) -> None:
    assert one_file.endswith("one-00000-of-00001.array_record")
    source = ArrayRecordDataSource(one_file)
    assert len(source) == len(RECORDS)
    assert [source[i] for i in range(len(source))] == RECORDS
    assert source.__getitems__(list(range(len(RECORDS)))) == RECORDS
    assert list(source) == RECORDS


def test_shards_hold_every_num_shards_th_record(three_shards: list[str]) -> None:
    assert [os.path.basename(f) for f in three_shards] == [
        f"three-0000{i}-of-00003.array_record" for i in range(3)
    ]
    assert [len(ArrayRecordDataSource(f)) for f in three_shards] == [14, 13, 13]
    assert list(ArrayRecordDataSource(three_shards[1])) == RECORDS[1::3]


@pytest.mark.parametrize("form", ["list", "glob", "shard spec", "pathlib list"])
def test_shards_read_back_as_one_dataset(three_shards: list[str], form: str) -> None:
    prefix = three_shards[0].split("-00000-of-")[0]
    paths = {
        "list": three_shards,
        "glob": os.path.join(os.path.dirname(prefix), "three-*.array_record"),
        "shard spec": prefix + "@3",
        "pathlib list": [Path(f) for f in three_shards],
    }[form]
    source = ArrayRecordDataSource(paths)
    assert source.paths == three_shards
    assert list(source) == shard_order(RECORDS, 3)


def test_strings_are_stored_as_utf8_and_other_records_through_the_serializer(
    tmp_path: Path,
) -> None:
    (text,) = write_array_record(["héllo", "wörld"], tmp_path / "text")
    assert list(ArrayRecordDataSource(text)) == ["héllo".encode(), "wörld".encode()]
    (pickled,) = write_array_record([{"a": 1}, (2, 3)], tmp_path / "p", serializer=pickle.dumps)
    assert [pickle.loads(r) for r in ArrayRecordDataSource(pickled)] == [{"a": 1}, (2, 3)]


def test_a_record_that_is_not_bytes_needs_a_serializer(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="record 1 is a int, not bytes or str; pass serializer"):
        write_array_record([b"ok", 7], tmp_path / "x")
    with pytest.raises(TypeError, match="serializer returned a int for record 0"):
        write_array_record([7], tmp_path / "y", serializer=lambda r: r)
    assert os.listdir(tmp_path) == []


def test_writer_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="num_shards must be >= 1"):
        write_array_record(RECORDS, tmp_path / "x", num_shards=0)
    with pytest.raises(TypeError, match="num_shards must be an int"):
        write_array_record(RECORDS, tmp_path / "x", num_shards=2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a str"):
        write_array_record(RECORDS, b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="serializer must be callable"):
        write_array_record(RECORDS, tmp_path / "x", serializer="pickle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad options 'group_size:one'"):
        write_array_record(RECORDS, tmp_path / "x", options="group_size:one")
    assert os.listdir(tmp_path) == []
    (tmp_path / "x-00000-of-00001.array_record.tmp").mkdir()  # in the way, even for root
    with pytest.raises(OSError, match="cannot create .*x-00000-of-00001.array_record.tmp"):
        write_array_record(RECORDS, tmp_path / "x")


# -- atomic, resumable writes --------------------------------------------------------------


def failing_after(count: int) -> Iterator[bytes]:
    yield from RECORDS[:count]
    raise RuntimeError("the source broke")


def test_a_failed_write_leaves_no_shard_behind(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the source broke"):
        write_array_record(failing_after(20), tmp_path / "data" / "x", num_shards=2)
    assert os.listdir(tmp_path / "data") == []
    files = write_array_record(RECORDS, tmp_path / "data" / "x", num_shards=2)
    assert list(ArrayRecordDataSource(files)) == shard_order(RECORDS, 2)


def test_a_full_disk_raises_an_oserror_with_its_errno_naming_the_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    def full(self: object, record: bytes) -> None:  # array_record's own words for it
        raise RuntimeError("write() failed: No space left on device; writing x.tmp; at byte 9")

    monkeypatch.setattr(ArrayRecordWriter, "write", full)
    with pytest.raises(OSError, match="No space left on device") as caught:
        write_array_record(RECORDS, tmp_path / "x", num_shards=2)
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / "x-00000-of-00002.array_record")
    assert os.listdir(tmp_path) == []


def test_a_rerun_after_success_writes_nothing(three_shards: list[str]) -> None:
    before = [os.stat(f).st_mtime_ns for f in three_shards]
    prefix = three_shards[0].split("-00000-of-")[0]
    assert write_array_record(failing_after(0), prefix, num_shards=3) == three_shards
    assert [os.stat(f).st_mtime_ns for f in three_shards] == before


def test_a_rerun_rewrites_every_shard_when_one_is_missing(three_shards: list[str]) -> None:
    os.remove(three_shards[1])
    open(three_shards[2] + ".tmp", "wb").close()  # left by a run that was killed
    prefix = three_shards[0].split("-00000-of-")[0]
    assert write_array_record(RECORDS[::-1], prefix, num_shards=3) == three_shards
    assert list(ArrayRecordDataSource(three_shards)) == shard_order(RECORDS[::-1], 3)
    assert sorted(os.listdir(os.path.dirname(prefix))) == sorted(
        os.path.basename(f) for f in three_shards
    )


@pytest.mark.parametrize("records", [RECORDS, iter(RECORDS)], ids=["list", "iterator"])
def test_progress_shows_a_bar(
    tmp_path: Path, records: object, capsys: pytest.CaptureFixture[str]
) -> None:
    write_array_record(records, tmp_path / "x", progress=True)  # type: ignore[arg-type]
    assert "40" in capsys.readouterr().err


def test_a_progress_bar_leaves_no_thread_running(tmp_path: Path) -> None:
    script = (
        "import sys, threading\n"
        "from chute._sources.array_record.writer import write_array_record\n"
        "write_array_record([b'x'] * 40, sys.argv[1], progress=True)\n"
        "print([t.name for t in threading.enumerate()])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['MainThread']"  # workers forked later are safe


# -- batched and concurrent reads -------------------------------------------------------------


def test_getitems_returns_records_in_the_order_asked_across_files(
    three_shards: list[str],
) -> None:
    source, expected = ArrayRecordDataSource(three_shards), shard_order(RECORDS, 3)
    rng = np.random.default_rng(0)
    for indices in [rng.integers(0, 40, 100), rng.permutation(40), [39, 0, 39, 13, 14, 0], []]:
        assert source.__getitems__(indices) == [expected[i] for i in indices]


def test_threads_read_one_source_at_once(three_shards: list[str]) -> None:
    source, expected = ArrayRecordDataSource(three_shards), shard_order(RECORDS, 3)
    chunks = np.random.default_rng(1).integers(0, 40, (64, 50)).tolist()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(source.__getitems__, chunks))
    assert results == [[expected[i] for i in chunk] for chunk in chunks]


@pytest.mark.parametrize("index", [-1, 40, 1000])
def test_out_of_range_indices_raise_index_error(one_file: str, index: int) -> None:
    source = ArrayRecordDataSource(one_file)
    with pytest.raises(IndexError, match=f"index {index} is out of range for length 40"):
        source[index]
    with pytest.raises(IndexError, match=f"index {index} is out of range for length 40"):
        source.__getitems__([0, index])
    with pytest.raises(TypeError, match="index must be an int"):
        source["3"]  # type: ignore[index]


@dataclasses.dataclass
class FileInstruction:  # the shape of TFDS's
    filename: str
    skip: int
    take: int
    examples_in_shard: int


def test_slices_and_file_instructions_read_part_of_a_file(one_file: str) -> None:
    source = ArrayRecordDataSource([f"{one_file}[5:8]", FileInstruction(one_file, 30, 2, 40)])
    assert list(source) == RECORDS[5:8] + RECORDS[30:32]
    assert repr(source) == (
        f"ArrayRecordDataSource(paths=['{one_file}[5:8]', '{one_file}[30:32]'], len=5)"
    )
    beyond = ArrayRecordDataSource(f"{one_file}[35:45]")
    with pytest.raises(ValueError, match="records up to 45 of .* were asked for, but it holds 40"):
        beyond[0]


# -- through chute's pipelines ------------------------------------------------------------


def test_global_shuffle_matches_the_in_memory_records(three_shards: list[str]) -> None:
    def pipeline(source: object) -> list[bytes]:
        return list(grain.MapDataset.source(source).seed(5).shuffle().to_iter_dataset())

    assert pipeline(ArrayRecordDataSource(three_shards)) == pipeline(shard_order(RECORDS, 3))


@pytest.mark.parametrize("workers", [0, 2])
def test_data_loader_workers_reopen_the_files(three_shards: list[str], workers: int) -> None:
    def run(source: object) -> list[list[bytes]]:
        loader = grain.DataLoader(
            data_source=source,
            sampler=grain.IndexSampler(40, shuffle=True, seed=1, num_epochs=1),
            operations=[grain.transforms.Map(len), grain.Batch(8)],
            worker_count=workers,
        )
        return [b.tolist() for b in loader]

    source = ArrayRecordDataSource(three_shards)
    source[0]  # a reader is open in this process; workers open their own
    assert run(source) == run(shard_order(RECORDS, 3))


def test_restores_from_every_checkpoint(three_shards: list[str]) -> None:
    source = ArrayRecordDataSource(three_shards)
    assert_equal_output_after_checkpoint(
        grain.MapDataset.source(source).shuffle(seed=3).batch(3), max_steps=None
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(40, shuffle=True, seed=2, num_epochs=2),
        operations=[grain.Batch(6)],
        worker_count=0,
    )
    assert_equal_output_after_checkpoint(loader, max_steps=None)


# -- pickling, repr, options, closing ---------------------------------------------------------


def test_pickles_as_its_files_and_reopens_lazily(three_shards: list[str]) -> None:
    source = ArrayRecordDataSource(three_shards, reader_options={"max_parallelism": "1"})
    assert source[20] == shard_order(RECORDS, 3)[20]
    copy = pickle.loads(pickle.dumps(source))
    assert list(copy) == list(source) and repr(copy) == repr(source)
    assert len(pickle.dumps(source)) < 1000


def test_a_forked_child_opens_its_own_readers(one_file: str) -> None:
    source = ArrayRecordDataSource(one_file)
    source[0]
    source._made.pid = -1  # as a forked child sees it: the readers belong to another process
    assert source[3] == RECORDS[3] and not source._made.forked()


def test_repr_names_the_files_and_is_stable(tmp_path: Path, three_shards: list[str]) -> None:
    source = ArrayRecordDataSource(three_shards)
    assert repr(source) == f"ArrayRecordDataSource(paths={three_shards!r}, len=40)"
    assert repr(ArrayRecordDataSource(list(three_shards))) == repr(source)
    many = write_array_record(RECORDS, tmp_path / "many", num_shards=6)
    text = repr(ArrayRecordDataSource(many))
    assert text.startswith(f"ArrayRecordDataSource(paths=<6 files, {many[0]!r} to {many[-1]!r}")
    assert text == repr(ArrayRecordDataSource(many)) and text.endswith(", len=40)")
    assert text != repr(ArrayRecordDataSource(many[::-1]))


@pytest.mark.parametrize(
    "options", ["readahead_buffer_size:0", "max_parallelism:2,", {"readahead_buffer_size": 0}]
)
def test_reader_options_override_the_defaults(one_file: str, options: object) -> None:
    assert list(ArrayRecordDataSource(one_file, reader_options=options)) == RECORDS  # type: ignore[arg-type]


def test_files_with_large_groups_log_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (path,) = write_array_record(RECORDS, tmp_path / "g", options="group_size:16")
    with caplog.at_level("WARNING", logger="chute"):
        assert list(ArrayRecordDataSource(path)) == RECORDS
    assert f"{path} was written with group_size:16" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="chute"):
        ArrayRecordDataSource(write_array_record(RECORDS, tmp_path / "ok")[0])
    assert caplog.text == ""


def test_bad_reader_options_are_refused(one_file: str) -> None:
    with pytest.raises(TypeError, match="reader_options must be a str"):
        ArrayRecordDataSource(one_file, reader_options=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'name:value' pairs"):
        ArrayRecordDataSource(one_file, reader_options="readahead_buffer_size")
    with pytest.raises(ValueError, match="bad reader_options"):
        ArrayRecordDataSource(one_file, reader_options="no_such_option:1")


def test_close_releases_the_files_and_reads_reopen(one_file: str) -> None:
    with ArrayRecordDataSource(one_file) as source:
        assert source[1] == RECORDS[1]
    assert source._readers == [None]
    assert source[2] == RECORDS[2]
    source.close()
    source.close()


# -- bad files ------------------------------------------------------------------------------


def test_missing_files_are_named(tmp_path: Path, one_file: str) -> None:
    missing = str(tmp_path / "missing.array_record")
    with pytest.raises(FileNotFoundError, match=f"no such file: '{missing}'"):
        ArrayRecordDataSource([one_file, missing])
    with pytest.raises(FileNotFoundError, match="no files match the pattern"):
        ArrayRecordDataSource(str(tmp_path / "*.nothing"))
    with pytest.raises(FileNotFoundError, match="no such file: .*missing-00000-of-00002"):
        ArrayRecordDataSource(str(tmp_path / "missing@2"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        ArrayRecordDataSource(FileInstruction(missing, 0, 1, 1))
    with pytest.raises(IsADirectoryError, match="is a directory; pass the files in it"):
        ArrayRecordDataSource(tmp_path)


def test_files_that_are_not_array_record_are_named(tmp_path: Path, one_file: str) -> None:
    data = Path(one_file).read_bytes()
    bad = {
        "truncated": data[: len(data) - 10],
        "half": data[: len(data) // 2],
        "text": b"just some text\n" * 5000,
        "empty": b"",
    }
    for name, content in bad.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ValueError, match=f"'{path}' is not a readable ArrayRecord file"):
            ArrayRecordDataSource(str(path))


def test_a_corrupt_record_names_its_file_and_position(tmp_path: Path) -> None:
    records = [np.random.default_rng(i).bytes(64) for i in range(5)]
    (path,) = write_array_record(records, tmp_path / "c", options="group_size:1,uncompressed")
    data = bytearray(Path(path).read_bytes())
    data[data.find(records[3]) + 10] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    source = ArrayRecordDataSource(path)
    assert source.__getitems__([4, 0]) == [records[4], records[0]]
    with pytest.raises(ValueError, match=f"cannot read record 3 of '{path}'"):
        source.__getitems__([0, 3])
    with pytest.raises(ValueError, match=f"cannot read record 3 of '{path}'"):
        ArrayRecordDataSource([path, path]).__getitems__([9, 8])
    with pytest.raises(ValueError, match=f"cannot read record 3 of '{path}'"):
        list(source)


def test_datasets_without_records_are_refused(tmp_path: Path) -> None:
    files = write_array_record([], tmp_path / "none", num_shards=2)
    with pytest.raises(ValueError, match="the files hold no records"):
        ArrayRecordDataSource(files)
    with pytest.raises(ValueError, match="paths is empty"):
        ArrayRecordDataSource([])


def test_bad_paths_are_refused(one_file: str) -> None:
    with pytest.raises(TypeError, match="a path must be a str, a pathlib.Path or a FileInstr"):
        ArrayRecordDataSource(7)
    with pytest.raises(TypeError, match="got b'x' that is a bytes"):
        ArrayRecordDataSource(b"x")
    with pytest.raises(ValueError, match="is not a range; give 0 <= start <= stop"):
        ArrayRecordDataSource(FileInstruction(one_file, 5, -2, 40))


def test_missing_array_record_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, one_file: str, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "array_record.python.array_record_module", None)
    with pytest.raises(ImportError, match=r"pip install chute\[array_record\]"):
        ArrayRecordDataSource(one_file)
    with pytest.raises(ImportError, match=r"pip install chute\[array_record\]"):
        write_array_record(RECORDS, tmp_path / "x")


# -- what checkpoints record of the files ---------------------------------------------------


def _pipeline(paths: object) -> grain.IterDataset:
    return grain.MapDataset.source(ArrayRecordDataSource(paths)).seed(0).shuffle().to_iter_dataset()


def test_a_checkpoint_of_other_files_of_the_same_length_is_refused(tmp_path: Path) -> None:
    train = write_array_record(RECORDS, tmp_path / "train", num_shards=2)
    held_out = write_array_record(RECORDS, tmp_path / "eval", num_shards=2)
    it = iter(_pipeline(train))
    next(it)
    state = it.get_state()
    message = (
        r"stage 0: saved source ArrayRecordDataSource over 40 elements from 2 files "
        r"train-00000-of-00002.array_record to train-00001-of-00002.array_record, sha256 "
    )
    with pytest.raises(grain.CheckpointError, match=message):
        iter(_pipeline(held_out)).set_state(state)
    part = iter(_pipeline([f"{train[0]}[0:10]", f"{train[1]}[10:20]"]))
    with pytest.raises(grain.CheckpointError, match="stage 0"):  # other records of the files
        iter(_pipeline([f"{train[0]}[0:10]", f"{train[1]}[0:10]"])).set_state(part.get_state())


def test_a_checkpoint_restores_over_the_same_files_in_another_process(tmp_path: Path) -> None:
    paths = write_array_record(RECORDS, tmp_path / "train", num_shards=3)
    code = (
        "import json, sys\n"
        "import chute\n"
        "ds = chute.MapDataset.source(chute.ArrayRecordDataSource(sys.argv[1:]))\n"
        "it = iter(ds.seed(0).shuffle().to_iter_dataset())\n"
        "[next(it) for _ in range(7)]\n"
        "print(json.dumps(it.get_state()))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4321"}
    done = subprocess.run(
        [sys.executable, "-c", code, *paths], env=env, capture_output=True, text=True, check=True
    )
    resumed = iter(_pipeline(paths))
    resumed.set_state(json.loads(done.stdout))  # accepted: the same files, sizes and records
    assert list(resumed) == list(_pipeline(paths))[7:]


_FORK_CHECK = """
import os, sys
import chute
from chute._execution import processes

def threads():
    return len(os.listdir("/proc/self/task"))

before = threads()
source = chute.ArrayRecordDataSource(sys.argv[1:])
print(threads() - before < 8, processes.start_method())  # the pool holds tens
source[0]  # array_record's reader opens and starts its thread pool
print(threads() - before >= 8, processes.start_method())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_making_a_source_starts_no_native_threads_and_a_read_stops_forking(
    tmp_path: Path,
) -> None:
    # A child forked after array_record's reader started its thread pool crashes in its
    # reads (SIGSEGV, about one fork in ten): counting records must not start the pool,
    # and once a read has, workers start from the fork server instead.
    paths = write_array_record(RECORDS, tmp_path / "train", num_shards=3)
    env = {k: v for k, v in os.environ.items() if k != "CHUTE_WORKER_START"}
    done = subprocess.run(
        [sys.executable, "-c", _FORK_CHECK, *paths],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split("\n")[:2] == ["True fork", "True forkserver"], done.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks")
def test_writing_with_array_record_stops_forking(tmp_path: Path) -> None:
    # Every child forked after array_record's writer ran crashed as it read.
    code = (
        "import sys\n"
        "from chute._execution import processes\n"
        "from chute.experimental import write_array_record\n"
        "print(processes.start_method())\n"
        "write_array_record([b'x'] * 10, sys.argv[1])\n"
        "print(processes.start_method())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CHUTE_WORKER_START"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "w")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["fork", "forkserver"], done.stdout
