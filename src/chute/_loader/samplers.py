"""``IndexSampler`` and ``SequentialSampler``: the order in which records are read.

A sampler maps positions ``0, 1, 2, ...`` to ``RecordMetadata``.  Positions are
global across shards: with ``shard_count=k`` the DataLoader of shard ``s``
reads positions ``s, s + k, s + 2k, ...``.

``IndexSampler`` gives each shard the contiguous records ``even_split`` assigns
it.  Position ``i`` is the ``p = i // k``-th read of its shard, in epoch
``p // size`` where ``size`` is the shard's length; the record key is
``start + perm(p % size)``, where ``perm`` is the identity or, with
``shuffle=True``, the epoch's permutation, as in
``MapDataset.range(size).shuffle(seed=seed)``: a new permutation every epoch.

``SequentialSampler`` reads one epoch in order: the record key of position
``i`` is ``i``, so shards interleave.  With ``drop_remainder`` it stops at the
largest multiple of ``shard_count``.

With a seed, the record at position ``i`` carries
``numpy.random.Generator(numpy.random.Philox(key=seed + i))``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import numpy.typing as npt

from chute._core.seeding import check_seed
from chute._core.sharding import NoSharding, ShardOptions, even_split
from chute._core.validate import check_positive_int, grain_first
from chute._loader.record import RecordMetadata, philox_generator
from chute._stages.shuffle import shuffled_indices

__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]

# Iteration builds metadata this many positions at a time.
_CHUNK = 1024
# The default shard options (immutable, so one instance serves every sampler).
_NO_SHARDING = NoSharding()


class Sampler(Protocol):
    """What the DataLoader needs of a sampler: the metadata at each position.

    Positions the sampler does not have raise ``IndexError``.
    """

    def __getitem__(self, index: int) -> RecordMetadata: ...


class _Sampler:
    """What both samplers share: checks, bounds, metadata, iteration."""

    _num_records: int
    _shard_options: ShardOptions
    _seed: int | None
    _start: int
    _stop: int
    _epoch_length: int

    def _check_common(self, num_records: object, shard_options: object, seed: object) -> None:
        name = type(self).__name__
        self._num_records = check_positive_int(
            num_records,
            f"{name}: num_records",
            grains=(
                f"Invalid number of records in Sampler. Got {num_records} records, but number "
                "of records must be greater than 0."
            ),
        )
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(
                f"{name}: shard_options must be a ShardOptions (got {shard_options!r} that "
                f"is a {type(shard_options).__name__}); pass e.g. NoSharding()."
            )
        self._shard_options = shard_options
        self._seed = None if seed is None else _checked_seed(seed, name)
        self._start, self._stop = even_split(self._num_records, shard_options)
        drop = shard_options.shard_count if shard_options.drop_remainder else 1
        # Positions per epoch, over all shards together.
        self._epoch_length = self._num_records - self._num_records % drop
        if self._stop == self._start:
            raise ValueError(
                f"{name}: shard {shard_options.shard_index} of {shard_options.shard_count} "
                f"would get no records of num_records={self._num_records}; use at most "
                f"{self._num_records} shards."
            )

    def __len__(self) -> int:
        raise NotImplementedError

    def _key_positions(self, indices: np.ndarray) -> np.ndarray:
        """Record keys of in-bounds positions (int64 in, int64 out)."""
        raise NotImplementedError

    def _record_keys(self, indices: npt.ArrayLike) -> np.ndarray:
        """Returns the record keys (``int64``) of the sampler positions ``indices``.

        Vectorised: one numpy pass over the whole array.  Raises ``IndexError``
        if a position is outside ``[0, len(self))``.
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            raise self._out_of_range(int(idx[(idx < 0) | (idx >= len(self))][0]))
        return self._key_positions(idx)

    def _out_of_range(self, index: int) -> IndexError:
        bound = None if len(self) == sys.maxsize else len(self)  # Grain's last index, or None
        grains = (
            f"RecordMetadata object index is out of bounds; Got index {index}, allowed indices "
            f"should be in [0, {bound}]"
        )
        advice = f"{type(self).__name__}: position {index} is out of range [0, {len(self)})."
        return IndexError(grain_first(grains, advice))

    def _metadata(self, indices: npt.ArrayLike) -> list[RecordMetadata]:
        """Returns the ``RecordMetadata`` of each position in ``indices``, in order."""
        idx = np.asarray(indices, dtype=np.int64)
        keys = self._record_keys(idx).tolist()
        positions = idx.tolist()
        if self._seed is None:
            return [RecordMetadata(i, k, None) for i, k in zip(positions, keys)]
        seed = self._seed
        return [RecordMetadata(i, k, philox_generator(seed + i)) for i, k in zip(positions, keys)]

    def __getitem__(self, index: int) -> RecordMetadata:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(
                f"{type(self).__name__} indices must be ints (got {index!r} that is a "
                f"{type(index).__name__})."
            )
        if not 0 <= index < len(self):
            raise self._out_of_range(index)
        return self._metadata(np.array([index], dtype=np.int64))[0]

    def __iter__(self) -> Iterator[RecordMetadata]:
        total = len(self)
        for first in range(0, total, _CHUNK):
            yield from self._metadata(np.arange(first, min(first + _CHUNK, total)))


