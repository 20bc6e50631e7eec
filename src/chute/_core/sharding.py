"""Sharding options and the split of ``num_records`` into contiguous shards.

``even_split`` gives shard ``i`` of ``k`` the records ``[start, stop)``.  The
first ``n % k`` shards get one record more than the others, so the shards
together hold every record exactly once; with ``drop_remainder=True`` every
shard gets ``n // k`` records and the last ``n % k`` records go to no shard.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from chute._core.in_place_slice import shard_block
from chute._core.validate import check_int, check_positive_int, grain_first

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions", "even_split"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """Which shard of the data this process reads.

    Args:
        shard_index: This process's shard, in ``[0, shard_count)``.
        shard_count: How many shards split the data.
        drop_remainder: Give every shard the same number of records, dropping the rest.

    Attributes:
        shard_index: This process's shard, in ``[0, shard_count)``.
        shard_count: The number of shards, at least 1.
        drop_remainder: If True every shard gets ``n // shard_count``
            records and the remainder is dropped; if False the first
            ``n % shard_count`` shards get one record more.

    >>> ShardOptions(shard_index=1, shard_count=4)
    ShardOptions(shard_index=1, shard_count=4, drop_remainder=False)
    """

    shard_index: int
    shard_count: int
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        name = type(self).__name__
        count = check_positive_int(
            self.shard_count,
            f"{name}: shard_count",
            grains=f"Number of shards must be a positive integer but got {self.shard_count}.",
        )
        index = check_int(self.shard_index, f"{name}: shard_index")
        if not 0 <= index < count:
            grains = (
                "Shard shard_index must be in [0, shard_count - 1], shard_count was "
                f"{count} and shard_index was {index}."
            )
            raise ValueError(
                grain_first(
                    grains,
                    f"{name}: shard_index must be in [0, shard_count) = [0, {count}) "
                    f"(got shard_index={index}); shards are numbered from 0.",
                )
            )
        if not isinstance(self.drop_remainder, (bool, np.bool_)):
            raise TypeError(
                f"{name}: drop_remainder must be a bool (got {self.drop_remainder!r} "
                f"that is a {type(self.drop_remainder).__name__})."
            )
        object.__setattr__(self, "shard_index", index)
        object.__setattr__(self, "shard_count", count)
        object.__setattr__(self, "drop_remainder", bool(self.drop_remainder))


class NoSharding(ShardOptions):
    """The whole data set in one shard: ``ShardOptions(0, 1)``.

    >>> NoSharding()
    NoSharding(shard_index=0, shard_count=1, drop_remainder=False)
    """

    def __init__(self) -> None:
        super().__init__(shard_index=0, shard_count=1, drop_remainder=False)


def _jax_process_index_and_count() -> tuple[int, int]:
    try:
        import jax
    except ImportError:
        _log.info("JAX is not installed (pip install chute[jax]); using one shard.")
        return 0, 1
    return int(jax.process_index()), int(jax.process_count())


class ShardByJaxProcess(ShardOptions):
    """One shard per JAX process: ``jax.process_index()`` of ``jax.process_count()``.

    Without JAX installed this is shard 0 of 1.

    Args:
        drop_remainder: Give every shard the same number of records, dropping the rest.

    >>> ShardByJaxProcess(drop_remainder=True)  # in a single process
    ShardByJaxProcess(shard_index=0, shard_count=1, drop_remainder=True)
    """

    def __init__(self, drop_remainder: bool = False) -> None:
        index, count = _jax_process_index_and_count()
        super().__init__(shard_index=index, shard_count=count, drop_remainder=drop_remainder)


def even_split(num_records: int, options: ShardOptions) -> tuple[int, int]:
    """Returns ``(start, stop)``: the records ``[start, stop)`` of this shard.

    Shards are contiguous and in order.  Without ``drop_remainder`` the first
    ``num_records % shard_count`` shards hold one record more than the rest,
    so no record is lost or repeated; with it, every shard holds
    ``num_records // shard_count`` records.

    >>> [even_split(10, ShardOptions(i, 4)) for i in range(4)]
    [(0, 3), (3, 6), (6, 8), (8, 10)]
    >>> [even_split(10, ShardOptions(i, 4, drop_remainder=True)) for i in range(4)]
    [(0, 2), (2, 4), (4, 6), (6, 8)]
    """
    n = check_int(num_records, "even_split: num_records", minimum=0)
    if not isinstance(options, ShardOptions):
        raise TypeError(
            f"even_split: options must be a ShardOptions (got {options!r} that is a "
            f"{type(options).__name__}); e.g. ShardOptions(shard_index=0, shard_count=2)."
        )
    index, count = options.shard_index, options.shard_count
    if options.drop_remainder:
        base = n // count
        return index * base, (index + 1) * base
    block = shard_block(index, count, n)
    return block.start, block.stop
