"""A mix stage in the statistics: each source's realised share beside its weight, in
``execution_summary`` (text and ``to_dict``), in ``chute profile``, and per-source
counts in ``chute.monitoring``'s export."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import chute
from chute import experimental
from chute._core import metrics
from chute.cli import main

N = 10_000
# Grain's mix turns [0.7, 0.3] into the integer proportions 233:100 (the smallest weight
# scaled to 100, the others truncated), so 10,000 elements take 6,997 and 3,003.
SHARES = "source 0: 6,997 (70.0% / 70.0%); source 1: 3,003 (30.0% / 30.0%)"


def _mix(weights: Any = (0.7, 0.3)) -> chute.IterDataset:
    a = chute.MapDataset.range(0, 100_000).to_iter_dataset()
    b = chute.MapDataset.range(100_000, 200_000).to_iter_dataset()
    return chute.IterDataset.mix([a, b], list(weights) if isinstance(weights, tuple) else weights)


def _tracked(ds: chute.IterDataset) -> Any:
    options = experimental.DatasetOptions(
        execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING
    )
    return iter(experimental.WithOptionsIterDataset(ds, options))


def _read(it: Any, n: int) -> list[Any]:
    return [next(it) for _ in range(n)]


def _mix_counts() -> dict[tuple[str, ...], float]:
    return dict(metrics.snapshot()["mix_elements"])


def _per_source(elements: list[int]) -> list[int]:
    """How many of ``elements`` came from each source (the first's are below 100,000)."""
    first = sum(x < 100_000 for x in elements)
    return [first, len(elements) - first]


def test_summary_text_shows_each_sources_share_beside_its_weight() -> None:
    it = _tracked(_mix())
    _read(it, N)
    text = str(experimental.execution_summary(it))
    assert f"mixed, elements per source (realised share / weight): {SHARES}." in text


def test_summary_structure_holds_elements_share_and_weight_per_source() -> None:
    it = _tracked(_mix())
    seen = _per_source(_read(it, N))
    summary = experimental.execution_summary(it)
    (mix,) = [s for s in summary.stages if s.sources]
    assert mix.kind == "MixedIterDataset"
    assert seen == [6_997, 3_003]
    assert [(x.source, x.elements) for x in mix.sources] == [(0, 6_997), (1, 3_003)]
    assert [round(x.share, 3) for x in mix.sources] == [0.7, 0.3]
    assert [round(x.weight, 3) for x in mix.sources] == [0.7, 0.3]
    as_dict = summary.to_dict()["stages"][mix.index]["sources"]
    assert [(d["elements"], round(d["weight"], 3)) for d in as_dict] == [(6_997, 0.7), (3_003, 0.3)]
    assert not any(s.sources for s in summary.stages if s.index != mix.index)


def test_weight_shown_is_the_one_in_force_now_under_a_schedule() -> None:
    schedule = experimental.WeightSchedule({0: [0.7, 0.3], N: [0.5, 0.5]})
    it = _tracked(_mix(schedule))
    seen = _per_source(_read(it, 2 * N))
    (mix,) = [s for s in experimental.execution_summary(it).stages if s.sources]
    assert [x.elements for x in mix.sources] == seen
    assert abs(seen[0] - 12_000) <= 10
    assert [round(x.weight, 3) for x in mix.sources] == [0.5, 0.5]


def test_weights_set_live_show_from_then_on() -> None:
    it = _tracked(_mix())
    seen = _read(it, N)
    experimental.set_mix_weights(it, [1, 3])
    seen += _read(it, N)
    (mix,) = [s for s in experimental.execution_summary(it).stages if s.sources]
    assert [x.elements for x in mix.sources] == _per_source(seen)
    assert abs(mix.sources[0].elements - 9_500) <= 10
    assert [round(x.weight, 3) for x in mix.sources] == [0.25, 0.75]


def test_a_pipeline_without_statistics_runs_the_mix_iterator_untouched() -> None:
    it = iter(_mix())
    assert "_chute_record" not in type(it).__dict__
    seen = _per_source(_read(it, 10))
    assert it.counts == tuple(seen)


def test_shares_and_metrics_come_from_worker_processes_merged() -> None:
    # Finite sources: the mix stops when the second runs out, and each worker sends its
    # last figures (statistics and metrics) as its share ends.
    a = chute.MapDataset.range(0, 2_800).to_iter_dataset()
    b = chute.MapDataset.range(100_000, 101_200).to_iter_dataset()
    mixed = chute.IterDataset.mix([a, b], [0.7, 0.3])
    before = _mix_counts()
    it = _tracked(mixed.mp_prefetch(chute.MultiprocessingOptions(num_workers=2)))
    seen = _per_source(list(it))
    (mix,) = [s for s in experimental.execution_summary(it).stages if s.sources]
    assert mix.where == "workers"
    assert [x.elements for x in mix.sources] == seen
    assert [round(x.weight, 3) for x in mix.sources] == [0.7, 0.3]
    assert abs(mix.sources[0].share - 0.7) < 0.01
    after = _mix_counts()
    assert [after.get(("mixed", k), 0) - before.get(("mixed", k), 0) for k in "01"] == seen


# -- chute.monitoring ----------------------------------------------------------------------


def test_metrics_count_elements_per_source() -> None:
    before = _mix_counts()
    it = _tracked(_mix())
    _read(it, N)
    after = _mix_counts()
    added = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert added == {("mixed", "0"): 6_997, ("mixed", "1"): 3_003}


def test_metrics_export_shows_per_source_counters() -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    from chute import monitoring

    def scraped() -> dict[str, float]:
        return {
            sample.labels["source"]: sample.value
            for family in parser.text_string_to_metric_families(monitoring.metrics_text())
            if family.name == "chute_mix_elements"
            for sample in family.samples
            if sample.labels.get("stage") == "mixed"
        }

    before = scraped()
    it = _tracked(_mix())
    _read(it, N)
    after = scraped()
    assert {k: v - before.get(k, 0) for k, v in after.items()} == {"0": 6_997, "1": 3_003}


def test_a_restore_counts_on_without_counting_twice_or_losing_any() -> None:
    before = _mix_counts()
    it = _tracked(_mix())
    seen = _read(it, 1_000)
    state = it.get_state()
    _mix_counts()  # a read between: the counts so far are taken
    seen += _read(it, 1_000)
    it.set_state(state)  # the mix counts from zero again: what it counted is taken first
    seen += _read(it, 500)
    after = _mix_counts()
    added = [after.get(("mixed", k), 0) - before.get(("mixed", k), 0) for k in "01"]
    assert added == _per_source(seen)


def test_metrics_changes_and_merge_carry_labelled_counts_between_processes() -> None:
    changed = [[["mixed", "0"], 5], [["mixed", "1"], 2]]
    before = _mix_counts()
    metrics.merge({"mix_elements": changed}, source="worker-x")
    after = _mix_counts()
    assert after[("mixed", "0")] - before.get(("mixed", "0"), 0) == 5
    assert after[("mixed", "1")] - before.get(("mixed", "1"), 0) == 2


# -- chute profile ---------------------------------------------------------------------------

PIPELINE = """
import chute


def make():
    a = chute.MapDataset.range(0, 100_000).to_iter_dataset()
    b = chute.MapDataset.range(100_000, 200_000).to_iter_dataset()
    return chute.IterDataset.mix([a, b], [0.7, 0.3])
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "mixed_pipeline.py"
    path.write_text(textwrap.dedent(PIPELINE))
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield path
    for name in set(sys.modules) - before:
        with contextlib.suppress(ValueError):
            cloudpickle.unregister_pickle_by_value(sys.modules[name])
        del sys.modules[name]


def test_profile_prints_each_sources_share_beside_its_weight(
    module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["profile", f"{module}:make", "--elements", str(N), "--no-suggest"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert f"elements per source (realised share / weight): {SHARES}." in out


def test_a_mix_without_statistics_still_counts_its_sources_in_the_metrics() -> None:
    from chute._core import metrics

    a = chute.MapDataset.range(100).to_iter_dataset()
    b = chute.MapDataset.range(100, 200).to_iter_dataset()
    before = dict(metrics.snapshot().get("mix_elements") or {})
    with iter(chute.IterDataset.mix([a, b], [0.7, 0.3])) as it:
        for _ in range(50):
            next(it)
        counted = metrics.snapshot()["mix_elements"]
    gained = sum(counted.values()) - sum(before.values())
    assert gained == 50
