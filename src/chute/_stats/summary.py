"""``execution_summary``: the figures of every stage, as a table, and what they mean.

An ``ExecutionSummary`` is a tree of dataclasses (JSON-able with
``to_dict()``/``to_json()``) holding one ``StageStats`` per stage in
pipeline order, and prints as a table with the verdict below it.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Any

from chute._core.capabilities import CollectsStatistics
from chute._stats.reads import ReadStats, read_stats
from chute._stats.reads import text as _reads_text

__all__ = [
    "BufferStats",
    "ExecutionSummary",
    "SourceShare",
    "StageStats",
    "build",
    "execution_summary",
    "table",
]


@dataclasses.dataclass(frozen=True)
class BufferStats:
    """How full a read-ahead buffer (a prefetch stage, a worker pool) was.

    Args:
      capacity: the elements it can hold (for workers: over all of them).
      mean_fill: the elements it held on average when its consumer asked.
      empty_fraction: the share of requests that found it empty (the consumer waited).
    """

    capacity: int
    mean_fill: float
    empty_fraction: float


@dataclasses.dataclass(frozen=True)
class SourceShare:
    """What one source of a mix stage (``IterDataset.mix``) gave it.

    Args:
      source: the source's position among the mix's datasets.
      elements: elements it gave (over all workers) since the mix's iterators were
        built or restored.
      share: its part of the mix's elements (0 to 1).
      weight: its weight in force now, as a part of all weights (0 to 1; with workers,
        the mean over them).
    """

    source: int
    elements: int
    share: float
    weight: float


@dataclasses.dataclass(frozen=True)
class StageStats:
    """One stage's figures.

    Args:
      index: its place in pipeline order (sources first); ``parents`` uses it.
      name: the call that built it (``map(decode)``) or its kind.
      kind: the dataset class.
      parents: the indices of the stages it reads from.
      spec: its element spec as text, ``'?'`` where unknown.
      where: ``'main'`` (the process that iterates) or ``'workers'``.
      elements: elements it produced (over all workers).
      calls: times it was called (once per element, or once per chunk).
      self_seconds: time spent in the stage itself, not in its parents; for a
        prefetch stage, the time its consumer waited for it.
      min_seconds, mean_seconds, max_seconds: self time per element.
      bytes_per_element: the size of its output, measured on a sample; None if unknown.
      share: its part of all stages' self time (0 to 1).
      buffer: for a prefetch stage or worker pool, how full its buffer was.
      retries: for a source that reads an object store (``s3://``, ``gs://``, ...),
        the requests it retried after transient failures (over all workers); ``None``
        for other stages.
      float_share: the part of its output's bytes in floating-point arrays of 4 bytes
        a number or more (float32, float64), measured on the same sample as
        ``bytes_per_element``; None if unknown.
      sources: for a mix stage, each source's elements and realised share beside its
        weight; empty for other stages.
    """

    index: int
    name: str
    kind: str
    parents: tuple[int, ...]
    spec: str
    where: str
    elements: int
    calls: int
    self_seconds: float
    min_seconds: float
    mean_seconds: float
    max_seconds: float
    bytes_per_element: float | None
    share: float
    buffer: BufferStats | None = None
    retries: int | None = None
    float_share: float | None = None
    sources: tuple[SourceShare, ...] = ()


@dataclasses.dataclass(frozen=True)
class ExecutionSummary:
    """Where a pipeline's time went, stage by stage, and what to change.

    Args:
      stages: one entry per stage, in pipeline order.
      wall_seconds: time since the iterator's first ``next()``.
      wait_seconds: time the user's loop spent waiting inside ``next()``.
      elements: elements delivered to the user's loop.
      workers: worker processes (0: the pipeline runs in this process).
      cpu_count: CPU cores this process may use.
      verdict: the figures in plain language, with what to change.
      ray_nodes: the node of each Ray worker (``RayExecutor``), in worker order.
      moving_seconds: the time this process spent waiting for and reading the
        Ray workers' elements from Ray's object store, over all workers.
      reads: what the pipeline read from object stores and the local shard cache since
        the iterator started, in this process and its workers (chute's metrics, as
        ``chute.monitoring`` exports them); None when it read neither.
    """

    stages: tuple[StageStats, ...]
    wall_seconds: float
    wait_seconds: float
    elements: int
    workers: int
    cpu_count: int
    verdict: str
    ray_nodes: tuple[str, ...] = ()
    moving_seconds: float = 0.0
    reads: ReadStats | None = None

    @property
    def wait_ratio(self) -> float:
        """The share of the wall time the user's loop waited for data (0 to 1)."""
        return self.wait_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain dicts and lists (for JSON, logs, dashboards)."""
        return dataclasses.asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        """The summary as JSON text.

        Args:
          **kwargs: passed to ``json.dumps`` (``indent=2``, say).
        """
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        return table(self) + "\n\n" + self.verdict


def execution_summary(iterator: Any) -> ExecutionSummary:
    """Where ``iterator``'s time went so far, stage by stage, with a verdict.

    The iterator must collect statistics: make it from a pipeline with
    ``DatasetOptions(execution_tracking_mode=ExecutionTrackingMode.STAGE_TIMING)``
    (through ``WithOptionsIterDataset``), or after
    ``chute.config.update("py_debug_mode", True)``.  Stages in worker
    processes count too: each worker sends its figures every 0.2 s.

    Args:
      iterator: the iterator ``iter(ds)`` returned.

    Returns:
      An ``ExecutionSummary``; ``print()`` it for the table and the verdict.

    Raises:
      ValueError: the iterator collects no statistics.

    >>> from chute import MapDataset, experimental
    >>> options = experimental.DatasetOptions(
    ...     execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING)
    >>> ds = MapDataset.range(100).map(lambda x: x + 1).to_iter_dataset()
    >>> it = iter(experimental.WithOptionsIterDataset(ds, options))
    >>> total = sum(it)
    >>> summary = execution_summary(it)
    >>> [(s.name, s.elements) for s in summary.stages][:3]
    [('range', 100), ('map(<lambda>)', 100), ('to_iter_dataset', 100)]
    >>> summary.elements, summary.workers
    (100, 0)

    A stage that hands its parent's iterator on unchanged (``with_options``
    without an error budget) is never called: it shows no figures.
    """
    collector = iterator._chute_stats if isinstance(iterator, CollectsStatistics) else None
    if collector is None:
        raise ValueError(
            f"execution_summary(): {type(iterator).__name__} collects no statistics. Make the "
            "iterator from a pipeline with chute.experimental.WithOptionsIterDataset(ds, "
            "DatasetOptions(execution_tracking_mode=ExecutionTrackingMode.STAGE_TIMING)), or "
            'call chute.config.update("py_debug_mode", True) (or set CHUTE_PY_DEBUG_MODE=1) '
            "before iter()."
        )
    return build(collector)


def build(collector: Any) -> ExecutionSummary:
    """The summary of a ``Collector``'s figures now."""
    from chute._execution.performance import usable_cores
    from chute._stats.verdict import verdict

    rows = collector.rows()
    work = sum(f["self_ns"] for _, _, f in rows if f is not None and not f["fill_samples"])
    stages = tuple(_stage(node, where, figures, work) for node, where, figures in rows)
    outer = collector.outer.snapshot()
    ray = collector.ray_workers()
    summary = ExecutionSummary(
        stages=stages,
        wall_seconds=outer["wall_ns"] / 1e9,
        wait_seconds=outer["inclusive_ns"] / 1e9,
        elements=outer["elements"],
        workers=collector.worker_count(),
        cpu_count=usable_cores(),
        verdict="",
        ray_nodes=tuple(node for node, _ in ray),
        moving_seconds=sum((seconds for _, seconds in ray), 0.0),
        reads=read_stats(getattr(collector, "metrics_start", None)),
    )
    return dataclasses.replace(summary, verdict=verdict(summary))


