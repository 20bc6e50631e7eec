"""An error budget skips the failing records, not the batches that hold them."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from chute import ErrorBudgetExceededError, MapDataset, MultiprocessingOptions
from chute._stages.conformance import assert_equal_output_after_checkpoint
from chute._stages.error_budget import skip_errors

BAD = set(range(5, 1000, 91))  # 11 failing records in 1,000


def decode(x: int) -> int:
    if x in BAD:
        raise ValueError(f"record {x} is corrupt")
    return x


def _rows(batches: list[np.ndarray]) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b).ravel()]


GOOD = [x for x in range(1000) if x not in BAD]


def test_map_dataset_batches_lose_only_the_failing_records() -> None:
    ds = skip_errors(MapDataset.range(1000).map(decode).batch(10).to_iter_dataset(), max_errors=20)
    it = iter(ds)
    batches = list(it)
    assert _rows(batches) == GOOD
    assert [len(b) for b in batches] == [10] * 98 + [9]  # full until the data ends
    assert len(it.skipped) == 11
    assert [e["index"] for e in it.skipped] == sorted(BAD)


def test_batches_of_map_dataset_with_maps_after_the_batch() -> None:
    ds = MapDataset.range(100).map(decode).batch(8, drop_remainder=True).map(lambda b: b * 2)
    batches = list(skip_errors(ds.to_iter_dataset(), max_errors=5))
    good = [x for x in range(100) if x not in BAD]
    assert _rows(batches) == [2 * x for x in good[: len(good) // 8 * 8]]
    assert all(len(b) == 8 for b in batches)


def test_iter_dataset_batches_lose_only_the_failing_records() -> None:
    ds = MapDataset.range(1000).to_iter_dataset().map(decode).batch(10)
    it = iter(skip_errors(ds, max_errors=20))
    batches = list(it)
    assert _rows(batches) == GOOD and [len(b) for b in batches][:98] == [10] * 98
    assert len(it.skipped) == 11


def test_budget_counts_records_as_tried_and_logs_the_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ds = skip_errors(MapDataset.range(1000).map(decode).batch(10).to_iter_dataset(), max_errors=20)
    it = iter(ds)
    with caplog.at_level(logging.WARNING, logger="chute"):
        list(it)
    assert it.get_state()["tried"] == 1000
    assert [e["position"] for e in it.skipped] == sorted(BAD)
    first = caplog.records[0].getMessage()
    assert "failing record" in first and "element index 5 in stage map(decode)" in first
    assert len(caplog.records) == 11


def test_budget_ratio_is_a_fraction_of_records() -> None:
    ds = MapDataset.range(1000).map(decode).batch(10).to_iter_dataset()
    assert len(list(skip_errors(ds, max_error_ratio=0.02, min_elements=100))) == 99
    with pytest.raises(ErrorBudgetExceededError, match=r"11 of \d+ elements failed"):
        list(skip_errors(ds, max_errors=10))


def test_record_skipping_batches_resume_exactly() -> None:
    ds = MapDataset.range(60).map(decode).batch(4).to_iter_dataset()
    assert_equal_output_after_checkpoint(skip_errors(ds, max_errors=5), max_steps=None)
    it = iter(skip_errors(ds, max_errors=5))
    for _ in range(3):
        next(it)
    restored = iter(skip_errors(ds, max_errors=5))
    restored.set_state(it.get_state())
    assert restored.skipped == it.skipped and len(it.skipped) == 1


def test_skipped_is_reachable_through_later_stages() -> None:
    ds = skip_errors(MapDataset.range(100).map(decode).to_iter_dataset(), max_errors=5)
    it = iter(ds.map(lambda x: x + 1).batch(7))
    assert len(_rows(list(it))) == 98
    assert [e["index"] for e in it.skipped] == [5, 96]


def test_skipped_in_worker_processes_reaches_the_parent() -> None:
    ds = skip_errors(MapDataset.range(200).map(decode).to_iter_dataset(), max_errors=5)
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)).batch(10))
    try:
        rows = _rows(list(it))
        assert sorted(rows) == [x for x in range(200) if x not in BAD]
        assert sorted(e["index"] for e in it.skipped) == [5, 96, 187]
    finally:
        it.close()


def _workers(ds):  # type: ignore[no-untyped-def]
    return ds.mp_prefetch(MultiprocessingOptions(num_workers=2))


@pytest.mark.parametrize("budget_outside", [True, False])
def test_map_dataset_batches_in_worker_processes_lose_only_the_failing_records(
    budget_outside: bool,
) -> None:
    read = MapDataset.range(1000).map(decode).batch(10).to_iter_dataset()
    ds = (
        skip_errors(_workers(read), max_errors=20)
        if budget_outside
        else _workers(skip_errors(read, max_errors=20))
    )
    with iter(ds) as it:
        batches = list(it)
    assert sorted(_rows(batches)) == GOOD  # every good record once, none of a bad one's batch
    assert len(it.skipped) == 11


def test_a_budget_over_workers_keeps_the_batches_of_an_error_free_run() -> None:
    clean = MapDataset.range(200).batch(10).to_iter_dataset()
    with iter(_workers(clean)) as it:
        plain = [b.tolist() for b in it]
    with iter(skip_errors(_workers(clean), max_errors=3)) as it:
        budgeted = [b.tolist() for b in it]
    assert budgeted == plain


@pytest.mark.parametrize("workers", [0, 2])
def test_skipped_records_name_the_file_and_record_the_source_knows(
    tmp_path: pytest.TempPathFactory, workers: int
) -> None:
    pytest.importorskip("array_record")
    from chute import ArrayRecordDataSource
    from chute._sources.array_record.writer import write_array_record

    files = write_array_record([b"%d" % i for i in range(100)], f"{tmp_path}/train", num_shards=4)
    ds = MapDataset.source(ArrayRecordDataSource(files)).map(lambda r: decode(int(r)))
    pipeline = skip_errors(ds.to_iter_dataset(), max_errors=5)
    if workers:
        pipeline = _workers(pipeline)
    it = iter(pipeline)
    try:
        assert sorted(it) == [x for x in range(100) if x not in BAD]
        skipped = sorted(it.skipped, key=lambda e: e["index"])
    finally:
        it.close()
    # The writer deals records out to the shards in turn (25 a shard): 96 is record 24 of
    # shard 0, source index 24; 5 is record 1 of shard 1, source index 26.
    where = [(e["index"], e["source_index"], e["file"], e["record"]) for e in skipped]
    assert where == [(24, 24, files[0], 24), (26, 26, files[1], 1)]
