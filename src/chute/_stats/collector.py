"""``Collector``: the records of one tracked iterator, and the summary they make.

The collector of the iterator that ``iter(ds)`` returned holds one record per
stage of ``ds`` (None for the stages its worker pools run), finds the pools'
worker iterators for the figures the workers last sent, and turns them all
into an ``ExecutionSummary``.  Every ``log_interval`` seconds of iteration it
logs the summary to the ``chute`` logger, as Grain's debug mode does.

In a worker process the collector instead marks itself ``due`` every
``WORKER_REPORT_S`` so the worker loop sends ``report()`` with its next
message.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from chute._core import metrics
from chute._core.capabilities import CollectsStatistics
from chute._core.pipeline_walk import parents_of
from chute._execution.worker import Worker
from chute._stats import records as _records
from chute._stats.graph import StageNode, post_order, retries_of, stage_graph
from chute._stats.records import StageRecord
from chute._stats.timing import time_iterator

__all__ = ["WORKER_REPORT_S", "Collector", "LoaderCollector", "merged_rows"]

Row = tuple[StageNode, str, "dict[str, int] | None"]

logger = logging.getLogger("chute")

WORKER_REPORT_S = 0.2  # how often a worker sends its figures (with an element it sends anyway)
_NEVER = 1 << 62


class Collector:
    """The records of one tracked pipeline (see the module docstring)."""

    def __init__(
        self, ds: Any, records: list[StageRecord | None], pools: dict[int, list[int]]
    ) -> None:
        self.ds, self.records, self.pools = ds, records, pools
        self._pool_iterators: dict[int, Any] = {}
        self.in_worker = multiprocessing.parent_process() is not None
        self.due = False
        self.outer = StageRecord()  # replaced by watch()
        self._implicit = ""  # the stage watch() timed itself, if any
        self._shape: list[tuple[str, str, tuple[int, ...], bool]] | None = None  # report()'s stages
        self._counting: list[tuple[int, Any]] | None = None  # stages whose sources count retries
        self.metrics_start = metrics.snapshot()  # the summary's reads count from here

    def watch(self, iterator: Any) -> None:
        """``iterator`` is the one handed to the user: its calls are the user's loop waiting.

        An iterator no stage of the graph made (``iter()`` of a MapDataset reads it
        through a ``to_iter_dataset`` of its own) is timed here, as one more stage.
        """
        record = type(iterator).__dict__.get("_chute_record")
        if record is None:
            record = StageRecord()
            time_iterator(iterator, record)
            if "_chute_record" not in type(iterator).__dict__:
                return  # it cannot be timed
            self._implicit = iterator._stage_name()
        self.outer = record
        record.on_deadline = self._deadline
        record.deadline_ns = time.perf_counter_ns() + self._interval_ns()

    def _interval_ns(self) -> int:
        if self.in_worker:
            return int(WORKER_REPORT_S * 1e9)
        from chute._core.config import config

        return int(float(config.stats_log_interval_s) * 1e9)

    def _deadline(self, now: int) -> None:
        self.outer.deadline_ns = now + self._interval_ns()
        if self.in_worker:
            self.due = True
            return
        from chute._stats.summary import build

        logger.info("chute: pipeline statistics so far:\n%s", build(self))

    def pool_started(self, index: int, iterator: Any) -> None:
        """Called when the worker pool at stage ``index`` made its iterator."""
        self._pool_iterators[index] = weakref.ref(iterator)

    # -- in a worker ----------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """This worker's stages and figures, for the parent (plain data)."""
        self.due = False
        if self._shape is None:  # datasets never change: the graph is walked once
            self._shape = [
                (n.name, n.kind, n.parents, n.internal) for n in stage_graph(self.ds, specs=False)
            ]
        figures = [None if r is None else r.snapshot() for r in self.records]
        return {"stages": self._shape, "figures": self._with_retries(figures)}

    def _with_retries(self, figures: list[dict[str, int] | None]) -> list[dict[str, int] | None]:
        """``figures`` with each object-store source's retries so far (``merged`` sums them)."""
        if self._counting is None:  # datasets never change: found once
            self._counting = [
                (i, node)
                for i, node in enumerate(post_order(self.ds))
                if retries_of(node) is not None
            ]
        for i, node in self._counting:
            figures[i] = {**(figures[i] or {}), "retries": retries_of(node) or 0}
        return figures

    # -- in the parent ----------------------------------------------------------------------

    def rows(self) -> list[Row]:
        """Every stage in pipeline order with where it ran and its figures.

        A pool's stages are those its workers report (merged over workers), in
        place of the parent's own nodes below the pool.
        """
        nodes = stage_graph(self.ds)
        own = self._with_retries([None if r is None else r.snapshot() for r in self.records])
        hidden = set().union(*self.pools.values()) if self.pools else set()
        out: list[Row] = []
        new_index: dict[int, int] = {}
        for node in nodes:
            if node.index in hidden:
                continue
            parents = tuple(new_index[p] for p in node.parents if p in new_index)
            if node.index in self.pools:
                top = self._worker_rows(node.index, out)
                if top is not None:
                    parents = (top,)
            new_index[node.index] = len(out)
            figures = own[node.index] if self.records[node.index] is not None else None
            out.append((_renumbered(node, len(out), parents), "main", figures))
        if self._implicit:
            node = StageNode(len(out), self._implicit, self._implicit, (len(out) - 1,))
            out.append((node, "main", self.outer.snapshot()))
        return shown(out)

    def _worker_rows(self, pool: int, out: list[Row]) -> int | None:
        return merged_rows(self._reports(pool), "workers", out)

    def _reports(self, pool: int) -> list[dict[str, Any]]:
        ref = self._pool_iterators.get(pool)
        iterator = ref() if ref is not None else None
        if iterator is None:
            return []
        return [w.stats for w in parents_of(iterator) if _reports_of(w)]

    def ray_workers(self) -> list[tuple[str, float]]:
        """The node and the seconds spent moving elements of each Ray worker (none local)."""
        out = []
        for ref in self._pool_iterators.values():
            iterator = ref()
            out += _ray_workers(parents_of(iterator) if iterator is not None else ())
        return out

    def worker_count(self) -> int:
        """Worker processes of the pools in this pipeline, as they run now."""
        count = 0
        for ref in self._pool_iterators.values():
            iterator = ref()
            count += len(parents_of(iterator)) if iterator is not None else 0
        return count


