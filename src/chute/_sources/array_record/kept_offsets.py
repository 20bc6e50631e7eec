"""``KeptOffsets``: the chunk offsets of shards in a bucket, kept under a byte budget.

A shard in a bucket fetches its chunk offsets (its footer) with one request when it is
first read.  Kept beyond its reader's closing, they let it open again without a
request; past the budget the least recently used go first.  A local index's footers are
views of the index file that cost nothing, and are not kept.
"""

from __future__ import annotations

import collections
import threading

from chute._sources.array_record.footer import Footer

__all__ = ["KeptOffsets"]


class KeptOffsets:
    """Shard ``k``'s footer, while all those kept fit in ``budget`` bytes (thread-safe).

    Args:
        budget: The bytes of chunk offsets kept, over all shards; the most recently kept
            footer stays even if it alone is larger.

    >>> import numpy as np
    >>> footer = Footer(np.zeros(64, np.int64), np.zeros(64, np.int64), "")  # 1 KiB
    >>> kept = KeptOffsets(budget=2048)
    >>> _ = kept.keep([0, 1, 2], [footer, footer, footer])  # shard 0 goes: over the budget
    >>> kept.missing([0, 1, 2]), kept.get(1) is footer
    ([0], True)
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._footers: collections.OrderedDict[int, tuple[Footer, int]] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, k: int) -> Footer | None:
        """Shard ``k``'s kept footer, now the most recently used; None where none is kept."""
        with self._lock:
            kept = self._footers.get(k)
            if kept is None:
                return None
            self._footers.move_to_end(k)
            return kept[0]

    def missing(self, ks: list[int]) -> list[int]:
        """Those of shards ``ks`` whose footer is not kept."""
        with self._lock:
            return [k for k in ks if k not in self._footers]

    def keep(self, ks: list[int], footers: list[Footer]) -> list[Footer]:
        """Keeps the footers of shards ``ks`` (lazy ones cost nothing and are not kept),
        dropping the least recently used past the budget; returns ``footers``."""
        with self._lock:
            for k, footer in zip(ks, footers):
                cost = sum(getattr(a, "nbytes", 0) for a in (footer.starts, footer.first_record))
                if not cost or k in self._footers:
                    continue
                self._footers[k] = (footer, cost)
                self._bytes += cost
            while self._bytes > self._budget and len(self._footers) > 1:
                _, (_, freed) = self._footers.popitem(last=False)
                self._bytes -= freed
        return footers
