"""``ElasticIterator``: sharded, batched reading that survives a change of host count.

The global stream of element positions ``0, 1, 2, ...`` of a MapDataset is cut
into global batches of ``global_batch_size`` elements.  Host ``shard_index``
of ``shard_count`` reads the positions ``g + shard_index, g + shard_index +
shard_count, ...`` of each global batch starting at ``g``, so the hosts'
``k``-th batches together form the ``k``-th global batch.  Hosts always
consume whole global batches, so the next global position is the whole of the
state: every host saves the same state, and any host's state restores every
host, in any number of hosts, with nothing lost or repeated.  Only whole
global batches are read; a last, partial one is dropped.
"""

from __future__ import annotations

from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset, MapDataset
from chute._core.options import MultiprocessingOptions, ReadOptions
from chute._core.pipeline_context import iter_inside, join
from chute._core.sharding import ShardOptions
from chute._core.state_check import count, fields
from chute._core.validate import check_int, check_positive_int, grain_first
from chute._stages.filter import FilterMapDataset

_KEY = "global_next_index"


class ElasticIterator(IterDataset[Any]):
    """Batches of this host's share of ``ds``, restorable into another host count.

    Each host builds ``ElasticIterator(ds, global_batch_size, its_shard_options)``
    and gets batches of ``global_batch_size // shard_count`` elements.  A state
    saved by any host restores every host after the number of hosts changed,
    as long as the global stream (``ds``) is the same.  Iterating the object
    itself (``next``, ``get_state``, ``set_state``) uses one default iterator,
    as Grain's does; ``iter()`` gives a fresh one.

    Args:
        ds: An unbatched, unsharded MapDataset, without ``filter``.
        global_batch_size: Elements per global batch, a multiple of
            ``shard_options.shard_count``.
        shard_options: This host's shard.
        read_options: How each host reads its elements (threads, buffer).
        multiprocessing_options: If given, each host reads in worker processes.

    Raises:
        ValueError: If ``global_batch_size`` is not divisible by the shard count,
            or ``ds`` holds a ``filter``.

    >>> from chute import MapDataset, ShardOptions
    >>> ds = MapDataset.range(8)
    >>> [b.tolist() for b in ElasticIterator(ds, 4, ShardOptions(1, 2))]
    [[1, 3], [5, 7]]
    """

    def __init__(
        self,
        ds: MapDataset[Any],
        global_batch_size: int,
        shard_options: ShardOptions,
        *,
        read_options: ReadOptions | None = None,
        multiprocessing_options: MultiprocessingOptions | None = None,
    ) -> None:
        super().__init__(ds)
        _check_arguments(ds, shard_options, read_options, multiprocessing_options)
        size = check_positive_int(  # Grain's batch stage says it for a size < 1
            global_batch_size,
            "ElasticIterator: global_batch_size",
            grains="batch_size must be positive.",
        )
        if size % shard_options.shard_count:
            grains = (
                f"Global batch size {size} is not divisible by shard count "
                f"{shard_options.shard_count}."
            )
            raise ValueError(
                grain_first(grains, "every host must read an equal share of each global batch.")
            )
        self._ds, self._global_batch_size, self._shard = ds, size, shard_options
        self._read_options, self._mp_options = read_options, multiprocessing_options
        self._default: _ElasticIterator | None = None

    def __iter__(self) -> DatasetIterator[Any]:
        return _ElasticIterator(self)

    def _host_pipeline(self, start: int) -> IterDataset[Any]:
        """This host's batches of the whole global batches from position ``start``."""
        size, count = self._global_batch_size, self._shard.shard_count
        stop = start + size * max(0, (len(self._ds) - start) // size)
        host = self._ds.slice(slice(start + self._shard.shard_index, stop, count))
        batched: MapDataset[Any] = host.batch(size // count, drop_remainder=True)
        ds: IterDataset[Any] = batched.to_iter_dataset(self._read_options)
        if self._mp_options is not None:
            ds = ds.mp_prefetch(self._mp_options)
        return ds

    def _default_iterator(self) -> _ElasticIterator:
        if self._default is None:
            self._default = _ElasticIterator(self)
        return self._default

    def __next__(self) -> Any:
        """The default iterator's next batch (Grain's one-shot use)."""
        return next(self._default_iterator())

    def get_state(self) -> dict[str, Any]:
        """The default iterator's state."""
        return self._default_iterator().get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the default iterator to ``state`` (saved by any host).

        Args:
            state: A state from ``get_state()`` of any host.
        """
        self._default_iterator().set_state(state)

    def close(self) -> None:
        """Closes the default iterator, if there is one."""
        if self._default is not None:
            self._default.close()

    def _describe(self) -> str:
        return (
            f"{self._ds!r}, global_batch_size={self._global_batch_size}, "
            f"shard_options={self._shard}"
        )


def _check_arguments(
    ds: Any,
    shard_options: Any,
    read_options: Any,
    multiprocessing_options: Any,
) -> None:
    """Raises TypeError or ValueError for arguments ElasticIterator cannot take."""
    if not isinstance(ds, MapDataset):
        raise TypeError(
            f"ElasticIterator reads a MapDataset (got a {type(ds).__name__}); elasticity "
            "needs random access to the global stream of elements."
        )
    for value, kind, name in (
        (shard_options, ShardOptions, "shard_options"),
        (read_options, ReadOptions, "read_options"),
        (multiprocessing_options, MultiprocessingOptions, "multiprocessing_options"),
    ):
        if not isinstance(value, kind) and (value is not None or name == "shard_options"):
            raise TypeError(
                f"ElasticIterator: {name} must be a chute.{kind.__name__} "
                f"(got {value!r} that is a {type(value).__name__})."
            )
    nodes = [ds]
    while nodes:
        node = nodes.pop()
        if isinstance(node, FilterMapDataset):
            raise ValueError(
                grain_first(
                    "ElasticIterator does not support `filter` transformation.",
                    "a filtered element leaves a hole in the global batch. Filter before "
                    "batching on each host instead, or build the pipeline with "
                    "chute.experimental.virtual_shards, whose checkpoints move to any host "
                    "count with filters and packing.",
                )
            )
        nodes.extend(p for p in node.parents if isinstance(p, MapDataset))


class _ElasticIterator(DatasetIterator[Any]):
    """One host's batches; its state is the next global position only."""

    _stage = "elastic"
    _state_fields = fields(
        **{_KEY: count(lambda it: len(it._ds._ds), why="the length of the dataset")}
    )

    def __init__(self, ds: ElasticIterator) -> None:
        super().__init__()
        self._ds, self._next = ds, 0
        self._inner: DatasetIterator[Any] | None = None
        self._context = join(self)  # the host pipeline reads the options set after this

    def __next__(self) -> Any:
        if self._closed:
            self._raise_closed()
        if self._inner is None:
            self._inner = iter_inside(self._context, self._ds._host_pipeline(self._next))
            self._parents = (self._inner,)
        batch = next(self._inner)
        self._next += self._ds._global_batch_size
        return batch

    def get_state(self) -> dict[str, Any]:
        return self._state(**{_KEY: self._next})

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, _KEY)
        self._next = check_int(state[_KEY], f"{self._stage}.set_state(): {_KEY}", minimum=0)
        if self._inner is not None:
            self._inner.close()
        self._inner, self._parents = None, ()
