"""The answers ``chute._remote`` shares: which paths are URLs (``urls``), how ranges merge."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chute._cli.bucket import is_bucket_url
from chute._cli.errors import CliError
from chute._remote.file import RangedFile
from chute._remote.ranged_object import merge_ranges
from chute._remote.urls import is_remote_url, split_url, url_scheme
from chute._sources.array_record import source as array_record
from chute._sources.array_record.index import open_ranged

REMOTE = ["s3://b/k", "S3://b/k", "Gs://b/k", "AZ://c/k", "abfs://c/k", "HTTPS://h/k"]
LOCAL = ["data/k", "/data/k", "file:///data/k", "FILE:///data/k", "file:/data/k", "k:v", "C:\\k"]


@pytest.mark.parametrize("url", REMOTE)
def test_a_url_of_the_transports_schemes_is_remote_in_any_case(url: str) -> None:
    assert is_remote_url(url) and url_scheme(url) == url.split(":")[0].lower()
    assert array_record._in_bucket(url) and array_record._in_bucket([url, "s3://b/other"])
    assert is_bucket_url(url)
    assert split_url(url)[0] == url_scheme(url)


@pytest.mark.parametrize("path", LOCAL)
def test_paths_and_file_urls_are_local_everywhere(path: str) -> None:
    assert not is_remote_url(path) and url_scheme(path) in ("", "file")
    assert not array_record._in_bucket(path) and not is_bucket_url(path)
    assert split_url(path)[0] == "file"


@pytest.mark.parametrize("url", ["hdfs://n/k", "memory://b/k", "ftp://h/k"])
def test_a_url_of_another_scheme_is_neither_remote_nor_a_local_path(url: str) -> None:
    assert not is_remote_url(url) and not array_record._in_bucket(url)
    with pytest.raises(ValueError, match=f"unsupported URL scheme '{url_scheme(url)}'"):
        open_ranged(url)
    with pytest.raises(CliError, match=f"cannot read or write {url_scheme(url)}:// URLs"):
        is_bucket_url(url)


def test_merge_ranges_joins_neighbours_within_the_gap_and_keeps_members() -> None:
    spans = [(100, 110), (0, 10), (15, 20), (10, 12), (200, 200)]
    assert merge_ranges(spans, gap=5) == [(0, 20, [1, 3, 2]), (100, 110, [0]), (200, 200, [4])]
    assert merge_ranges(spans, gap=80) == [(0, 110, [1, 3, 2, 0]), (200, 200, [4])]
    assert merge_ranges([(0, 50), (50, 60), (60, 200)], gap=0, max_bytes=60) == [
        (0, 60, [0, 1]),
        (60, 200, [2]),  # larger than max_bytes alone: a range of its own
    ]
    assert merge_ranges([], gap=10) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 60)), max_size=30),
    st.integers(0, 40),
    st.none() | st.integers(1, 200),
)
def test_merged_ranges_cover_every_span_once_and_never_touch(
    pairs: list[tuple[int, int]], gap: int, max_bytes: int | None
) -> None:
    spans = [(start, start + length) for start, length in pairs]
    merged = merge_ranges(spans, gap, max_bytes)
    members = sorted(i for _, _, m in merged for i in m)
    assert members == list(range(len(spans)))
    for start, end, covered in merged:
        assert start == min(spans[i][0] for i in covered)
        assert end == max(spans[i][1] for i in covered)
        assert max_bytes is None or len(covered) == 1 or end - start <= max_bytes
    for (first, end, _), (start, _, _) in itertools.pairwise(merged):
        assert start >= first  # in order of start
        assert start - end > gap or max_bytes is not None  # apart, unless max_bytes split them


class _Recorded:
    """A ranged source that records the ranges it is asked for."""

    def __init__(self, data: bytes) -> None:
        self.data, self.asked = data, []

    def size(self) -> int:
        return len(self.data)

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        self.asked.append(list(ranges))
        return [self.data[o : o + n] for o, n in ranges]


def test_ranged_file_prefetches_neighbouring_ranges_as_one() -> None:
    source = _Recorded(bytes(range(256)) * 4096)
    f = RangedFile(source, name="x")
    f.prefetch([(500_000, 10), (0, 100), (150, 50), (10**9, 5)])
    assert source.asked == [[(0, 200), (500_000, 10)]]  # past the end: dropped
    f.seek(150)
    assert f.read(50) == source.data[150:200] and len(source.asked) == 1
