"""``CacheIterDataset``: the parent read once, then replayed from memory.

The iterator keeps every element its parent yields, in order.  Moved back with
``set_state()``, as ``RepeatIterDataset`` does at the end of each epoch, it
replays the kept elements instead of reading the parent again, and once the
parent has ended the parent is never read again.  As in Grain:

* the cache belongs to the iterator, not the dataset: a new ``iter()`` starts
  with an empty cache and reads the parent again;
* elements are kept as they are, not copied: a later stage that changes an
  element in place changes the cached one, which the next epoch then yields.

The state is the position (elements yielded since the start), how many times
the parent has been read, which of those reads raised (``failed``) and
whether the parent has ended.  A restore into an iterator that has read the
parent fewer times (a fresh process) reads it on to that count, keeping what
it reads, so later epochs still come from memory.  The reads that raised
before are passed over, since the run that saved the checkpoint reported
them, and a state saved right after an error resumes after the failed
element; an error at any other read raises (``chute._core.replay``), and
leaves the iterator as it was before ``set_state()``.  A restore never moves
the parent backwards, so each iterator reads its parent once.
"""

from __future__ import annotations

from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset, MapDataset, as_iter_dataset
from chute._core.errors import CheckpointError
from chute._core.replay import failed_pulls, replay_pulls
from chute._core.state_check import (
    check_pulls,
    count,
    fields,
    flag,
    optional,
    pull_numbers,
    require,
)

_END = object()


class CacheIterDataset(IterDataset[Any]):
    """Keeps the parent's elements in memory, so later epochs do not read it again.

    Args:
      parent: the IterDataset to cache (a MapDataset is read in order through
        ``to_iter_dataset()``).  All its elements must fit in memory.

    >>> from chute import MapDataset
    >>> from chute.experimental import RepeatIterDataset
    >>> reads = []
    >>> def load(x):
    ...     reads.append(x)
    ...     return x * 10
    >>> ds = CacheIterDataset(MapDataset.range(3).to_iter_dataset().map(load))
    >>> list(RepeatIterDataset(ds, num_epochs=3))
    [0, 10, 20, 0, 10, 20, 0, 10, 20]
    >>> reads
    [0, 1, 2]
    """

    def __init__(self, parent: IterDataset[Any] | MapDataset[Any]) -> None:
        parent = as_iter_dataset(parent, "CacheIterDataset")
        super().__init__(parent)

    def __iter__(self) -> DatasetIterator[Any]:
        return _CacheIterator(iter(self._parent))


class _CacheIterator(DatasetIterator[Any]):
    _stage = "cache"
    _state_fields = fields(
        position=count(),
        pulls=count(),
        failed=optional(pull_numbers),
        complete=flag,
    )

    def __init__(self, parent: DatasetIterator[Any]) -> None:
        super().__init__(parent)
        self._cache: list[Any] = []
        self._position = 0
        self._pulls = 0  # next() calls made on the parent, the failed ones included
        self._failed: list[int] = []  # which of them raised
        self._complete = False  # the parent has ended: the cache holds everything

    def __next__(self) -> Any:
        position = self._position
        if position < len(self._cache):
            self._position = position + 1
            return self._cache[position]
        if self._closed:
            self._raise_closed()
        if self._complete or not self._pull():
            raise StopIteration
        self._position = position + 1
        return self._cache[position]

    def _pull(self) -> bool:
        """Reads one parent element into the cache; False at the parent's end."""
        try:
            value = next(self._parent)
        except StopIteration:
            self._complete = True
            return False
        except Exception:  # a user error: the parent goes on after it next time
            self._failed.append(self._pulls)
            self._pulls += 1
            raise
        self._pulls += 1
        self._cache.append(value)
        return True

    def get_state(self) -> dict[str, Any]:
        return self._state(
            position=self._position,
            pulls=self._pulls,
            failed=list(self._failed),
            complete=self._complete,
        )

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "position", "pulls", "complete")
        position, pulls, complete = state["position"], state["pulls"], state["complete"]
        for name, value in (("position", position), ("pulls", pulls)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckpointError(
                    f"cache.set_state(): {name} must be an int >= 0 (got {value!r})."
                )
        if not isinstance(complete, bool):
            raise CheckpointError(f"cache.set_state(): complete must be a bool (got {complete!r}).")
        failed = failed_pulls(state, "cache")
        if self._closed:
            self._raise_closed()
        self._catch_up(pulls, failed)
        if position > len(self._cache):
            raise CheckpointError(
                f"cache.set_state(): the state is at element {position}, but the parent gave "
                f"only {len(self._cache)} elements in {pulls} reads: the pipeline or its data "
                "differ from the ones that saved it."
            )
        self._position = position

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        check_pulls(self, state, where, kept_most=None)
        position, kept = state["position"], state["pulls"] - len(state.get("failed") or [])
        require(self, position <= kept, where, f"element {position} of {kept} read")

    def _catch_up(self, pulls: int, failed: set[int] | None) -> None:
        """Reads the parent on until it has been read ``pulls`` times.

        The reads in ``failed`` raised in the run that saved the state and are
        passed over; an error at another read raises, with the parent and the
        cache put back as they were.
        """
        start = self._pulls
        if start >= pulls or self._complete:
            return
        mark = (self._parent.get_state(), len(self._cache), list(self._failed))
        ahead = None if failed is None else {k - start for k in failed if k >= start}
        try:
            for value in replay_pulls(self._read, pulls - start, ahead, "cache"):
                if value is _END:  # the position check below says what that means
                    break
                self._cache.append(value)
        except BaseException:
            self._parent.set_state(mark[0])
            del self._cache[mark[1] :]
            self._pulls, self._failed, self._complete = start, mark[2], False
            raise
        self._failed += sorted(k for k in (failed or ()) if start <= k < self._pulls)

    def _read(self) -> Any:
        """One read of the parent for the catch-up, counted; ``_END`` at the parent's end."""
        try:
            value = next(self._parent)
        except StopIteration:
            self._complete = True
            return _END
        except Exception:
            self._pulls += 1
            raise
        self._pulls += 1
        return value

    def close(self) -> None:
        if self._closed:
            return
        self._cache = []
        super().close()
