"""``IterDataset``: a lazy dataset that can only be iterated, and its fluent methods.

Re-exported by ``chute._core.dataset``, which imports it (this module imports
only ``node``, never ``dataset``: ``MapDataset`` is named for type checkers
alone).  The fluent methods delegate, in one line, to the stage classes that
``chute._stages`` registers (``chute._core.registry``); each is annotated with
the stage class it builds.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from chute._core.iterator import DatasetIterator, _CheckedInit
from chute._core.node import Node
from chute._core.registry import stages as _s

if TYPE_CHECKING:
    from chute._core.options import MultiprocessingOptions, RayExecutor
    from chute._core.transforms import Filter, FlatMap, Map, MapWithIndex, RandomMap
    from chute._stages.registered import (
        BatchIterDataset,
        FilterIterDataset,
        FlatMapIterDataset,
        MapIterDataset,
        MapWithIndexIterDataset,
        MixedIterDataset,
        RandomMapIterDataset,
    )

T = TypeVar("T")
S = TypeVar("S")


class IterDataset(Node, Generic[T], metaclass=_CheckedInit):
    """A lazy, immutable dataset that can only be iterated.

    Get one from ``MapDataset.to_iter_dataset()`` or an iterable source
    (``experimental.ParquetIterDataset``), then chain fluent methods.  Each
    ``iter()`` gives a fresh, checkpointable ``DatasetIterator``.  To write
    your own stage, subclass it and implement ``__iter__``.

    Args:
        parents: For subclasses: the dataset or datasets this one reads from.

    >>> from chute import MapDataset
    >>> ds = MapDataset.range(5).to_iter_dataset().map(lambda x: x + 1).batch(2)
    >>> [b.tolist() for b in ds]
    [[1, 2], [3, 4], [5]]
    """

    def __init__(self, parents: Any = ()) -> None:
        super().__init__(parents)

    @abc.abstractmethod
    def __iter__(self) -> DatasetIterator[T]:
        """A fresh iterator at the start of the dataset (each call gives a new one)."""

    @staticmethod
    def mix(
        datasets: Sequence[IterDataset[Any]] | Mapping[str, IterDataset[Any]],
        weights: Any = None,
        *,
        on_exhausted: str = "stop",
    ) -> MixedIterDataset:
        """Interleaves datasets in proportion to ``weights``.

        The mix ends with its first exhausted dataset, as in Grain, unless
        ``on_exhausted="continue"``: the others then share its turns.

        Args:
            datasets: A sequence of datasets, or a mapping of names to datasets.
            weights: One positive, finite weight per dataset (a mapping pairs
                weights with datasets by name); equal when None.  chute's
                addition: a ``chute.experimental.WeightSchedule``, or a function
                of the step, for weights that change during the run.
            on_exhausted: chute's addition: ``"stop"`` (Grain's) or ``"continue"``.

        Returns:
            An IterDataset whose checkpoint holds every input's position.

        Raises:
            ValueError: The weights do not match the datasets or are not positive.

        >>> from chute import MapDataset
        >>> a, b = MapDataset.range(3).to_iter_dataset(), MapDataset.range(10, 16).to_iter_dataset()
        >>> list(IterDataset.mix({"a": a, "b": b}, weights={"a": 1, "b": 2}))
        [0, 10, 11, 1, 12, 13, 2, 14, 15]
        """
        return _s.MixedIterDataset(datasets, weights, on_exhausted=on_exhausted)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], Any] | None = None,
    ) -> BatchIterDataset:
        """Groups consecutive elements into batches.

        Each leaf of the elements' structure is stacked into a numpy array with
        a new leading axis.  Elements already pulled into a batch stay in it
        when a later element raises.

        Args:
            batch_size: Elements per batch (positive).
            drop_remainder: Drop the last batch when it is short.
            batch_fn: Builds a batch from a list of elements instead of stacking.

        Returns:
            An IterDataset of batches.

        >>> from chute import MapDataset
        >>> ds = MapDataset.range(5).to_iter_dataset().batch(2, drop_remainder=True)
        >>> [b.tolist() for b in ds]
        [[0, 1], [2, 3]]
        """
        return _s.BatchIterDataset(
            self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn
        )

    def filter(self, transform: Filter | Callable[[T], bool]) -> FilterIterDataset[T]:
        """Keeps the elements where ``transform`` is true.

        Args:
            transform: A predicate, or a ``chute.transforms.Filter``.

        Returns:
            An IterDataset of the kept elements.

        >>> from chute import MapDataset
        >>> list(MapDataset.range(6).to_iter_dataset().filter(lambda x: x > 3))
        [4, 5]
        """
        return _s.FilterIterDataset(self, transform)

    def map(self, transform: Map | Callable[[T], S]) -> MapIterDataset[S]:
        """Applies ``transform`` to every element.

        An exception from ``transform`` reaches you unchanged, with a note that
        names the stage and the element index; the next ``next()`` goes on.

        Args:
            transform: A function of one element, or a ``chute.transforms.Map``.

        Returns:
            An IterDataset of the results.

        >>> from chute import MapDataset
        >>> list(MapDataset.range(3).to_iter_dataset().map(str))
        ['0', '1', '2']
        """
        return _s.MapIterDataset(self, transform)

    def map_with_index(
        self, transform: MapWithIndex | Callable[[int, T], S]
    ) -> MapWithIndexIterDataset[S]:
        """Applies ``transform(index, element)``; index counts this stage's input.

        Args:
            transform: A function of the index and the element, or a
                ``chute.transforms.MapWithIndex``.

        Returns:
            An IterDataset of the results.

        >>> from chute import MapDataset
        >>> ds = MapDataset.range(10).to_iter_dataset().filter(lambda x: x > 7)
        >>> list(ds.map_with_index(lambda i, x: (i, x)))
        [(0, 8), (1, 9)]
        """
        return _s.MapWithIndexIterDataset(self, transform)

    def random_map(
        self, transform: RandomMap | Callable[[T, Any], S], *, seed: int | None = None
    ) -> RandomMapIterDataset[S]:
        """Applies ``transform(element, rng)`` with a per-element reproducible RNG.

        The ``n``-th element this stage sees gets ``Generator(Philox(seed))``
        with its counter at ``[0, 0, 0, n]``; a restored iterator continues
        with the same random numbers.

        Args:
            transform: A function of an element and a ``numpy.random.Generator``,
                or a ``chute.transforms.RandomMap``.
            seed: An int >= 0 of any size, as in Grain; when None, derived from the
                ``.seed()`` marks above.

        Returns:
            An IterDataset of the results.

        Raises:
            ValueError: No ``seed`` and no ``.seed()`` mark above.

        >>> from chute import MapDataset
        >>> ds = MapDataset.range(3).to_iter_dataset()
        >>> list(ds.random_map(lambda x, rng: x + int(rng.integers(0, 100)), seed=7))
        [26, 70, 3]
        """
        return _s.RandomMapIterDataset(self, transform, seed=seed)

    def mp_prefetch(
        self,
        options: MultiprocessingOptions | None = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
        *,
        executor: RayExecutor | None = None,
    ) -> IterDataset[T]:
        """Runs this pipeline in worker processes, in Grain's order.

        Worker ``i`` of ``W`` runs the whole pipeline before this call over the
        MapDataset indices ``i, i + W, ...`` (filters and batches included), and
        the parent reads the workers in turn, so the output never depends on
        timing.  Checkpoints restore into another number of workers.  With
        ``num_workers=0`` this returns the dataset itself.

        Args:
            options: How many workers and how far ahead each may run
                (``chute.MultiprocessingOptions``); no workers when None.
            worker_init_fn: Called as ``worker_init_fn(worker_index,
                worker_count)`` in each worker before it reads anything, e.g.
                to set up logging or a per-worker resource.
            sequential_slice: Give each worker one contiguous block of the
                source instead of every ``W``-th index (a shuffle above still
                applies within it): better locality for files read in order.
            executor: chute's addition: where the workers run. None: local
                processes; a ``chute.RayExecutor``: actors on a Ray cluster, with
                the same elements, order and checkpoints as local workers.

        Returns:
            An IterDataset whose elements come from the workers.

        Raises:
            TypeError: ``options`` is not a ``MultiprocessingOptions``,
                ``worker_init_fn`` is not callable or ``executor`` is not a
                ``RayExecutor``.

        >>> from chute import MapDataset, MultiprocessingOptions
        >>> ds = MapDataset.range(6).to_iter_dataset().batch(2)
        >>> [b.tolist() for b in ds.mp_prefetch(MultiprocessingOptions(num_workers=2))]
        [[0, 2], [1, 3], [4], [5]]
        """
        return _s.mp_prefetch(self, options, worker_init_fn, sequential_slice, executor=executor)

    def prefetch(self, options: MultiprocessingOptions) -> IterDataset[T]:
        """Deprecated name of ``mp_prefetch``: warns, then runs it.

        Args:
            options: As for ``mp_prefetch``.

        Returns:
            ``self.mp_prefetch(options)``.
        """
        return _s.prefetch(self, options)

    def _flat_map(self, transform: FlatMap) -> FlatMapIterDataset:
        """``apply``'s stage for a ``FlatMap`` (Grain has no ``flat_map`` method)."""
        return _s.FlatMapIterDataset(self, transform)
