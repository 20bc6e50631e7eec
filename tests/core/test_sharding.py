"""ShardOptions validation and even_split: shards partition the records."""

from __future__ import annotations

import itertools
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chute
from chute._core.sharding import NoSharding, ShardByJaxProcess, ShardOptions, even_split


def _shards(n: int, count: int, drop: bool = False) -> list[tuple[int, int]]:
    return [even_split(n, ShardOptions(i, count, drop)) for i in range(count)]


def test_reprs_match_grain() -> None:
    assert (
        repr(ShardOptions(1, 3))
        == "ShardOptions(shard_index=1, shard_count=3, drop_remainder=False)"
    )
    assert repr(NoSharding()) == "NoSharding(shard_index=0, shard_count=1, drop_remainder=False)"


def test_options_are_frozen_and_compare_by_class() -> None:
    options = ShardOptions(0, 2)
    with pytest.raises(AttributeError):
        options.shard_index = 1  # type: ignore[misc]
    assert options == ShardOptions(0, 2)
    assert NoSharding() == NoSharding()
    assert NoSharding() != ShardOptions(0, 1)


@pytest.mark.parametrize(
    ("index", "count", "error", "match"),
    [
        (3, 3, ValueError, r"shard_index must be in \[0, shard_count\) = \[0, 3\)"),
        (-1, 3, ValueError, "got shard_index=-1"),
        (0, 0, ValueError, "shard_count must be >= 1"),
        (0.0, 1, TypeError, "shard_index must be an int"),
        ("0", 1, TypeError, "shard_index must be an int"),
        (0, True, TypeError, "shard_count must be an int"),
    ],
)
def test_invalid_options_are_rejected(
    index: object, count: object, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        ShardOptions(index, count)  # type: ignore[arg-type]


def test_drop_remainder_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="drop_remainder must be a bool"):
        ShardOptions(0, 1, "x")  # type: ignore[arg-type]


def test_even_split_matches_grain() -> None:
    # Grain 0.2.18's even_split gives these shards.
    assert _shards(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert _shards(10, 4, drop=True) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert _shards(3, 4) == [(0, 1), (1, 2), (2, 3), (3, 3)]
    assert _shards(3, 4, drop=True) == [(0, 0)] * 4
    assert even_split(0, ShardOptions(0, 4)) == (0, 0)


@pytest.mark.parametrize("n", range(0, 40))
@pytest.mark.parametrize("count", range(1, 9))
def test_uneven_shards_hold_every_record_once(n: int, count: int) -> None:
    records = [r for start, stop in _shards(n, count) for r in range(start, stop)]
    assert records == list(range(n))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 10**6), count=st.integers(1, 300), drop=st.booleans())
def test_shards_are_contiguous_and_balanced(n: int, count: int, drop: bool) -> None:
    shards = _shards(n, count, drop)
    assert shards[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(shards))
    sizes = [stop - start for start, stop in shards]
    if drop:
        assert sizes == [n // count] * count
    else:
        assert shards[-1][1] == n
        assert sizes == [n // count + 1] * (n % count) + [n // count] * (count - n % count)


def test_even_split_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="num_records must be >= 0"):
        even_split(-1, NoSharding())
    with pytest.raises(TypeError, match="options must be a ShardOptions"):
        even_split(10, (0, 1))  # type: ignore[arg-type]


def test_shard_by_jax_process_uses_jax(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(process_index=lambda: 2, process_count=lambda: 4)
    monkeypatch.setitem(sys.modules, "jax", fake)
    assert ShardByJaxProcess(drop_remainder=True) == ShardByJaxProcess(True)
    assert repr(ShardByJaxProcess(drop_remainder=True)) == (
        "ShardByJaxProcess(shard_index=2, shard_count=4, drop_remainder=True)"
    )


def test_shard_by_jax_process_without_jax_is_one_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)  # makes `import jax` fail
    options = ShardByJaxProcess()
    assert (options.shard_index, options.shard_count, options.drop_remainder) == (0, 1, False)


def test_public_module_exports() -> None:
    assert chute.sharding.__all__ == ["NoSharding", "ShardByJaxProcess", "ShardOptions"]
    assert chute.sharding.ShardOptions is ShardOptions
    assert chute.ShardOptions is ShardOptions
    assert chute.NoSharding is NoSharding
    assert chute.ShardByJaxProcess is ShardByJaxProcess
