"""Execution options: ``ReadOptions`` (threads reading a MapDataset)."""

from __future__ import annotations

import dataclasses

from chute._core.validate import check_int


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How ``to_iter_dataset`` reads its MapDataset.

    Attributes:
      num_threads: threads reading chunks of elements ahead of the consumer
        (0 reads inline, on the calling thread).
      prefetch_buffer_size: how many elements may be read ahead in total.
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __post_init__(self) -> None:
        check_int(self.num_threads, "ReadOptions: num_threads", minimum=0)
        check_int(self.prefetch_buffer_size, "ReadOptions: prefetch_buffer_size", minimum=0)
