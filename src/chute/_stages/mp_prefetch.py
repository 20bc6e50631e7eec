"""``IterDataset.mp_prefetch``: the pipeline runs in worker processes.

Worker ``i`` of ``W`` runs the whole pipeline over MapDataset indices
``i, i + W, ...`` (or over one contiguous block with ``sequential_slice``),
filters and batches included, and the parent reads the workers round-robin,
skipping those that ran out: the same order as Grain's.  See
``chute._execution.processes`` for how workers start and why.

``num_workers="auto"`` (chute's addition) picks the count when the first
iterator starts (``performance.auto_worker_count``: at least 1) and keeps it
for the dataset's later iterators; a restore into an "auto" pipeline takes the
count from the checkpoint, so it resumes the very order it saved.  With a RAM
budget (or "auto"), workers that fall behind get larger buffers
(``buffer_sizing``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.dataset_options import DatasetOptions
from chute._core.errors import CheckpointError
from chute._core.nesting import inner_iterator
from chute._core.options import MultiprocessingOptions, RayExecutor
from chute._core.pipeline_context import carrying, join, options_set_in, without_budget
from chute._core.registry import untimed_type
from chute._core.seeding import derive_seed
from chute._core.state_check import (
    MAX_POSITION,
    by_stage,
    count,
    fields,
    refuse,
    require,
)
from chute._core.validate import check_callable
from chute._execution import launch, performance, processes, ray_cluster, worker_seeds
from chute._execution.buffer_sizing import BufferSizer
from chute._execution.pool import PoolSpec, WorkerPool
from chute._stages.batch import leaves_stacked_by
from chute._stages.map import MapIterDataset, RandomMapIterDataset
from chute._stages.prefetch import PrefetchIterDataset
from chute._stages.slicing import share, share_stream
from chute._stages.source_dataset import start_downloads
from chute._stages.streams import Stream, positions_of

# Stages that make one element of each: a checkpoint of workers that run only these moves
# to another worker count (random_map draws by stream position: see _stages.slicing).
_ELEMENT_WISE = (MapIterDataset, RandomMapIterDataset)


class MultiprocessPrefetchIterDataset(IterDataset[Any]):
    """Runs ``parent`` in ``options.num_workers`` worker processes.

    Each worker seeds ``random``, NumPy's global generator and torch's (when
    the pipeline has imported torch) with a seed of its own, new for every
    iterator (epoch), so augmentations drawn from them differ across workers
    and epochs.  With a ``.seed()`` in the pipeline those seeds derive from
    it and a rerun draws the same numbers; without one they are fresh each
    run.  ``worker_init_fn(worker_index, worker_count)`` runs after that, in
    each worker, and may seed them its own way.

    >>> from chute import MapDataset, MultiprocessingOptions
    >>> ds = MapDataset.range(6).to_iter_dataset().batch(2)
    >>> [b.tolist() for b in ds.mp_prefetch(MultiprocessingOptions(num_workers=2))]
    [[0, 2], [1, 3], [4], [5]]
    """

    _records_batched = False  # set under an error budget: see chute._stages._record_batches

    def __init__(
        self,
        parent: IterDataset[Any],
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
        executor: RayExecutor | None = None,
    ) -> None:
        super().__init__(parent)
        if not isinstance(options, MultiprocessingOptions):
            raise TypeError(
                "mp_prefetch() takes a chute.MultiprocessingOptions (got "
                f"{options!r} that is a {type(options).__name__})."
            )
        if worker_init_fn is not None:
            check_callable(worker_init_fn, "mp_prefetch(): worker_init_fn")
        self._options, self._init_fn = options, worker_init_fn
        self._executor = launch.check_executor(executor, "mp_prefetch()")
        self._iterators_made = 0  # each new iterator is a new epoch of workers
        self._sequential = bool(sequential_slice)
        self._auto = options.num_workers == "auto"
        self._workers_picked: int | None = None if self._auto else int(options.num_workers)
        checked = 1 if self._workers_picked is None else self._workers_picked
        for worker in range(checked):  # fails now, not in a worker, if it cannot slice
            share(parent, worker, checked, self._sequential)
        if checked and self._executor is None:
            processes.prepare()  # a fork server, if one is needed, loads while the program goes on

    def __iter__(self) -> DatasetIterator[Any]:
        return _MultiprocessIterator(self)

    def _worker_count(self) -> int:
        """The number of workers: given, or measured once when "auto"."""
        if self._workers_picked is None and self._executor is not None:
            self._workers_picked = ray_cluster.workers_that_fit(self._executor)
        if self._workers_picked is None:
            self._workers_picked = performance.auto_worker_count(
                self._parent, self._options.ram_budget_mb, self._options.per_worker_buffer_size
            )
        return self._workers_picked

    def _sizer(self, workers: int) -> BufferSizer | None:
        """What grows the workers' buffers, when there is a RAM budget (or "auto")."""
        budget_mb = self._options.ram_budget_mb
        if budget_mb is None and not self._auto:
            return None
        budget = (performance.DEFAULT_BUDGET_MB if budget_mb is None else budget_mb) * 2**20
        return BufferSizer(workers, budget, self._options.per_worker_buffer_size)

    def _next_base_seed(self) -> int:
        """The base seed of a new iterator's workers: each iterator is a new epoch."""
        epoch = self._iterators_made
        self._iterators_made += 1
        return worker_seeds.base_seed(derive_seed(self), epoch)

    def _share(self, worker: int, count: int, stream: Stream | None) -> IterDataset[Any]:
        """Worker ``worker``'s pipeline; under an error budget, its batches are made of records."""
        if stream is None:
            mine = share(self._parent, worker, count, self._sequential)
        else:
            mine = share_stream(self._parent, worker, count, stream)
        if self._records_batched:
            from chute._stages._record_batches import records_batched

            mine = records_batched(mine)
        return mine

    def _elastic_problem(self) -> str | None:
        """Why a checkpoint cannot move to another number of workers, or None."""
        if self._sequential:
            return "sequential_slice gives every worker a fixed block of the source"
        node: Any = self._parent
        while not isinstance(node, PrefetchIterDataset):
            if untimed_type(node) not in _ELEMENT_WISE:
                return (
                    f"the workers run {type(node).__name__}, which is not an element-wise "
                    "map or random_map (a filter, batch or other stage holds positions of its own)"
                )
            node = node._parent
        return None

    def _source_length(self) -> int:
        node: Any = self._parent
        while not isinstance(node, PrefetchIterDataset):
            node = node._parent
        return len(node._parent)

    def _describe(self) -> str:
        where = "" if self._executor is None else f", {self._executor}"
        return f"{self._parent!r}, {self._options}{where}"


