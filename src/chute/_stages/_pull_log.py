"""``PullLog``: what a stage pulled from its parent since a known position.

Stages that hold elements across ``next()`` calls (``batch``, the window
shuffle) pull through a log.  It records the parent's state before the first
pull, how many pulls were made and which of them raised, so a checkpoint is
those positions rather than the elements, and a restore replays the same
pulls (``chute._core.replay``: the errors already reported are passed over,
any other raises) to rebuild exactly the same buffer.  A pull that raises
keeps everything pulled before it.
"""

from __future__ import annotations

from typing import Any

from chute._core.iterator import DatasetIterator
from chute._core.replay import failed_pulls, replay_pulls
from chute._stages.capabilities import ReadsMany


class PullLog:
    """The elements pulled from ``parent`` since the last ``clear()``."""

    def __init__(self, parent: DatasetIterator[Any], stage: str) -> None:
        self._parent, self._stage = parent, stage
        # Asked once: an isinstance check against a Protocol costs microseconds, a batch's worth.
        self._many = parent._next_many if isinstance(parent, ReadsMany) else None
        self.clear()

    def clear(self) -> None:
        self.items: list[Any] = []
        self.pulls = 0
        self._failed: list[int] = []
        self._start: dict[str, Any] | None = None

    def fill(self, size: int) -> bool:
        """Pulls until ``size`` items are held; False if the parent ended first.

        A user error from the parent propagates; the items stay, and the next
        call carries on after the failed pull.
        """
        parent, items, many = self._parent, self.items, self._many
        while len(items) < size:
            if not self.pulls:
                self._start = parent.get_state()
            try:
                taken = many(size - len(items)) if many is not None else [next(parent)]
            except StopIteration:
                return False
            except Exception:
                self._failed.append(self.pulls)
                self.pulls += 1
                raise
            items.extend(taken)
            self.pulls += len(taken)
        return True

    def state(self) -> dict[str, Any]:
        """Positions that rebuild the log: parent state, pulls, failed pulls."""
        if not self.pulls:
            return {"parent": self._parent.get_state(), "pulls": 0, "failed": []}
        return {"parent": self._start, "pulls": self.pulls, "failed": list(self._failed)}

    def restore(self, state: dict[str, Any]) -> None:
        """Rebuilds the log from ``state()`` by replaying the same pulls."""
        self.clear()
        parent, pulls = self._parent, int(state["pulls"])
        failed = failed_pulls(state, self._stage)
        parent.set_state(state["parent"])
        self.items = list(replay_pulls(lambda: next(parent), pulls, failed, self._stage))
        self.pulls, self._failed, self._start = pulls, sorted(failed or ()), state["parent"]
