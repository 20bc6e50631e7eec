"""A host's virtual shards in worker processes or Ray actors, read in the fixed order.

Worker ``i`` of ``W`` runs the host's shards at places ``i, i + W, ...`` of
its list (``ShardsIterator`` in report-dry mode) and the parent asks the
owner of each shard in turn, so every worker is asked for its own shards in
the order it reads them; a worker's ``ShardRanDry`` tells the parent a shard
ended.  The workers are ``Worker``s (``launch.worker``): local processes or
Ray actors, with their restarts and their states after the last element
delivered, which this iterator's state gathers per shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chute._core.pipeline_context import carrying, join, without_budget
from chute._execution import launch, worker_seeds
from chute._execution.pool import move_workers
from chute._execution.worker import Worker
from chute._stages.batch import leaves_stacked_by
from chute._stages.virtual_shards_iter import (
    ShardRanDry,
    ShardTurns,
    WorkerShards,
    entries_of,
    split_state,
)

if TYPE_CHECKING:
    from chute._stages.virtual_shards import VirtualShardsIterDataset

__all__ = ["PooledShardsIterator"]


class PooledShardsIterator(ShardTurns):
    """Shards ``ids`` of ``ds`` run by ``count`` workers (at most one per shard)."""

    def __init__(self, ds: VirtualShardsIterDataset, ids: Sequence[int], count: int) -> None:
        count = max(1, min(count, len(ids)))
        base = ds._next_base_seed()
        self._dealt = [list(ids[i::count]) for i in range(count)]
        super().__init__({v: ds._shards[v] for v in ids}, ds.num_shards, ())
        # The workers run under the options set around this stage, as mp_prefetch's do.
        options = without_budget(join(self).options)
        self._parents = tuple(
            launch.worker(
                ds._executor,
                carrying(WorkerShards({v: ds._shards[v] for v in mine}, ds.num_shards), options),
                index=i,
                count=count,
                buffer_size=ds._options.per_worker_buffer_size,
                seed=worker_seeds.worker_seed(base, i),
                worker_init_fn=ds._init_fn,
                restart=ds._options.restart_workers,
                stack_batches=_stacked_by,
            )
            for i, mine in enumerate(self._dealt)
        )
        self._owner = [k % count for k in range(len(self._ids))]

    @property
    def workers(self) -> tuple[Any, ...]:
        """The workers, each running the shards dealt to it."""
        return tuple(self._parents)

    def _take(self, k: int) -> Any:
        # A worker ends (StopIteration) only after telling of each of its shards; its own
        # errors arrive with the shard noted.
        element = next(self._parents[self._owner[k]])
        if isinstance(element, ShardRanDry):
            raise StopIteration
        return element

    def _parts(self) -> list[Any]:
        by_shard: dict[int, Any] = {}
        for worker in self._parents:
            for v, part in enumerate(entries_of(worker.get_state(), "worker state")):
                if part is not None:
                    by_shard[v] = part["state"]
        return [by_shard[v] for v in self._ids]

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "num_shards", "shards")
        self._apply_positions(state)
        following = self._next_shard()  # each worker starts at its first shard from there on
        move_workers(self._parents, [split_state(state, mine, following) for mine in self._dealt])

    def close(self) -> None:
        """Tells every worker to stop, then waits for each."""
        for worker in self._parents:
            if isinstance(worker, Worker):
                worker.begin_stop()
        super().close()


def _stacked_by(dataset: Any, leaves_fn: Any) -> Any:
    """A worker's shards, each of whose default batches is stacked into the worker's ring."""
    if isinstance(dataset, WorkerShards):
        return dataset.stacked_by(leaves_stacked_by, leaves_fn)
    return leaves_stacked_by(dataset, leaves_fn)