def _sources(f: dict[str, Any]) -> tuple[SourceShare, ...]:
    counts = f.get("source_counts") or []
    total = sum(counts)
    return tuple(
        SourceShare(source=k, elements=n, share=n / total if total else 0.0, weight=w)
        for k, (n, w) in enumerate(zip(counts, f["source_weights"] if counts else ()))
    )


def _stage(node: Any, where: str, figures: dict[str, Any] | None, work: int) -> StageStats:
    f = figures or {}
    elements, own = f.get("elements", 0), f.get("self_ns", 0)
    buffer = None
    if f.get("fill_samples"):
        samples = f["fill_samples"]
        buffer = BufferStats(
            capacity=f["capacity"],
            mean_fill=f["fill_total"] / samples,
            empty_fraction=f["empty"] / samples,
        )
    return StageStats(
        index=node.index,
        name=node.name,
        kind=node.kind,
        parents=tuple(node.parents),
        spec=node.spec,
        where=where,
        elements=elements,
        calls=f.get("calls", 0),
        self_seconds=own / 1e9,
        min_seconds=max(0, f.get("min_ns", 0)) / 1e9,
        mean_seconds=own / elements / 1e9 if elements else 0.0,
        max_seconds=f.get("max_ns", 0) / 1e9,
        bytes_per_element=f["bytes_total"] / f["bytes_samples"] if f.get("bytes_samples") else None,
        share=own / work if work and buffer is None else 0.0,
        buffer=buffer,
        retries=f.get("retries"),
        float_share=f.get("float_bytes", 0) / f["bytes_total"] if f.get("bytes_total") else None,
        sources=_sources(f),
    )