def _reports_of(worker: Any) -> bool:
    """Whether ``worker`` is a worker of a pool whose figures have come (statistics on)."""
    return isinstance(worker, Worker) and worker.stats is not None


def merged_rows(reports: list[dict[str, Any]], where: str, out: list[Row]) -> int | None:
    """Appends the stages of ``reports`` (one per process, same shape) merged; the top's index."""
    if not reports:
        return None
    shape = reports[0]["stages"]
    offset = len(out)
    for k, (name, kind, parents, internal) in enumerate(shape):
        figures = [r["figures"][k] for r in reports if len(r["figures"]) == len(shape)]
        merged = _records.merged([f for f in figures if f is not None])
        parents = tuple(offset + p for p in parents)
        node = StageNode(offset + k, name, kind, parents, internal=internal)
        out.append((node, where, merged))
    return len(out) - 1


def shown(rows: list[Row]) -> list[Row]:
    """``rows`` without the nodes chute made itself (a worker's slice), renumbered: each
    stage that read one reads its parents instead."""
    if not any(node.internal for node, _, _ in rows):
        return rows
    out: list[Row] = []
    now: dict[int, tuple[int, ...]] = {}  # old index -> the shown stages it stands for
    for node, where, figures in rows:
        parents = tuple(p for old in node.parents for p in now.get(old, ()))
        if node.internal:
            now[node.index] = parents
            continue
        now[node.index] = (len(out),)
        out.append((StageNode(len(out), node.name, node.kind, parents, node.spec), where, figures))
    return out


class LoaderCollector:
    """The collector of a ``DataLoader``'s iterator: its workers' stages, then the loader.

    ``workers()`` gives the loader's worker iterators as they are now: worker
    processes (their figures arrive with the elements) or in-process iterators
    of timed pipelines.
    """

    def __init__(self, workers: Callable[[], Sequence[Any]], name: str) -> None:
        self._workers, self._name = workers, name
        self.outer = StageRecord()
        self.metrics_start = metrics.snapshot()  # the summary's reads count from here

    def watch(self, iterator: Any) -> None:
        """The loader's iterator: its calls are the user's loop waiting."""
        self.outer = type(iterator).__dict__.get("_chute_record", self.outer)

    def rows(self) -> list[Row]:
        out: list[Row] = []
        reports = []
        in_process = False
        for worker in self._workers():
            if _reports_of(worker):
                reports.append(worker.stats)
            elif isinstance(worker, CollectsStatistics) and worker._chute_stats is not None:
                in_process = True
                reports.append(worker._chute_stats.report())
        top = merged_rows(reports, "main" if in_process else "workers", out)
        node = StageNode(len(out), self._name, "DataLoader", () if top is None else (top,))
        out.append((node, "main", self.outer.snapshot()))
        return shown(out)

    def worker_count(self) -> int:
        return sum(_reports_of(w) for w in self._workers())

    def ray_workers(self) -> list[tuple[str, float]]:
        return _ray_workers(self._workers())


def _ray_workers(workers: Sequence[Any]) -> list[tuple[str, float]]:
    """(node, seconds moving elements) of the workers that are Ray actors."""
    return [(w.node, w.moving_s) for w in workers if hasattr(w, "moving_s")]


def _renumbered(node: StageNode, index: int, parents: tuple[int, ...]) -> StageNode:
    return StageNode(index, node.name, node.kind, parents, node.spec)
