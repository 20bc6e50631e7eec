"""``virtual_shards``: a pipeline whose order and checkpoints do not depend on where it runs.

The user's function builds the whole per-shard pipeline for virtual shard
``v`` of ``V`` (its slice of the source, then filters, packing, shuffles,
batches...).  The global stream is defined by ``V`` alone: round ``n`` takes
the ``n``-th element of every shard still running, in shard order, so it is
every shard's elements sorted by ``(n, v)``.  A topology only decides who
runs which shards: host ``h`` of ``M`` (``shard_options``) runs the shards
``v % M == h``, and its workers (``mp_prefetch``, local or Ray) share those.
Each host reads its shards in the fixed order, so on every step the hosts
together yield the next ``M`` elements of the global stream.

A state holds each shard's state and the turns it had: merged over the hosts
(``merge_states``), it restores into any number of hosts (that ``V``
divides) and workers, and the stream goes on exactly where it stopped.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chute._core.dataset import IterDataset, MapDataset
from chute._core.errors import CheckpointError
from chute._core.fingerprint import digest, fingerprint
from chute._core.options import MultiprocessingOptions, RayExecutor
from chute._core.pipeline_walk import pipeline_nodes
from chute._core.seeding import derive_seed
from chute._core.sharding import NoSharding, ShardOptions
from chute._core.validate import check_callable, check_int
from chute._execution import launch, processes, ray_cluster, worker_seeds
from chute._stages.mp_prefetch import MultiprocessPrefetchIterDataset
from chute._stages.mp_prefetch import mp_prefetch as mp_prefetch_stage
from chute._stages.virtual_shards_iter import ShardsIterator, ShardTurns
from chute._stages.virtual_shards_pool import PooledShardsIterator

__all__ = [
    "VirtualShardsIterDataset",
    "find_virtual_shards",
    "merge_states",
    "mp_prefetch",
    "virtual_shards",
    "with_shards_changed",
    "with_workers_in",
]

#: The stage name in states, and the kind in fingerprints.
STAGE = "virtual_shards"


class VirtualShardsIterDataset(IterDataset[Any]):
    """Virtual shards of one pipeline, this host's part read in the fixed global order.

    Built by ``chute.experimental.virtual_shards``, which says how shards, hosts,
    workers and states fit together.

    Args:
      make_shard: Builds virtual shard ``v``'s whole pipeline from
        ``ShardOptions(shard_index=v, shard_count=num_shards, drop_remainder=True)``.
      num_shards: The number of virtual shards, fixed for the life of a run.
      shard_options: This host's index and the host count (None: one host).
    """

    def __init__(
        self,
        make_shard: Callable[[ShardOptions], Any],
        num_shards: int,
        *,
        shard_options: ShardOptions | None = None,
    ) -> None:
        super().__init__()
        check_callable(make_shard, "virtual_shards(): make_shard")
        self.num_shards = check_int(num_shards, "virtual_shards(): num_shards", minimum=1)
        self._make_shard = make_shard
        self._shards = tuple(self._build(v) for v in range(self.num_shards))
        self._options = MultiprocessingOptions(num_workers=0)
        self._executor: RayExecutor | None = None
        self._init_fn: Callable[[int, int], None] | None = None
        self._iterators_made = 0
        self._hoist_workers()
        self._host = self._place(shard_options)
        self._label = f"virtual_shards(num_shards={self.num_shards})"
        self._identity: str | None = None

    # -- building ------------------------------------------------------------------------

    def _build(self, v: int) -> IterDataset[Any]:
        shard = ShardOptions(shard_index=v, shard_count=self.num_shards, drop_remainder=True)
        ds = self._make_shard(shard)
        if isinstance(ds, MapDataset):
            ds = ds.to_iter_dataset()
        if not isinstance(ds, IterDataset):
            raise TypeError(
                f"virtual_shards(): make_shard must return a chute IterDataset or MapDataset; "
                f"for virtual shard {v} it returned {ds!r} that is a {type(ds).__name__}."
            )
        if find_virtual_shards(ds) is not None:
            raise ValueError(
                f"virtual_shards(): virtual shard {v}'s pipeline holds virtual_shards itself; "
                "build each shard from its own slice of the source instead."
            )
        return ds

    def _hoist_workers(self) -> None:
        """An ``mp_prefetch`` that ends every shard's pipeline says how many workers the
        host's shards get: it is taken off, and the workers run the shards."""
        tops = [s for s in self._shards if isinstance(s, MultiprocessPrefetchIterDataset)]
        for v, ds in enumerate(self._shards):
            inner = ds._parent if isinstance(ds, MultiprocessPrefetchIterDataset) else ds
            deeper = next(
                (
                    n
                    for n in pipeline_nodes(inner)
                    if isinstance(n, MultiprocessPrefetchIterDataset)
                ),
                None,
            )
            if deeper is not None:
                raise ValueError(
                    f"virtual_shards(): virtual shard {v}'s pipeline runs mp_prefetch before "
                    f"other stages ({ds!r}); with virtual shards the workers run whole shards: "
                    "end each shard's pipeline with mp_prefetch, or call mp_prefetch on the "
                    "virtual_shards dataset."
                )
        if not tops:
            return
        if len(tops) != len(self._shards):
            raise ValueError(
                "virtual_shards(): some shards' pipelines end with mp_prefetch and some do "
                "not; end every shard's pipeline the same way."
            )
        first = tops[0]
        if any(t._options != first._options or t._executor != first._executor for t in tops):
            raise ValueError(
                "virtual_shards(): the shards' pipelines end with mp_prefetch of different "
                "options; give every shard the same."
            )
        self._shards = tuple(t._parent for t in tops)
        self._set_workers(first._options, first._executor, first._init_fn)

    def _place(self, options: ShardOptions | None) -> tuple[int, int]:
        """This host's index and the host count, checked against ``num_shards``."""
        options = NoSharding() if options is None else options
        if not isinstance(options, ShardOptions):
            raise TypeError(
                "virtual_shards(): shard_options must be a chute.ShardOptions (the host's index "
                f"and count), e.g. ShardByJaxProcess(); got {options!r}."
            )
        hosts, v = options.shard_count, self.num_shards
        if v % hosts:
            near = sorted({max(hosts, v // hosts * hosts), (v // hosts + 1) * hosts})
            raise ValueError(
                f"virtual_shards(): {v} virtual shards cannot be dealt evenly to {hosts} hosts, "
                f"so the hosts would make unequal numbers of steps. Use a num_shards that every "
                f"host count you run divides: for {hosts} hosts, "
                f"{' or '.join(map(str, near))}."
            )
        return options.shard_index, hosts

    def _set_workers(
        self,
        options: MultiprocessingOptions,
        executor: RayExecutor | None,
        init_fn: Callable[[int, int], None] | None,
    ) -> None:
        self._options, self._executor, self._init_fn = options, executor, init_fn
        if executor is None and self._worker_count():
            processes.prepare()

    def with_workers(
        self,
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None = None,
        executor: RayExecutor | None = None,
    ) -> VirtualShardsIterDataset:
        """A copy whose host shares its shards among ``options.num_workers`` workers.

        Args:
          options: The worker count and buffers, as for ``mp_prefetch``.
          worker_init_fn: Runs in each worker before its shards.
          executor: None for local worker processes, a ``RayExecutor`` for Ray actors.

        Returns:
          The copy; this dataset is unchanged.
        """
        if not isinstance(options, MultiprocessingOptions):
            raise TypeError(
                f"mp_prefetch() takes a chute.MultiprocessingOptions (got {options!r})."
            )
        if worker_init_fn is not None:
            check_callable(worker_init_fn, "mp_prefetch(): worker_init_fn")
        copied = copy.copy(self)
        copied._iterators_made = 0
        copied._set_workers(
            options, launch.check_executor(executor, "mp_prefetch()"), worker_init_fn
        )
        return copied

    def on_host(self, shard_options: ShardOptions | None) -> VirtualShardsIterDataset:
        """A copy that runs on host ``shard_options.shard_index`` of ``shard_count``.

        Args:
          shard_options: The host's index and the host count (None: one host).

        Returns:
          The copy; this dataset is unchanged.
        """
        copied = copy.copy(self)
        copied._host = copied._place(shard_options)
        copied._iterators_made = 0
        return copied

    # -- what runs here ------------------------------------------------------------------

    @property
    def host_shards(self) -> tuple[int, ...]:
        """The virtual shards this host runs: ``v % hosts == host``."""
        host, hosts = self._host
        return tuple(range(host, self.num_shards, hosts))

    def _worker_count(self) -> int:
        workers = self._options.num_workers
        if workers == "auto":  # the cores here, or the Ray cluster's: at most one per shard
            fit = os.cpu_count() or 1
            if self._executor is not None:
                fit = ray_cluster.workers_that_fit(self._executor)
            return max(1, min(fit, len(self.host_shards)))
        return int(workers)

    def _next_base_seed(self) -> int:
        epoch = self._iterators_made
        self._iterators_made += 1
        return worker_seeds.base_seed(derive_seed(self), epoch)

    def __iter__(self) -> ShardTurns:
        ids, workers = self.host_shards, self._worker_count()
        it: PooledShardsIterator | ShardsIterator
        if workers:
            it = PooledShardsIterator(self, ids, workers)
        else:
            it = ShardsIterator({v: self._shards[v] for v in ids}, self.num_shards)
        it.host = self._host
        return it

    def _data_identity(self) -> str:
        """Every shard's pipeline, as its fingerprint says it (the data slices included)."""
        if self._identity is None:
            self._identity = f"sha256 {digest([fingerprint(s) for s in self._shards])}"
        return self._identity

    def _describe(self) -> str:
        host, hosts = self._host
        workers = self._options.num_workers  # "auto" stays a word: a repr starts no Ray
        where = f"host {host} of {hosts}" + (f", {workers} workers" if workers else "")
        if self._executor is not None:
            where += f", {self._executor}"
        return f"{self.num_shards} shards like {self._shards[0]!r}, {where}"


def virtual_shards(
    make_shard: Callable[[ShardOptions], Any],
    num_shards: int,
    *,
    shard_options: ShardOptions | None = None,
) -> VirtualShardsIterDataset:
    """A pipeline in ``num_shards`` virtual shards, whose checkpoints move between topologies.

    ``make_shard(shard)`` builds the whole pipeline of one virtual shard, where
    ``shard`` is a ``ShardOptions(shard_index=v, shard_count=num_shards,
    drop_remainder=True)``: slice the source with it (``source[v::num_shards]``)
    and add the stages as usual (shuffle, filter, packing, batch...).  The
    global stream takes, round after round, the next element of every shard
    still running, in shard order.  ``shard_options`` says which host this is
    (``ShardByJaxProcess()`` under JAX); the host runs shards ``v % hosts ==
    host``, so ``num_shards`` must be a multiple of the host count.  Call
    ``mp_prefetch`` on the result (or end each shard's pipeline with it) to
    run the host's shards in worker processes or Ray actors.

    A state from ``get_state()`` holds this host's shards; merge every host's
    with ``merge_states`` and any topology resumes from the merge exactly where
    the run stopped.

    Args:
      make_shard: Builds one virtual shard's whole pipeline from its ``ShardOptions``.
      num_shards: The number of virtual shards, fixed for the life of a run.
      shard_options: This host's index and the host count (None: one host).

    Returns:
      The dataset of this host's part of the global stream.

    Raises:
      ValueError: ``num_shards`` is not a multiple of the host count, or a shard's
        pipeline runs ``mp_prefetch`` before other stages.
      TypeError: ``make_shard`` returns something other than a dataset.

    >>> import chute
    >>> def shard(opts):
    ...     mine = chute.MapDataset.range(8)[opts.shard_index :: opts.shard_count]
    ...     return mine.map(lambda x: 10 * x)
    >>> list(virtual_shards(shard, 4))
    [0, 10, 20, 30, 40, 50, 60, 70]
    >>> list(virtual_shards(shard, 4, shard_options=chute.ShardOptions(1, 2)))  # host 1 of 2
    [10, 30, 50, 70]
    """
    return VirtualShardsIterDataset(make_shard, num_shards, shard_options=shard_options)


def find_virtual_shards(ds: Any) -> VirtualShardsIterDataset | None:
    """The ``virtual_shards`` stage of ``ds``'s pipeline, or None."""
    return next((n for n in pipeline_nodes(ds) if isinstance(n, VirtualShardsIterDataset)), None)


def with_shards_changed(
    ds: Any, change: Callable[[VirtualShardsIterDataset], VirtualShardsIterDataset]
) -> Any:
    """``ds`` rebuilt over ``change(its virtual_shards stage)``; the stages after it are
    copied over the changed one, the rest of the pipeline is shared."""
    if isinstance(ds, VirtualShardsIterDataset):
        return change(ds)
    parents = [with_shards_changed(p, change) if find_virtual_shards(p) else p for p in ds._parents]
    return ds.with_parents(*parents)


def with_workers_in(
    ds: IterDataset[Any],
    options: MultiprocessingOptions,
    worker_init_fn: Callable[[int, int], None] | None,
    executor: RayExecutor | None,
) -> IterDataset[Any]:
    """``ds`` with its ``virtual_shards`` stage run by workers; the stages after it stay in
    this process (they read the host's stream)."""
    return with_shards_changed(ds, lambda vs: vs.with_workers(options, worker_init_fn, executor))


def mp_prefetch(
    ds: IterDataset[Any],
    options: MultiprocessingOptions | None = None,
    worker_init_fn: Callable[[int, int], None] | None = None,
    sequential_slice: bool = False,
    *,
    executor: RayExecutor | None = None,
) -> IterDataset[Any]:
    """``IterDataset.mp_prefetch``: ``ds`` in workers; a pipeline with ``virtual_shards``
    deals the host's shards to the workers (the stages after it run in this process)."""
    if find_virtual_shards(ds) is None:
        return mp_prefetch_stage(ds, options, worker_init_fn, sequential_slice, executor=executor)
    options = MultiprocessingOptions() if options is None else options
    return with_workers_in(ds, options, worker_init_fn, executor)


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state from the states every host saved at the same step.

    Each host's state holds its own virtual shards; the merge holds all of them,
    and every host of any topology restores from it.  The states must be
    alike elsewhere (the stages after ``virtual_shards`` hold no host
    positions of their own) and each shard may come from one host only.

    Args:
      states: Every host's ``get_state()``, saved after the same step.

    Returns:
      The merged state.

    Raises:
      CheckpointError: the states are not all from one pipeline's hosts.
    """
    states = list(states)
    if not states:
        raise CheckpointError("merge_states() takes the states of every host (got none).")
    return _merge(states, "state")


def _merge(parts: list[Any], where: str) -> Any:
    first = parts[0]
    if isinstance(first, Mapping) and first.get("stage") == STAGE:
        return _merge_shards(parts, where)
    if isinstance(first, Mapping):
        keys = set(first)
        if any(not isinstance(p, Mapping) or set(p) != keys for p in parts):
            raise _unlike(where)
        return {k: _merge([p[k] for p in parts], f"{where}[{k!r}]") for k in first}
    if isinstance(first, list) and all(isinstance(p, list) and len(p) == len(first) for p in parts):
        return [_merge([p[i] for p in parts], f"{where}[{i}]") for i in range(len(first))]
    if any(p != first for p in parts):
        raise _unlike(where)
    return first


def _merge_shards(parts: list[Any], where: str) -> dict[str, Any]:
    counts = {p.get("num_shards") for p in parts if isinstance(p, Mapping)}
    count = next(iter(counts)) if len(counts) == 1 else None
    if not isinstance(count, int) or any(not isinstance(p, Mapping) for p in parts):
        raise CheckpointError(
            f"merge_states(): the states hold different numbers of virtual shards "
            f"({sorted(map(str, counts))}) at {where}; merge the states of one run's hosts."
        )
    merged: list[Any] = [None] * count
    for h, part in enumerate(parts):
        shards = part.get("shards")
        if not isinstance(shards, list) or len(shards) != count:
            raise CheckpointError(
                f"merge_states(): state {h} has no list of {count} shard entries at {where}."
            )
        for v, entry in enumerate(shards):
            if entry is None:
                continue
            if merged[v] is not None and merged[v] != entry:
                raise CheckpointError(
                    f"merge_states(): states hold two different positions of virtual shard {v} "
                    f"(the second in state {h}, at {where}); merge the states that one run's "
                    "hosts saved at the same step."
                )
            merged[v] = entry
    # Hosts step together; one whose shards all ran dry stopped counting, and may lag.
    running = {p.get("step") for p in parts if not _ended(p)}
    if len(running) > 1:
        shown = ", ".join(map(str, sorted(running, key=str)))
        raise CheckpointError(
            f"merge_states(): the hosts saved at different steps ({shown}) at {where}; merge "
            "the states that every host saved after the same step."
        )
    steps = [p.get("step") for p in parts]
    if not all(isinstance(n, int) for n in steps):
        raise _unlike(where)
    following = {p.get("next_shard") for p in parts}
    kept = ("shards", "next_shard", "step")
    rest = [{k: val for k, val in p.items() if k not in kept} for p in parts]
    if any(r != rest[0] for r in rest):
        raise _unlike(where)
    return {
        **rest[0],
        "shards": merged,
        "step": max(steps),
        # Several hosts read several shards next: a restore finds its own from the turns.
        "next_shard": following.pop() if len(following) == 1 else None,
    }


def _ended(state: Mapping[str, Any]) -> bool:
    """Whether every shard that ``state`` holds ran dry."""
    return all(e["dry"] for e in state["shards"] if isinstance(e, Mapping))


def _unlike(where: str) -> CheckpointError:
    return CheckpointError(
        f"merge_states(): the hosts' states differ at {where}, outside the virtual shards: "
        "the states come from different pipelines, or a stage after virtual_shards holds a "
        "position of its own host (move such stages into each shard's pipeline)."
    )