def mp_prefetch(
    ds: IterDataset[Any],
    options: MultiprocessingOptions | None = None,
    worker_init_fn: Callable[[int, int], None] | None = None,
    sequential_slice: bool = False,
    *,
    executor: RayExecutor | None = None,
) -> IterDataset[Any]:
    """``ds`` in worker processes (or Ray actors); with no workers, ``ds`` itself.

    See ``MultiprocessPrefetchIterDataset`` for how workers seed the global
    random generators before ``worker_init_fn(worker_index, worker_count)`` runs.
    """
    options = options if options is not None else MultiprocessingOptions()
    launch.check_executor(executor, "mp_prefetch()")
    if isinstance(options, MultiprocessingOptions) and options.num_workers == 0:
        return ds  # (``"auto"`` always starts workers: at least one)
    return MultiprocessPrefetchIterDataset(ds, options, worker_init_fn, sequential_slice, executor)


def prefetch(ds: IterDataset[Any], options: MultiprocessingOptions) -> IterDataset[Any]:
    """Deprecated name of ``mp_prefetch``."""
    warnings.warn(
        "IterDataset.prefetch(options) is deprecated; use IterDataset.mp_prefetch(options).",
        DeprecationWarning,
        stacklevel=3,
    )
    return mp_prefetch(ds, options)


