"""Per-stage statistics: switched on by options, config or environment; workers; verdict."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import chute
from chute import MapDataset, MultiprocessingOptions
from chute.experimental import (
    DatasetOptions,
    ExecutionTrackingMode,
    WithOptionsIterDataset,
    assert_equal_output_after_checkpoint,
    execution_summary,
    skip_errors,
)

TRACKED = DatasetOptions(execution_tracking_mode=ExecutionTrackingMode.STAGE_TIMING)


def tracked(ds: Any) -> Any:
    return WithOptionsIterDataset(ds, TRACKED)


def sleepy(seconds: float) -> Any:
    def slow(x: int) -> int:
        time.sleep(seconds)
        return x

    return slow


@pytest.fixture
def debug_mode() -> Iterator[None]:
    chute.config.update("py_debug_mode", True)
    try:
        yield
    finally:
        chute.config.update("py_debug_mode", False)


def by_name(summary: Any) -> dict[str, Any]:
    return {s.name: s for s in summary.stages}


def test_counts_every_stage_in_pipeline_order() -> None:
    ds = MapDataset.range(60).seed(1).shuffle().map(lambda x: x + 1).batch(4).to_iter_dataset()
    it = iter(tracked(ds))
    batches = list(it)
    summary = execution_summary(it)
    names = [s.name for s in summary.stages]
    assert names[0] == "range" and names[-2:] == ["to_iter_dataset", "with_options"]
    assert names.index("map(<lambda>)") < names.index("batch(4)")
    stages = by_name(summary)
    assert stages["range"].elements == 60
    assert stages["map(<lambda>)"].elements == 60
    assert stages["batch(4)"].elements == 15 == len(batches)
    assert summary.elements == 15
    assert all(s.where == "main" for s in summary.stages)
    assert stages["map(<lambda>)"].bytes_per_element is not None


def test_a_stage_time_excludes_its_parents() -> None:
    ds = MapDataset.range(20).map(sleepy(0.005)).to_iter_dataset().map(lambda x: x)
    it = iter(tracked(ds))
    list(it)
    stages = by_name(execution_summary(it))
    slow = stages["map(slow)"]
    assert slow.self_seconds >= 20 * 0.005 * 0.9
    assert slow.min_seconds >= 0.005 * 0.9
    assert stages["map(<lambda>)"].self_seconds < slow.self_seconds / 2
    assert slow.share > 0.5


def test_a_filter_counts_the_elements_it_keeps() -> None:
    ds = MapDataset.range(30).filter(lambda x: x % 3 == 0).to_iter_dataset()
    it = iter(tracked(ds))
    assert len(list(it)) == 10
    assert by_name(execution_summary(it))["filter(<lambda>)"].elements == 10


def test_debug_mode_tracks_every_pipeline(debug_mode: None) -> None:
    it = iter(MapDataset.range(5).to_iter_dataset())
    assert list(it) == [0, 1, 2, 3, 4]
    assert execution_summary(it).elements == 5


def test_the_environment_switches_tracking_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUTE_PY_DEBUG_MODE", "1")
    fresh = chute._core.config.Config()
    monkeypatch.setattr(chute._core.config, "config", fresh)
    it = iter(MapDataset.range(3).to_iter_dataset())
    list(it)
    assert execution_summary(it).elements == 3


def test_without_tracking_nothing_is_timed_and_the_summary_says_how() -> None:
    it = iter(MapDataset.range(5).map(str).to_iter_dataset())
    assert "_chute_record" not in type(it).__dict__
    with pytest.raises(ValueError, match="STAGE_TIMING"):
        execution_summary(it)


def test_tracking_changes_neither_elements_nor_checkpoints() -> None:
    def pipeline() -> Any:
        return MapDataset.range(40).seed(5).shuffle().map(lambda x: x * 3).to_iter_dataset()

    plain, timed = iter(pipeline()), iter(tracked(pipeline()))
    assert list(plain) == list(timed)
    assert_equal_output_after_checkpoint(tracked(pipeline()))
    it = iter(tracked(pipeline()))
    for _ in range(7):
        next(it)
    resumed = iter(pipeline())
    resumed.set_state(it.get_state()["parent"] if "parent" in it.get_state() else it.get_state())
    assert list(resumed) == list(it)


def test_error_budgets_still_skip_records_when_tracked() -> None:
    def bad(x: int) -> int:
        if x == 5:
            raise ValueError("bad record")
        return x

    ds = skip_errors(MapDataset.range(20).map(bad).batch(4).to_iter_dataset(), max_errors=1)
    it = iter(tracked(ds))
    rows = sum(len(b) for b in it)
    assert rows == 19


def test_summary_is_json_and_a_table_with_a_verdict() -> None:
    it = iter(tracked(MapDataset.range(10).map(str).to_iter_dataset()))
    list(it)
    summary = execution_summary(it)
    data = json.loads(summary.to_json())
    assert [s["name"] for s in data["stages"]] == [s.name for s in summary.stages]
    text = str(summary)
    assert "map(str)" in text and "self time" in text
    assert text.endswith(summary.verdict)


@pytest.mark.usefixtures("start_method")
def test_workers_report_their_stages_to_the_parent() -> None:
    ds = MapDataset.range(40).map(sleepy(0.001)).to_iter_dataset().batch(4)
    it = iter(tracked(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))))
    assert sum(len(b) for b in it) == 40
    summary = execution_summary(it)
    stages = by_name(summary)
    assert stages["map(slow)"].where == "workers"
    assert stages["map(slow)"].elements == 40
    assert stages["batch(4)"].elements == 10
    assert stages["mp_prefetch(2 workers)"].where == "main"
    assert stages["mp_prefetch(2 workers)"].buffer is not None
    assert summary.workers == 2


@pytest.mark.usefixtures("start_method")
def test_a_tracked_worker_pipeline_restores() -> None:
    def pipeline() -> Any:
        ds = MapDataset.range(30).map(lambda x: x * 2).to_iter_dataset()
        return tracked(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))

    it = iter(pipeline())
    head = [next(it) for _ in range(11)]
    restored = iter(pipeline())
    restored.set_state(it.get_state())
    tail = list(restored)
    assert sorted(head + tail) == [x * 2 for x in range(30)]
    assert execution_summary(restored).elements == len(tail)


# -- the verdict on three constructed pipelines --------------------------------------------


def test_verdict_slow_map_in_this_process_says_use_workers() -> None:
    it = iter(tracked(MapDataset.range(40).map(sleepy(0.02)).to_iter_dataset()))  # 0.8 s
    list(it)
    verdict = execution_summary(it).verdict
    assert "`map(slow)`" in verdict and "worker processes" in verdict


@pytest.mark.usefixtures("start_method")
def test_verdict_slow_map_in_saturated_workers_says_workers_are_the_limit() -> None:
    ds = MapDataset.range(60).map(sleepy(0.01)).to_iter_dataset()
    it = iter(tracked(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))))
    list(it)
    verdict = execution_summary(it).verdict
    assert "the workers are the limit" in verdict and "`map(slow)`" in verdict


def test_verdict_slow_consumer_says_the_pipeline_is_not_the_bottleneck() -> None:
    it = iter(tracked(MapDataset.range(40).map(str).to_iter_dataset()))
    for _ in it:
        time.sleep(0.005)
    assert "not the bottleneck" in execution_summary(it).verdict


def test_the_summary_is_logged_while_tracking(caplog: pytest.LogCaptureFixture) -> None:
    chute.config.update("stats_log_interval_s", 0.01)
    try:
        it = iter(tracked(MapDataset.range(6).map(sleepy(0.005)).to_iter_dataset()))
        with caplog.at_level(logging.INFO, logger="chute"):
            list(it)
    finally:
        chute.config.update("stats_log_interval_s", 60.0)
    assert any("pipeline statistics" in r.getMessage() for r in caplog.records)


def test_the_picture_is_written_when_a_directory_is_configured(tmp_path: Any) -> None:
    chute.config.update("py_dataset_visualization_output_dir", str(tmp_path))
    try:
        it = iter(MapDataset.range(4).map(str).to_iter_dataset())
    finally:
        chute.config.update("py_dataset_visualization_output_dir", None)
    assert list(it) == ["0", "1", "2", "3"]
    pictures = sorted(p.suffix for p in tmp_path.iterdir())
    assert pictures == [".dot", ".html"]
    assert "map(str)" in next(tmp_path.glob("*.html")).read_text()


def test_a_picture_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    chute.config.update("py_dataset_visualization_output_dir", str(blocker / "sub"))
    try:
        with caplog.at_level(logging.WARNING, logger="chute"):
            it = iter(MapDataset.range(2).to_iter_dataset())
    finally:
        chute.config.update("py_dataset_visualization_output_dir", None)
    assert list(it) == [0, 1]
    assert any("no pipeline picture" in r.getMessage() for r in caplog.records)


def loader(workers: int) -> Any:
    sampler = chute.IndexSampler(
        num_records=60, shard_options=chute.NoSharding(), shuffle=True, num_epochs=1, seed=3
    )
    return chute.DataLoader(
        data_source=chute.RangeDataSource(0, 60, 1),
        sampler=sampler,
        operations=[chute.transforms.Map(lambda x: x * 2), chute.Batch(6)],
        worker_count=workers,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_a_data_loader_reports_its_stages(debug_mode: None, workers: int) -> None:
    it = iter(loader(workers))
    assert sum(len(b) for b in it) == 60
    summary = execution_summary(it)
    stages = by_name(summary)
    assert stages["batch(6)"].elements == 10
    assert stages["batch(6)"].where == ("workers" if workers else "main")
    assert summary.stages[-1].kind == "DataLoader" and summary.elements == 10
    assert summary.workers == workers


def test_a_tracked_data_loader_restores_into_another_worker_count(debug_mode: None) -> None:
    first = iter(loader(2))
    head = [next(first) for _ in range(3)]
    resumed = iter(loader(1))
    resumed.set_state(first.get_state())
    tail = list(resumed)
    assert sorted(int(x) for b in head + tail for x in b) == [x * 2 for x in range(60)]
    assert execution_summary(resumed).elements == len(tail)


def test_thread_prefetch_stages_report_their_buffers() -> None:
    from chute.experimental import ThreadPrefetchIterDataset, multithread_prefetch

    base = MapDataset.range(80).map(sleepy(0.001)).to_iter_dataset()
    for ds in (
        ThreadPrefetchIterDataset(base, prefetch_buffer_size=4),
        multithread_prefetch(base, num_threads=2, buffer_size=4),
    ):
        it = iter(tracked(ds))
        assert len(list(it)) == 80
        last = [s for s in execution_summary(it).stages if s.buffer is not None][-1]
        assert last.buffer.capacity >= 4 and last.elements == 80


def test_iterating_a_map_dataset_counts_its_implicit_read(debug_mode: None) -> None:
    it = iter(MapDataset.range(30).map(str))
    assert len(list(it)) == 30
    summary = execution_summary(it)
    assert [s.name for s in summary.stages] == ["range", "map(str)", "to_iter_dataset"]
    assert summary.elements == 30


def test_verdict_on_tiny_elements_says_workers_would_not_pay(debug_mode: None) -> None:
    it = iter(MapDataset.range(2_000).map(str))
    list(it)
    summary = execution_summary(it)
    assert summary.wait_ratio > 0.1  # list() does little but wait
    assert "would cost more than it saves" in summary.verdict


# -- sizes and the verdict's advice (issue 34) ------------------------------------------------


def images(x: int) -> dict[str, Any]:
    return {"image": np.full((64, 64, 3), x % 256, np.uint8), "label": np.int32(x)}


def test_batches_stacked_in_worker_shared_memory_count_their_arrays_bytes() -> None:
    # 8 images of 12 KiB: a 96 KiB batch, which a worker stacks straight into shared memory.
    ds = MapDataset.range(64).map(images).batch(8).to_iter_dataset()
    it = iter(tracked(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))))
    batches = list(it)
    real = batches[0]["image"].nbytes + batches[0]["label"].nbytes
    stages = by_name(execution_summary(it))
    assert stages["batch(8)"].where == "workers"
    assert stages["batch(8)"].bytes_per_element == real
    assert stages["mp_prefetch(2 workers)"].bytes_per_element == real


def test_float_share_counts_only_float_arrays() -> None:
    jpegs = MapDataset.range(8).map(lambda x: {"jpeg": bytes(1000), "label": x}).batch(4)
    floats = MapDataset.range(8).map(lambda x: np.zeros((16, 16), np.float32)).batch(4)
    for ds, share in ((jpegs, 0.0), (floats, 1.0)):
        it = iter(tracked(ds.to_iter_dataset()))
        list(it)
        assert by_name(execution_summary(it))["batch(4)"].float_share == share


def summary_of(wall: float, where: str, float_share: float | None = None, workers: int = 0) -> Any:
    """A summary whose loop waited all the time for one hot stage (1 s of work)."""
    from chute._stats.summary import ExecutionSummary, StageStats

    def stage(index: int, name: str, place: str, seconds: float) -> StageStats:
        return StageStats(
            index=index, name=name, kind=name, parents=(index - 1,) if index else (),
            spec="?", where=place, elements=100, calls=100, self_seconds=seconds,
            min_seconds=0.0, mean_seconds=seconds / 100, max_seconds=0.0,
            bytes_per_element=1e6, share=1.0, float_share=float_share,
        )  # fmt: skip

    stages = (stage(0, "map(decode)", where, wall * workers * 0.2 if workers else wall),)
    if workers:
        stages += (stage(1, "mp_prefetch", "main", 0.0),)
    return ExecutionSummary(
        stages=stages, wall_seconds=wall, wait_seconds=wall, elements=100, workers=workers,
        cpu_count=2, verdict="",
    )  # fmt: skip


def test_verdict_advises_no_workers_for_a_run_too_short_to_pay_for_them() -> None:
    from chute._stats.verdict import SHORT_RUN_S, verdict

    short = verdict(summary_of(0.027, "main"))
    assert "worker processes would take a large part" in short and "27 ms" in short
    assert "mp_prefetch(" not in short and "run it in worker processes" not in short
    assert "run it in worker processes" in verdict(summary_of(SHORT_RUN_S * 2, "main"))
    # A real pipeline that ends after a few milliseconds.
    it = iter(tracked(MapDataset.range(10).map(sleepy(0.002)).to_iter_dataset()))
    list(it)
    assert "run it in worker processes" not in execution_summary(it).verdict


@pytest.mark.parametrize(("float_share", "says_uint8"), [(0.0, False), (None, False), (0.9, True)])
def test_verdict_suggests_smaller_dtypes_only_for_float_arrays(
    float_share: float | None, says_uint8: bool
) -> None:
    from chute._stats.verdict import verdict

    said = verdict(summary_of(10.0, "workers", float_share, workers=2))
    assert "busy only" in said and "send smaller elements" in said
    assert ("uint8 rather than float32" in said) == says_uint8


def test_the_slice_chute_gives_each_worker_is_left_out_of_the_stages() -> None:
    ds = MapDataset.range(64)[:48].map(str).batch(8).to_iter_dataset()  # the user's own slice
    it = iter(tracked(ds.mp_prefetch(MultiprocessingOptions(num_workers=2))))
    assert len(list(it)) == 6
    stages = execution_summary(it).stages
    names = [s.name for s in stages]
    assert names[:5] == ["range", "slice", "map(str)", "batch(8)", "to_iter_dataset"]
    assert names.count("slice") == 1 and "mp_prefetch(2 workers)" in names
    assert [s.parents for s in stages] == [()] + [(k,) for k in range(len(stages) - 1)]
    assert by_name(execution_summary(it))["batch(8)"].elements == 6


def test_a_data_loader_shows_no_slice_of_its_workers(debug_mode: None) -> None:
    it = iter(loader(2))
    list(it)
    stages = execution_summary(it).stages
    assert "slice" not in [s.name for s in stages]
    assert all(p < s.index for s in stages for p in s.parents)
    assert stages[-1].parents == (stages[-2].index,)
