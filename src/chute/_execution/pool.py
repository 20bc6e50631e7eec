"""``WorkerPool``: the workers of ``mp_prefetch`` and of the ``DataLoader``, read in turn.

Worker ``w`` of ``W`` iterates the dataset its client builds for it
(``PoolSpec.share(w, W, stream)``: the only thing a client decides), in a
local process or a Ray actor (``Worker``; ``launch.worker``), or in this
process when the client asks for it (the ``DataLoader`` with no workers).
The pool reads them round-robin, skipping those that ran out: Grain's order.

What the pool does for every client:

* **restores**: with as many workers as saved, the live workers move in place
  when the layout is the same (``restore``), or new ones start at the saved
  states; from another worker count, the positions the saved workers had not
  all read are re-dealt to fresh workers (``redeal``, ``streams.relayout``),
  so nothing is lost or repeated;
* **buffer sizing**: with a ``sizer``, a worker often found not ready on its
  turn gets a larger buffer (``buffer_sizing``); the order stays the same;
* **download head start**: before local worker processes start, ``head_start``
  lets the pipeline's sources begin their downloads in this process;
* **statistics**: ``buffer_fill()`` (the ``prefetch_buffer_depth`` gauge, the
  statistics' buffer figures) and ``workers``.

The pool's own state is ``RoundRobinIterator``'s (the workers' states, the
turn, the workers that ran out); its client keeps the stream beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from chute._core import metrics
from chute._core.iterator import DatasetIterator
from chute._core.nesting import inner_iterators
from chute._core.options import RayExecutor
from chute._execution import launch, worker_seeds
from chute._execution.buffer_sizing import BufferSizer
from chute._execution.round_robin import RoundRobinIterator
from chute._execution.streams import Stream, relayout
from chute._execution.worker import Worker

__all__ = ["PoolSpec", "WorkerPool", "move_workers"]


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """What a pool's workers run and how.

    Attributes:
      share: ``share(worker, count, stream)``, the dataset worker ``worker`` of
        ``count`` iterates (``stream``: the positions left after a re-deal, or None).
      executor: where the workers run: None, local processes; a Ray executor.
      buffer_size: elements each worker may make ahead.
      base_seed: the seed the workers' seeds derive from (``worker_seeds``).
      worker_init_fn: runs in each worker before its pipeline.
      restart: whether a worker that dies starts again from its last element.
      stack_batches: lets local workers stack batches into shared memory.
      inline: when given, the workers run in this process: ``inline(dataset)``
        opens each one's iterator.
      sizer: ``sizer(count)``, what grows ``count`` workers' buffers, or None.
      head_start: runs once before local worker processes first start.
    """

    share: Callable[[int, int, Stream | None], Any]
    executor: RayExecutor | None = None
    buffer_size: int = 1
    base_seed: int = 0
    worker_init_fn: Callable[[int, int], None] | None = None
    restart: bool = False
    stack_batches: Callable[[Any, Callable[[list[Any]], Any]], Any] | None = None
    inline: Callable[[Any], DatasetIterator[Any]] | None = None
    sizer: Callable[[int], BufferSizer | None] | None = None
    head_start: Callable[[], None] | None = None


class WorkerPool(RoundRobinIterator):
    """``count`` workers of ``spec`` over ``stream`` (None: each worker's share as built)."""

    _stage = "worker_pool"

    def __init__(self, spec: PoolSpec, count: int, stream: Stream | None = None) -> None:
        self._spec, self._stream = spec, stream
        local = spec.executor is None and spec.inline is None
        if count and local and spec.head_start is not None:
            spec.head_start()
        super().__init__(self._started(stream, [None] * count))
        self._sizer = self._sizer_for(self._parents)
        metrics.add_buffer(self)

    @property
    def workers(self) -> tuple[DatasetIterator[Any], ...]:
        """The workers as they run now (new ones after a restore that replaced them)."""
        return self._parents

    @property
    def stream(self) -> Stream | None:
        """The positions the workers share, or None: each worker's share as the client built it."""
        return self._stream

    def _started(self, stream: Stream | None, states: Sequence[Any]) -> list[DatasetIterator[Any]]:
        """One worker per state in ``states`` (None: from the start of its share)."""
        spec, count = self._spec, len(states)
        if spec.inline is not None:
            with inner_iterators():  # the client's state describes them; theirs need no fingerprint
                iterators = [spec.inline(spec.share(w, count, stream)) for w in range(count)]
            for it, state in zip(iterators, states):
                if state is not None:
                    it.set_state(state)
            return iterators
        return [
            launch.worker(
                spec.executor,
                spec.share(w, count, stream),
                index=w,
                count=count,
                buffer_size=spec.buffer_size,
                worker_init_fn=spec.worker_init_fn,
                state=state,
                seed=worker_seeds.worker_seed(spec.base_seed, w),
                restart=spec.restart,
                stack_batches=spec.stack_batches,
            )
            for w, state in enumerate(states)
        ]

    def _sizer_for(self, workers: Sequence[DatasetIterator[Any]]) -> BufferSizer | None:
        if self._spec.sizer is None or not all(isinstance(w, Worker) for w in workers):
            return None
        return self._spec.sizer(len(workers))

    def _ready(self, w: int) -> bool:
        worker = self._parents[w]
        return not isinstance(worker, Worker) or worker.ready()

    # -- restores ----------------------------------------------------------------------

    def restore(
        self,
        stream: Stream | None,
        states: Sequence[Any],
        turn: int,
        exhausted: Sequence[Any],
        *,
        in_place: bool = True,
    ) -> None:
        """Goes to a position saved by ``len(states)`` workers over ``stream``.

        The live workers move there when the layout is the same and ``in_place``;
        otherwise they stop and new ones start at the saved states.
        """
        if in_place and stream == self._stream and len(states) == len(self._parents):
            move_workers(self._parents, states)
        else:
            self._replace(stream, states)
        self._turn, self._exhausted = int(turn), [bool(x) for x in exhausted]

    def redeal(
        self, stream: Stream, saved_count: int, positions: Sequence[int], count: int
    ) -> None:
        """Goes to a position saved by ``saved_count`` workers over ``stream``, which had
        read ``positions[w]`` elements each: ``count`` new workers share what is left."""
        self._replace(relayout(stream, saved_count, positions), [None] * count)
        self._turn, self._exhausted = 0, [False] * count

    def _replace(self, stream: Stream | None, states: Sequence[Any]) -> None:
        self._stop(self._parents)
        self._stream = stream
        self._parents = tuple(self._started(stream, states))
        self._sizer = self._sizer_for(self._parents)

    # -- statistics and lifecycle --------------------------------------------------------

    def buffer_fill(self) -> tuple[int, int]:
        """Workers with an element ready, and the workers (read by the statistics only)."""
        workers = self._parents
        return sum(isinstance(w, Worker) and w.ready() for w in workers), len(workers)

    _buffer_fill = buffer_fill  # the name the statistics and the gauge read

    def close(self) -> None:
        """Closes every worker; worker processes are all told to stop first, then awaited."""
        _begin_stop(self._parents)
        super().close()

    @staticmethod
    def _stop(workers: Sequence[DatasetIterator[Any]]) -> None:
        _begin_stop(workers)
        for worker in workers:
            worker.close()


def move_workers(workers: Sequence[DatasetIterator[Any]], states: Sequence[Any]) -> None:
    """Sets each worker's state; those that start anew at it (``Worker.may_start_anew``: a
    restore right after ``iter()``) all start before any is waited for."""
    anew = [isinstance(w, Worker) and w.may_start_anew() for w in workers]
    for worker, state, a in zip(workers, states, anew):
        if a:
            worker.start_anew(state)  # type: ignore[attr-defined]
    for worker, state, a in zip(workers, states, anew):
        if a:
            worker.confirm_start()  # type: ignore[attr-defined]
        else:
            worker.set_state(state)


def _begin_stop(workers: Sequence[DatasetIterator[Any]]) -> None:
    """Tells every worker that runs elsewhere to stop: they then stop in parallel."""
    for worker in workers:
        if isinstance(worker, Worker):
            worker.begin_stop()