class _MultiprocessIterator(WorkerPool):
    """The pool of ``ds``'s workers; a checkpoint restores into another worker count if it can."""

    _stage = "mp_prefetch"
    _state_fields = fields(workers=by_stage, turn=count(), exhausted=by_stage, stream=by_stage)

    def __init__(self, ds: MultiprocessPrefetchIterDataset, stream: Stream | None = None) -> None:
        self._ds = ds
        base_seed = ds._next_base_seed()
        # The options set before this stage and, when a WithOptionsIterDataset is building
        # this iterator, after it: the workers run under them, the stages after see them.
        self._context = join(self, options_set_in(ds._parent))
        spec = PoolSpec(
            share=self._worker_dataset,
            executor=ds._executor,
            buffer_size=ds._options.per_worker_buffer_size,
            base_seed=base_seed,
            worker_init_fn=ds._init_fn,
            restart=ds._options.restart_workers,
            stack_batches=leaves_stacked_by,
            sizer=ds._sizer,
            head_start=functools.partial(start_downloads, ds),
        )
        super().__init__(spec, ds._worker_count(), stream)

    def _worker_dataset(self, worker: int, count: int, stream: Stream | None) -> IterDataset[Any]:
        """Worker ``worker``'s share, under the options the workers run with."""
        options: DatasetOptions = without_budget(self._context.options)
        return carrying(self._ds._share(worker, count, stream), options)

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        stream = self._stream
        state["stream"] = (
            None if stream is None else {"pending": list(stream.pending), "tail": stream.tail}
        )
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "workers", "turn", "exhausted", "stream")
        stream = self._saved_stream(state["stream"])
        saved_count, count = len(state["workers"]), len(self._parents)
        if saved_count == count or self._ds._auto:  # "auto" takes the saved count
            self.restore(stream, state["workers"], state["turn"], state["exhausted"])
        else:
            positions = positions_of(state["workers"])
            if positions is None:  # _check_part refused such a state already
                raise CheckpointError("a worker stopped inside a batch")
            old = stream or Stream((), 0, self._ds._source_length())
            self.redeal(old, saved_count, positions, count)

    def _saved_stream(self, saved: Any) -> Stream | None:
        if saved is None:
            return None
        return Stream(tuple(saved["pending"]), int(saved["tail"]), self._ds._source_length())

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        """The workers' states against their pipelines, built here as the workers run them."""
        workers, exhausted = state["workers"], state["exhausted"]
        if not isinstance(workers, list) or not workers:
            raise refuse(self, "workers", f"{where}['workers']", "a list of worker states", workers)
        saved_count = len(workers)
        turn = f"turn {state['turn']} of the {saved_count} in state['workers']"
        require(self, state["turn"] < saved_count, where, turn)
        if not (
            isinstance(exhausted, list)
            and len(exhausted) == saved_count
            and all(isinstance(x, bool) for x in exhausted)
        ):
            expected = f"a list of {saved_count} bools, one per worker of state['workers']"
            raise refuse(self, "exhausted", f"{where}['exhausted']", expected, exhausted)
        self._check_stream(state["stream"], f"{where}['stream']")
        stream = self._saved_stream(state["stream"])
        for w, part in enumerate(workers):
            try:
                share = self._ds._share(w, saved_count, stream)
            except (TypeError, ValueError) as exc:
                raise CheckpointError(
                    f"mp_prefetch.set_state(): this pipeline cannot be shared among the "
                    f"{saved_count} workers of the state ({exc}); restore it with the pipeline "
                    "that saved it."
                ) from None
            with inner_iterator(share) as pipeline:
                pipeline._validate_state(part, f"{where}['workers'][{w}]")
        if saved_count != len(self._parents) and not self._ds._auto:
            problem = self._ds._elastic_problem()
            if problem is None and positions_of(workers) is None:
                problem = "a worker stopped inside a batch"
            if problem is not None:
                raise CheckpointError(
                    f"this checkpoint was saved with {saved_count} worker(s) and cannot be "
                    f"restored into {len(self._parents)}: {problem}. Restore it with the saved "
                    "count; a pipeline built with chute.experimental.virtual_shards moves to "
                    "any worker and host count."
                )

    def _check_stream(self, saved: Any, where: str) -> None:
        """None, or the positions a restore into another worker count left to read."""
        if saved is None:
            return
        end = min(self._ds._source_length(), MAX_POSITION)
        if not Stream.saved_well(saved, end):
            expected = f"None or {{'pending': [positions below {end}], 'tail': a position}}"
            raise refuse(self, "stream", where, expected, saved)
