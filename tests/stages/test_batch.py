"""batch on both dataset kinds, batch_fn and batch_and_pad."""

from __future__ import annotations

import numpy as np
import pytest

from chute import MapDataset
from chute._stages.batch import leaves_stacked_by
from chute.experimental import assert_equal_output_after_checkpoint, batch_and_pad


def test_map_batch_lengths_and_epochs() -> None:
    ds = MapDataset.range(10).batch(3)
    assert len(ds) == 4
    assert [b.tolist() for b in ds] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert ds[4].tolist() == [0, 1, 2]  # the next epoch starts a new batch
    assert len(MapDataset.range(10).batch(3, drop_remainder=True)) == 3


def test_each_epoch_is_batched_on_its_own() -> None:
    ds = MapDataset.range(5).shuffle(seed=1).repeat(2).batch(5)
    first, second = (b.tolist() for b in ds)
    assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4]
    assert first != second


def test_batch_stacks_trees_and_strings() -> None:
    ds = MapDataset.source(
        [{"a": 1, "b": (2, 3), "s": "x"}, {"a": 4, "b": (5, 6), "s": "yz"}]
    ).batch(2)
    batch = ds[0]
    assert batch["a"].tolist() == [1, 4]
    assert batch["b"][1].tolist() == [3, 6]
    assert batch["s"].tolist() == ["x", "yz"]


def test_custom_batch_fn_pads_ragged_elements() -> None:
    def pad_collate(items: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        longest = max(x["tokens"].shape[0] for x in items)
        return {
            "tokens": np.stack(
                [np.pad(x["tokens"], (0, longest - len(x["tokens"]))) for x in items]
            )
        }

    ragged = MapDataset.source([{"tokens": np.arange(n)} for n in [2, 5, 3, 4, 1, 2]])
    shapes = [b["tokens"].shape for b in ragged.batch(3, batch_fn=pad_collate)]
    assert shapes == [(3, 5), (3, 4)]


def test_batch_and_pad_keeps_a_static_shape() -> None:
    ds = (
        MapDataset.range(5)
        .to_iter_dataset()
        .batch(2, batch_fn=lambda v: batch_and_pad(v, batch_size=2))
    )
    assert [b.tolist() for b in ds] == [[0, 1], [2, 3], [4, 0]]
    padded = batch_and_pad([{"a": 1, "b": np.ones(2)}], batch_size=3, pad_value=-1)
    assert padded["a"].tolist() == [1, -1, -1]
    assert padded["b"].tolist() == [[1, 1], [-1, -1], [-1, -1]]
    with pytest.raises(ValueError, match="same batch_size"):
        batch_and_pad([1, 2, 3], batch_size=2)


def test_map_batch_refuses_to_follow_filter() -> None:
    with pytest.raises(
        ValueError, match=r"cannot follow MapDataset.filter,.*to_iter_dataset\(\).batch"
    ):
        MapDataset.range(10).filter(lambda x: x).map(lambda x: x).batch(2)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", None])
def test_bad_batch_sizes_are_rejected(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="batch_size"):
        MapDataset.range(3).batch(bad)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="batch_size"):
        MapDataset.range(3).to_iter_dataset().batch(bad)  # type: ignore[arg-type]


def test_bad_batch_fn_and_drop_remainder() -> None:
    with pytest.raises(TypeError, match="batch_fn must be callable"):
        MapDataset.range(3).batch(2, batch_fn=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="drop_remainder must be a bool"):
        MapDataset.range(3).to_iter_dataset().batch(2, drop_remainder="yes")  # type: ignore[arg-type]


def test_iter_batch_drop_remainder() -> None:
    ds = MapDataset.range(5).to_iter_dataset().batch(2, drop_remainder=True)
    assert [b.tolist() for b in ds] == [[0, 1], [2, 3]]


def test_checkpoints_restore_exactly() -> None:
    assert_equal_output_after_checkpoint(MapDataset.range(20).batch(3).to_iter_dataset())
    assert_equal_output_after_checkpoint(
        MapDataset.range(20).to_iter_dataset().filter(lambda x: x % 3).batch(4)
    )
    assert_equal_output_after_checkpoint(
        MapDataset.range(20).shuffle(seed=2).repeat(2).batch(7).to_iter_dataset()
    )


def test_leaves_stacked_by_routes_only_default_batches_through_leaves_fn() -> None:
    def negated(leaves: list[np.ndarray]) -> np.ndarray:
        return -np.stack(leaves)

    default = MapDataset.range(4).to_iter_dataset().batch(2)
    assert [b.tolist() for b in leaves_stacked_by(default, negated)] == [[0, -1], [-2, -3]]
    assert [b.tolist() for b in default] == [[0, 1], [2, 3]]  # the original is left as it was
    own = MapDataset.range(4).to_iter_dataset().batch(2, batch_fn=list)
    assert leaves_stacked_by(own, negated) is own
    batched_then_mapped = default.map(lambda b: b)
    assert leaves_stacked_by(batched_then_mapped, negated) is batched_then_mapped


def test_leaves_stacked_by_routes_the_first_map_batch_of_each_read_through_leaves_fn() -> None:
    def negated(leaves: list[np.ndarray]) -> np.ndarray:
        return -np.stack(leaves)

    batches = MapDataset.range(1, 41).batch(2)
    ds = batches.slice(slice(1, None, 2)).to_iter_dataset()  # a worker's share
    routed = leaves_stacked_by(ds, negated)
    expected = [b.tolist() for b in ds]  # the original is left as it was
    assert expected == [[3 + 4 * k, 4 + 4 * k] for k in range(10)]
    got = [b.tolist() for b in routed]
    assert got[0] == [-3, -4]  # the first read holds one batch
    assert all(g in (e, [-x for x in e]) for g, e in zip(got, expected))
    assert len(got) == len(expected)
    read = routed._parent._getitems([0, 1, 2])  # one read of three batches: the first routed
    assert [b.tolist() for b in read] == [[-3, -4], [7, 8], [11, 12]]


def test_leaves_stacked_by_leaves_other_map_batches_alone() -> None:
    def negated(leaves: list[np.ndarray]) -> np.ndarray:
        return -np.stack(leaves)

    own = MapDataset.range(4).batch(2, batch_fn=list).to_iter_dataset()
    then_mapped = MapDataset.range(4).batch(2).to_iter_dataset().map(lambda b: b)
    batched_then_mapped = MapDataset.range(4).batch(2).map(lambda b: b).to_iter_dataset()
    for ds in (own, then_mapped, batched_then_mapped):
        assert leaves_stacked_by(ds, negated) is ds
