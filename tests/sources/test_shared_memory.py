"""SharedMemoryDataSource: any picklable elements, shared with workers, never leaked."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import MapDataset
from chute._sources.shared_memory import InMemoryDataSource
from chute.sources import SharedMemoryDataSource

_DEV_SHM = Path("/dev/shm")


def _exists(name: str) -> bool:
    """Whether a segment is still there (looked up without touching the tracker)."""
    if _DEV_SHM.is_dir():
        return (_DEV_SHM / name).exists()
    try:
        SharedMemoryDataSource(name=name).close()
    except FileNotFoundError:
        return False
    return True


def _segments() -> set[str]:
    return {p.name for p in _DEV_SHM.iterdir()} if _DEV_SHM.is_dir() else set()


def _elements() -> list[Any]:
    return [
        {"image": np.arange(12, dtype=np.uint8).reshape(3, 4), "label": 7},
        "text",
        b"raw bytes",
        None,
        3.5,
        np.arange(10.0)[::3],  # not contiguous: pickled in-band
        {"nested": [1, (2, 3)], "empty": np.zeros((0, 2))},
    ]


def _assert_same(got: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert got.keys() == expected.keys()
        for key in expected:
            _assert_same(got[key], expected[key])
    elif isinstance(expected, np.ndarray):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    else:
        assert got == expected


@pytest.fixture
def source() -> Any:
    with SharedMemoryDataSource(_elements()) as src:
        yield src


def test_stores_any_picklable_elements(source: SharedMemoryDataSource) -> None:
    expected = _elements()
    assert len(source) == len(expected)
    for i, element in enumerate(expected):
        _assert_same(source[i], element)
    for got, element in zip(source.__getitems__(range(len(expected))), expected):
        _assert_same(got, element)


def test_arrays_are_read_only_views_of_the_segment(source: SharedMemoryDataSource) -> None:
    first, second = source[0]["image"], source[0]["image"]
    assert not first.flags.writeable
    assert np.shares_memory(first, second)
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 1
    copy = np.array(first)
    copy[0, 0] = 99
    assert source[0]["image"][0, 0] == 0


def test_negative_indices_count_from_the_end(source: SharedMemoryDataSource) -> None:
    assert source[-1]["nested"] == [1, (2, 3)]
    assert source.__getitems__([-6, 1]) == ["text", "text"]
    assert source[np.int64(3)] is None


@pytest.mark.parametrize("index", [7, 100, -8])
def test_bad_indices_raise_index_error_naming_index_and_length(
    source: SharedMemoryDataSource, index: int
) -> None:
    with pytest.raises(IndexError, match=f"index {index} is out of range for length 7"):
        source[index]
    with pytest.raises(IndexError, match=f"index {index} is out of range for length 7"):
        source.__getitems__([0, index])


def test_non_int_indices_raise_type_error(source: SharedMemoryDataSource) -> None:
    with pytest.raises(TypeError, match="index must be an int"):
        source["0"]  # type: ignore[index]
    with pytest.raises(TypeError, match="flat sequence of ints"):
        source.__getitems__([0.5])  # type: ignore[list-item]


def test_empty_source() -> None:
    with SharedMemoryDataSource([]) as source:
        assert len(source) == 0
        assert source.__getitems__([]) == []
        with pytest.raises(IndexError, match="the source is empty"):
            source[0]
        assert len(pickle.loads(pickle.dumps(source))) == 0


def test_accepts_any_iterable_of_elements() -> None:
    with SharedMemoryDataSource(x * x for x in range(5)) as source:
        assert source.__getitems__([4, 2]) == [16, 4]


def test_unpicklable_element_names_its_index_and_leaks_nothing() -> None:
    before = _segments()
    with pytest.raises(TypeError, match=r"element 2 \(a lock\) cannot be pickled"):
        SharedMemoryDataSource([1, 2, threading.Lock()])
    assert _segments() == before


@pytest.mark.parametrize("elements", ["abc", b"abc", {"a": 1}, 5])
def test_rejects_elements_that_are_not_a_sequence(elements: Any) -> None:
    with pytest.raises(TypeError, match="elements must be a sequence of elements"):
        SharedMemoryDataSource(elements)


def test_needs_elements_or_a_name() -> None:
    with pytest.raises(ValueError, match="needs elements to store, or name="):
        SharedMemoryDataSource()
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        SharedMemoryDataSource([1], name=3)  # type: ignore[arg-type]


def test_repr_is_deterministic_and_str_names_the_segment() -> None:
    with SharedMemoryDataSource([1, 2]) as a, SharedMemoryDataSource(["x", "y"]) as b:
        assert repr(a) == repr(b) == "SharedMemoryDataSource(len=2)"
        assert str(a) == f"InMemoryDataSource(name={a.name}, len=2)"  # Grain's text


def test_legacy_name_is_the_same_class() -> None:
    assert InMemoryDataSource is SharedMemoryDataSource


def test_feeds_a_pipeline(source: SharedMemoryDataSource) -> None:
    ds = MapDataset.source(source).slice(slice(1, 4))
    assert list(ds.to_iter_dataset(allow_nones=True)) == ["text", b"raw bytes", None]


# -- names and attaching ----------------------------------------------------------------


def test_creates_a_named_segment_and_attaches_to_it() -> None:
    name = f"chute_test_{os.getpid()}"
    with SharedMemoryDataSource(["a", np.arange(3)], name=name) as owner:
        assert owner.name == name
        attached = SharedMemoryDataSource(name=name)
        assert attached[0] == "a"
        np.testing.assert_array_equal(attached[1], np.arange(3))
        attached.close()
        assert _exists(name)  # an attached source only unmaps
        assert owner[0] == "a"
    assert not _exists(name)


def test_existing_name_raises_file_exists_error(source: SharedMemoryDataSource) -> None:
    with pytest.raises(FileExistsError, match="already exists"):
        SharedMemoryDataSource([1], name=source.name)


def test_attaching_to_a_missing_segment_says_why() -> None:
    with pytest.raises(FileNotFoundError, match="no shared-memory segment named 'chute_nope'"):
        SharedMemoryDataSource(name="chute_nope")


def test_attaching_to_a_foreign_segment_raises_value_error() -> None:
    foreign = SharedMemory(create=True, size=64)
    try:
        with pytest.raises(ValueError, match="was not written by a SharedMemoryDataSource"):
            SharedMemoryDataSource(name=foreign.name)
    finally:
        foreign.close()
        foreign.unlink()


# -- lifecycle --------------------------------------------------------------------------


def test_close_unlinks_and_is_idempotent() -> None:
    source = SharedMemoryDataSource([np.ones(4), 2])
    kept = source[0]
    assert _exists(source.name)
    source.close()
    source.close()
    assert not _exists(source.name)
    np.testing.assert_array_equal(kept, np.ones(4))  # the mapping outlives close()
    with pytest.raises(ValueError, match="was closed"):
        source[1]
    with pytest.raises(ValueError, match="cannot pickle a closed source"):
        pickle.dumps(source)


def test_grain_style_close_then_unlink_is_harmless() -> None:
    source = SharedMemoryDataSource([1])
    source.close()
    source.unlink()
    assert not _exists(source.name)


def test_garbage_collection_unlinks() -> None:
    source = SharedMemoryDataSource([1, 2, 3])
    name = source.name
    del source
    gc.collect()
    assert not _exists(name)


# -- pickling and other processes -------------------------------------------------------


def test_pickles_as_a_name_and_attaches_lazily() -> None:
    owner = SharedMemoryDataSource([np.zeros(100_000)])
    data = pickle.dumps(owner)
    assert len(data) < 300
    copy = pickle.loads(data)
    assert repr(copy) == repr(owner)
    np.testing.assert_array_equal(copy[0], np.zeros(100_000))
    copy.close()  # a copy never unlinks
    assert _exists(owner.name)
    late = pickle.loads(data)
    owner.close()
    with pytest.raises(FileNotFoundError, match="closed or garbage-collected"):
        late[0]  # attaching happens at the first read


def test_spawned_worker_reads_elements_by_index(source: SharedMemoryDataSource) -> None:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.map(source.__getitem__, [0, 6, 1])
        batch = pool.apply(source.__getitems__, ([5, -1],))
    _assert_same(got[0], _elements()[0])
    _assert_same(got[1], _elements()[6])
    assert got[2] == "text"
    np.testing.assert_array_equal(batch[0], np.arange(10.0)[::3])


# These tests fork on purpose; once JAX is loaded in the test process it warns about fork.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_forked_worker_reads_elements_by_index(source: SharedMemoryDataSource) -> None:
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.map(source.__getitem__, [1, 4])
    assert got == ["text", 3.5]


def _close_inherited_copy(source: SharedMemoryDataSource) -> None:
    assert source[1] == "text"
    source.close()


# These tests fork on purpose; once JAX is loaded in the test process it warns about fork.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_forked_child_closing_its_copy_leaves_the_segment(source: SharedMemoryDataSource) -> None:
    child = multiprocessing.get_context("fork").Process(
        target=_close_inherited_copy, args=(source,)
    )
    child.start()
    child.join()
    assert child.exitcode == 0
    assert _exists(source.name)
    assert source[1] == "text"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_exit_without_close_removes_the_segment_without_warnings() -> None:
    result = _run(
        """
        import multiprocessing, numpy as np
        from chute.sources import SharedMemoryDataSource
        source = SharedMemoryDataSource([np.arange(3), {"k": "v"}])
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            assert pool.map(source.__getitem__, [1]) == [{"k": "v"}]
        print(source.name)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no resource_tracker warnings or tracebacks
    assert not _exists(result.stdout.strip())


def test_unrelated_process_attaching_leaves_the_owner_segment(
    source: SharedMemoryDataSource,
) -> None:
    result = _run(
        f"""
        from chute.sources import SharedMemoryDataSource
        print(SharedMemoryDataSource(name={source.name!r})[1])
        """
    )
    assert result.returncode == 0, result.stderr
    assert (result.stdout.strip(), result.stderr) == ("text", "")
    assert _exists(source.name)
    assert source[1] == "text"


def test_worker_unlinking_keeps_the_resource_tracker_balanced() -> None:
    result = _run(
        """
        import multiprocessing
        from chute.sources import SharedMemoryDataSource
        source = SharedMemoryDataSource([1, 2])
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pool.apply(source.unlink)
        source.close()
        print(source.name)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert not _exists(result.stdout.strip())
