"""Reading several iterators in turn, as Grain reads its workers.

Iterator ``k`` yields the ``k``-th element of every round; iterators that
run out are skipped, and the whole ends when all have.  A failing ``next()``
keeps the turn, so the next call asks the same iterator again for its next
element (as Grain does): nothing is skipped or lost, the turns shift by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chute._core.errors import CheckpointError, IteratorClosedError, WorkerDiedError
from chute._core.iterator import DatasetIterator
from chute._core.state_check import count, fields, flags, parent_states
from chute._execution.buffer_sizing import BufferSizer


class RoundRobinIterator(DatasetIterator[Any]):
    """Round-robin over ``iterators``; its state nests theirs."""

    _stage = "round_robin"
    _state_fields = fields(
        workers=parent_states,
        turn=count(lambda it: max(len(it._parents) - 1, 0), why="its iterators, less one"),
        exhausted=flags,
    )
    # After an element's error the next call reads the next iterator, so the other
    # elements keep the order of a run without the error; multithread_prefetch keeps
    # the turn instead, as Grain's does (its order with errors matches Grain's).
    _keep_turn_on_error = False
    # Grows the buffers of iterators that are often not ready on their turn (a worker
    # pool's: see chute._execution.pool); None leaves them as they are.
    _sizer: BufferSizer | None = None

    def __init__(self, iterators: Sequence[DatasetIterator[Any]]) -> None:
        super().__init__(list(iterators))
        self._turn = 0
        self._exhausted = [False] * len(self._parents)

    def __next__(self) -> Any:
        count, sizer = len(self._parents), self._sizer
        for _ in range(count):
            w = self._turn
            if not self._exhausted[w]:
                ready = sizer is None or self._ready(w)
                try:
                    element = next(self._parents[w])
                except StopIteration:
                    self._exhausted[w] = True
                except (WorkerDiedError, IteratorClosedError):
                    raise  # a dead or closed iterator: its turn stays, so a restore goes on there
                except Exception:
                    if not self._keep_turn_on_error:  # the failing element took this turn
                        self._turn = (w + 1) % count
                    raise
                else:
                    self._turn = (w + 1) % count
                    if sizer is not None and sizer.turn(w, ready):
                        sizer.decide(w, element, self._parents)
                    return element
            self._turn = (w + 1) % count
        raise StopIteration

    def _ready(self, w: int) -> bool:
        """Whether iterator ``w``'s next element is made (asked only with a ``_sizer``)."""
        return True

    def get_state(self) -> dict[str, Any]:
        return self._state(
            workers=[it.get_state() for it in self._parents],
            turn=self._turn,
            exhausted=list(self._exhausted),
        )

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "workers", "turn", "exhausted")
        if len(state["workers"]) != len(self._parents):
            raise CheckpointError(
                f"this checkpoint holds {len(state['workers'])} worker states but there are "
                f"{len(self._parents)} workers now."
            )
        for it, worker_state in zip(self._parents, state["workers"]):
            it.set_state(worker_state)
        self._turn = int(state["turn"])
        self._exhausted = [bool(x) for x in state["exhausted"]]