class IndexSampler(_Sampler):
    """Samples the records of one shard, optionally shuffled, for some epochs.

    Args:
        num_records: The number of records in the data source (>= 1).
        shard_options: Which contiguous shard of the records to read.
        shuffle: Whether to shuffle within the shard, anew every epoch.
        num_epochs: How many epochs (>= 1); ``None`` repeats forever.
        seed: An int in ``[0, 2**32)``; required when ``shuffle=True``.

    >>> sampler = IndexSampler(num_records=200, shuffle=True, seed=0)
    >>> [sampler[i].record_key for i in range(6)]
    [134, 133, 10, 136, 149, 69]
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions = _NO_SHARDING,
        shuffle: bool = False,
        num_epochs: int | None = None,
        seed: int | None = None,
    ) -> None:
        self._check_common(num_records, shard_options, seed)
        if not isinstance(shuffle, (bool, np.bool_)):
            raise TypeError(
                f"IndexSampler: shuffle must be a bool (got {shuffle!r} that is a "
                f"{type(shuffle).__name__})."
            )
        self._shuffle = bool(shuffle)
        if self._shuffle and self._seed is None:
            raise ValueError(
                "Shuffling requires specifying a seed. chute: IndexSampler: shuffle=True needs "
                "a seed; pass seed=... (an int in [0, 2**32))."
            )
        self._num_epochs = (
            None
            if num_epochs is None
            else check_positive_int(
                num_epochs,
                "IndexSampler: num_epochs",
                grains=(
                    f"Invalid number of epochs in Index Sampler.Got {num_epochs} epochs, but "
                    "number of epochs must be greater than 0."
                ),
            )
        )

    def __len__(self) -> int:
        if self._num_epochs is None:
            return sys.maxsize
        return self._num_epochs * self._epoch_length

    def _key_positions(self, indices: np.ndarray) -> np.ndarray:
        reads = indices // self._shard_options.shard_count
        size = self._stop - self._start
        if self._shuffle and self._seed is not None:  # shuffle implies a seed
            return shuffled_indices(reads, size, self._seed) % size + self._start
        return reads % size + self._start

    def __repr__(self) -> str:
        return (
            f"IndexSampler(num_records={self._num_records}, shard_options={self._shard_options!r}, "
            f"shuffle={self._shuffle}, num_epochs={self._num_epochs}, seed={self._seed})"
        )


class SequentialSampler(_Sampler):
    """Samples every record once, in order: position ``i`` reads record ``i``.

    Args:
        num_records: The number of records in the data source (>= 1).
        shard_options: With ``drop_remainder=True`` the sampler stops at the
            largest multiple of ``shard_count``.
        seed: An int in ``[0, 2**32)`` for per-record RNGs, or ``None``.

    >>> for metadata in SequentialSampler(num_records=2):
    ...     print(metadata)
    RecordMetadata(index=0, record_key=0, rng=None)
    RecordMetadata(index=1, record_key=1, rng=None)
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions = _NO_SHARDING,
        seed: int | None = None,
    ) -> None:
        self._check_common(num_records, shard_options, seed)

    def __len__(self) -> int:
        return self._epoch_length

    def _key_positions(self, indices: np.ndarray) -> np.ndarray:
        return indices.copy()

    def __repr__(self) -> str:
        return (
            f"SequentialSampler(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r}, seed={self._seed})"
        )

    def _grain_repr(self) -> str:
        """Grain's repr, which its DataLoader checkpoints record (it leaves out the seed)."""
        return (
            f"SequentialSampler(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r})"
        )


def _checked_seed(seed: object, name: str) -> int:
    """A sampler's seed, refused with Grain's words first (tests and users match them)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"Expected seed of int type. Got seed with type {type(seed)}. chute: {name}: seed "
            f"must be an int in [0, 2**32) (got {seed!r})."
        )
    if not 0 <= int(seed) < 2**32:
        raise ValueError(
            f"Seed should be positive 32-bit integer. chute: {name}: seed must be an int in "
            f"[0, 2**32) (got {seed})."
        )
    return check_seed(int(seed), f"{name}: seed")