def _time(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.0f} ns"


def _bytes(size: float | None) -> str:
    if size is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


_COLUMNS = ("#", "stage", "where", "elements", "self time", "share", "mean", "min", "max",
            "bytes/elem", "buffer")  # fmt: skip


def table(summary: ExecutionSummary) -> str:
    """The summary as a text table, one row per stage in pipeline order."""
    remote = any(s.retries is not None for s in summary.stages)
    columns = (*_COLUMNS, "retries") if remote else _COLUMNS
    rows: list[tuple[str, ...]] = [columns]
    for s in summary.stages:
        buffer = "-"
        if s.buffer is not None:
            buffer = (
                f"{s.buffer.mean_fill:.1f}/{s.buffer.capacity}, empty {s.buffer.empty_fraction:.0%}"
            )
        rows.append((
            str(s.index), s.name if len(s.name) <= 40 else s.name[:39] + "…", s.where,
            f"{s.elements:,}" if s.calls else "-", _time(s.self_seconds),
            f"{s.share:.0%}" if s.buffer is None else "waited", _time(s.mean_seconds),
            _time(s.min_seconds), _time(s.max_seconds), _bytes(s.bytes_per_element), buffer,
        ) + ((f"{s.retries:,}" if s.retries is not None else "-",) if remote else ()))  # fmt: skip
    widths = [max(len(r[c]) for r in rows) for c in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"{summary.elements:,} elements in {summary.wall_seconds:.3g} s; your loop waited "
        f"{summary.wait_ratio:.0%} of that ({summary.wait_seconds:.3g} s); "
        f"{summary.workers} worker process(es), {summary.cpu_count} usable core(s)."
    )
    for s in summary.stages:
        if s.sources:
            lines.append(
                f"#{s.index} {s.name}, elements per source (realised share / weight): "
                + "; ".join(
                    f"source {x.source}: {x.elements:,} ({x.share:.1%} / {x.weight:.1%})"
                    for x in s.sources
                )
                + "."
            )
    if summary.ray_nodes:
        nodes = collections.Counter(summary.ray_nodes)
        lines.append(
            "Ray workers on "
            + ", ".join(f"{node} ({n})" for node, n in sorted(nodes.items()))
            + f"; {summary.moving_seconds:.3g} s of the loop's wait went into taking "
            "their elements from Ray's object store."
        )
    if summary.reads is not None:
        lines += _reads_text(summary.reads, _time, _bytes)
    return "\n".join(lines)
