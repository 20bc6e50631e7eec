"""``MapDataset``, ``IterDataset`` and ``DatasetIterator``: the contract.

Datasets are lazy, immutable recipes.  A ``MapDataset`` has a length and
random access; an ``IterDataset`` can only be iterated.  Iterating either
gives a ``DatasetIterator`` that holds all the mutable state, exposed as a
small JSON-serialisable dict by ``get_state()`` and restored by
``set_state()``.

Every ``MapDataset`` stage implements the batched read ``_getitems(indices)``
so that work flows through the pipeline in chunks, not one element at a time.
The fluent methods below only delegate, in one line, to the stage classes that
``chute._stages`` registers (``chute._core.registry``); each is annotated with
the stage class it builds, imported for type checkers only.  What both kinds
share lives in ``node.py``; ``IterDataset`` lives in ``iter_dataset.py``, below
this module, and is re-exported here.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

import numpy as np

from chute._core.indexing import read_at
from chute._core.iter_dataset import IterDataset
from chute._core.iterator import STATE_VERSION, DatasetIterator, _CheckedInit
from chute._core.node import Node
from chute._core.registry import stages as _s

__all__ = [
    "STATE_VERSION",
    "DatasetIterator",
    "Indices",
    "IterDataset",
    "MapDataset",
    "as_iter_dataset",
]

if TYPE_CHECKING:
    from chute._core.options import ReadOptions
    from chute._core.transforms import Filter, FlatMap, Map, MapWithIndex, RandomMap
    from chute._stages.registered import (
        BatchMapDataset,
        ConcatenateMapDataset,
        FilterMapDataset,
        FlatMapMapDataset,
        MapMapDataset,
        MapWithIndexMapDataset,
        MixedMapDataset,
        PrefetchIterDataset,
        RandomMapMapDataset,
        RangeMapDataset,
        RepeatMapDataset,
        SelectionMapDataset,
        ShuffleMapDataset,
        SliceMapDataset,
        SourceMapDataset,
    )

T = TypeVar("T")
S = TypeVar("S")

#: What ``_getitems`` takes: any ints; past ``len`` or below 0 are other epochs (``indexing``).
Indices = Sequence[int] | np.ndarray


class MapDataset(Node, Generic[T], metaclass=_CheckedInit):
    """A lazy, immutable, random-access dataset.

    Build one with ``MapDataset.source``, ``MapDataset.range`` or the mixing
    factories, then chain fluent methods; each returns a new dataset.  To write
    your own stage, subclass it and implement ``__len__`` and ``_getitems``
    (or ``__getitem__``).

    Args:
        parents: For subclasses: the dataset or datasets this one reads from.

    >>> ds = MapDataset.range(10).seed(42).shuffle().map(lambda x: x * 10)
    >>> len(ds), ds[0], list(ds)[:3]
    (10, 10, [10, 70, 60])
    """

    _checked_classes: ClassVar[set[type]] = set()

    def __init__(self, parents: MapDataset | Sequence[MapDataset] = ()) -> None:
        super().__init__(parents)
        cls = type(self)
        if cls not in MapDataset._checked_classes:
            if cls.__getitem__ is MapDataset.__getitem__ and cls._getitems is MapDataset._getitems:
                raise TypeError(f"{cls.__name__} must implement __getitem__ (or _getitems).")
            MapDataset._checked_classes.add(cls)

    # -- the random-access contract ------------------------------------------------

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of elements in one epoch (``sys.maxsize`` when infinite)."""

    @overload
    def __getitem__(self, index: int) -> T | None: ...
    @overload
    def __getitem__(self, index: slice) -> SliceMapDataset[T]: ...

    def __getitem__(self, index):
        """Element ``index`` (``None`` if filtered out), or a lazy slice.

        Every integer is an index, as in Grain: index ``i`` reads element
        ``i % len`` of epoch ``i // len``.  Indices past ``len(self)`` continue
        into later epochs (reshuffled by shuffles, reseeded for random maps),
        and negative ones into earlier epochs: ``ds[-1]`` is the last element
        of epoch ``-1``, which a shuffle orders with its seed minus one, and
        which for ``repeat()`` (``sys.maxsize`` long) is its parent's ``[-1]``.
        A numpy integer index gives ``range`` elements, and ``map_with_index``
        indices, of its own type, as in Grain.

        Args:
            index: An integer (numpy ones included) or a ``slice``.

        Returns:
            The element, or a ``MapDataset`` for a slice.

        Raises:
            TypeError: ``index`` is not an integer or a slice (e.g. ``3.0``).

        >>> ds = MapDataset.range(10).map(lambda x: x * x)
        >>> ds[3], ds[-1], ds[-11], ds[13], list(ds[2:5])
        (9, 81, 81, 9, [4, 9, 16])
        >>> shuffled = MapDataset.range(10).shuffle(seed=5)
        >>> shuffled[-1], shuffled[9], MapDataset.range(4).repeat()[-1]
        (5, 6, 3)
        """
        if isinstance(index, slice):
            return self.slice(index)
        return read_at(self._getitems, index)

    def _getitems(self, indices: Indices) -> list[Any]:
        """Reads many elements at once; stages override this with a batched path.

        ``indices`` are read as ``ds[i]`` reads them, but always give Python
        ints where ``ds[np.int64(i)]`` gives numpy integers.
        """
        return [self[int(i)] for i in indices]

    def __iter__(self) -> DatasetIterator[T]:
        """Iterates in index order, skipping filtered elements (``to_iter_dataset()``)."""
        return iter(self.to_iter_dataset())

    # -- factories -------------------------------------------------------------------

    @staticmethod
    def source(source: Any) -> SourceMapDataset:
        """A MapDataset over anything with ``__len__`` and ``__getitem__``.

        Uses the source's ``__getitems__(indices)`` for batched reads when it
        has one (``ArrayRecordDataSource``, ``ParquetDataSource``, Hugging Face
        ``datasets``, ``tfds.data_source``).

        Args:
            source: A list, a numpy array, a data source, ...

        Returns:
            A MapDataset whose element ``i`` is ``source[i]``.

        Raises:
            TypeError: ``source`` lacks ``__len__`` or ``__getitem__``.

        >>> ds = MapDataset.source(["a", "b", "c"])
        >>> len(ds), ds[1]
        (3, 'b')
        """
        return _s.SourceMapDataset(source)

    @staticmethod
    def range(start: int, stop: int | None = None, step: int = 1) -> RangeMapDataset:
        """Integers like Python's ``range``.

        Args:
            start: The first integer, or the stop when ``stop`` is not given.
            stop: One past the last integer.
            step: The difference between neighbours (not 0).

        Returns:
            A MapDataset of ints.

        >>> list(MapDataset.range(3)), list(MapDataset.range(2, 10, 3))
        ([0, 1, 2], [2, 5, 8])
        """
        return _s.RangeMapDataset(start, stop, step)

    @staticmethod
    def mix(
        datasets: Sequence[MapDataset[Any]], weights: Sequence[float] | None = None
    ) -> MixedMapDataset:
        """Interleaves datasets in proportion to ``weights`` (equal by default).

        The mix ends with its first exhausted dataset, as in Grain; put
        ``.repeat()`` on the inputs for an endless mix.

        Args:
            datasets: The datasets to mix.
            weights: One positive, finite weight per dataset; equal when None.

        Returns:
            A MapDataset that takes elements from ``datasets`` in proportion.

        Raises:
            ValueError: The weights are not one positive finite number per dataset.

        >>> list(MapDataset.mix([MapDataset.range(3), MapDataset.range(10, 13)]))
        [0, 10, 1, 11, 2, 12]
        """
        return _s.MixedMapDataset(datasets, weights)

    @staticmethod
    def concatenate(datasets: Sequence[MapDataset[Any]]) -> ConcatenateMapDataset:
        """The datasets one after another.

        Args:
            datasets: Finite datasets.

        Returns:
            A MapDataset whose length is the sum of theirs.

        >>> list(MapDataset.concatenate([MapDataset.range(2), MapDataset.range(5, 7)]))
        [0, 1, 5, 6]
        """
        return _s.ConcatenateMapDataset(datasets)

    @staticmethod
    def select_from_datasets(
        datasets: Sequence[MapDataset[Any]], selection_map: Any
    ) -> SelectionMapDataset:
        """Elements picked by ``selection_map[i] -> (dataset index, index in it)``.

        Args:
            datasets: The datasets to pick from.
            selection_map: A ``chute.transforms.DatasetSelectionMap``: its
                length and, for each index, which dataset and index to read.

        Returns:
            A MapDataset as long as ``selection_map``.  See
            ``DatasetSelectionMap`` for an example.
        """
        return _s.SelectionMapDataset(datasets, selection_map)

    # -- fluent methods ----------------------------------------------------------------

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], Any] | None = None,
    ) -> BatchMapDataset:
        """Groups consecutive elements of each epoch into batches.

        Each leaf of the elements' structure (dicts, tuples, lists, dataclasses)
        is stacked into a numpy array with a new leading axis.  A MapDataset
        batch cannot follow ``filter`` (or another stage that leaves ``None``
        gaps): it raises ``ValueError``, as Grain does; batch after
        ``to_iter_dataset()`` instead, which skips the filtered elements.

        Args:
            batch_size: Elements per batch (positive).
            drop_remainder: Drop the last batch of an epoch when it is short.
            batch_fn: Builds a batch from a list of elements instead of stacking.

        Returns:
            A MapDataset of ``ceil(len / batch_size)`` batches (``floor`` when
            ``drop_remainder``).

        Raises:
            ValueError: A ``filter`` comes before it.

        >>> ds = MapDataset.range(5).map(lambda x: {"x": x}).batch(2)
        >>> len(ds), ds[0], ds[2]
        (3, {'x': array([0, 1])}, {'x': array([4])})
        >>> MapDataset.range(5).filter(lambda x: x > 1).batch(2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: `MapDataset.batch` can not follow `MapDataset.filter` because ...
        """
        return _s.BatchMapDataset(
            self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn
        )

    def filter(self, transform: Filter | Callable[[T], bool]) -> FilterMapDataset[T]:
        """Keeps elements where ``transform`` is true; the others read as ``None``.

        The length does not change: a filtered index reads as ``None``, and
        iteration and ``to_iter_dataset`` skip it.  ``MapDataset.batch`` cannot
        follow a filter (``ValueError``, as in Grain): batch after
        ``to_iter_dataset()``.

        Args:
            transform: A predicate, or a ``chute.transforms.Filter``.

        Returns:
            A MapDataset of the same length.

        >>> ds = MapDataset.range(6).filter(lambda x: x % 3 == 0)
        >>> len(ds), ds[1], list(ds)
        (6, None, [0, 3])
        >>> list(ds.to_iter_dataset().batch(2))
        [array([0, 3])]
        """
        return _s.FilterMapDataset(self, transform)

    def map(self, transform: Map | Callable[[T], S]) -> MapMapDataset[S]:
        """Applies ``transform`` to every element.

        An exception from ``transform`` reaches you unchanged, with a note that
        names the stage (``map(your_function)``) and the element index.

        Args:
            transform: A function of one element, or a ``chute.transforms.Map``.

        Returns:
            A MapDataset of the same length.

        >>> list(MapDataset.range(3).map(lambda x: x + 10))
        [10, 11, 12]
        """
        return _s.MapMapDataset(self, transform)

    def map_with_index(
        self, transform: MapWithIndex | Callable[[int, T], S]
    ) -> MapWithIndexMapDataset[S]:
        """Applies ``transform(index, element)`` to every element.

        Args:
            transform: A function of the global index and the element, or a
                ``chute.transforms.MapWithIndex``.

        Returns:
            A MapDataset of the same length.

        >>> list(MapDataset.source("abc").map_with_index(lambda i, x: f"{i}{x}"))
        ['0a', '1b', '2c']
        """
        return _s.MapWithIndexMapDataset(self, transform)

    def random_map(
        self, transform: RandomMap | Callable[[T, Any], S], *, seed: int | None = None
    ) -> RandomMapMapDataset[S]:
        """Applies ``transform(element, rng)`` with a per-element reproducible RNG.

        Element ``i`` gets ``numpy.random.Generator(Philox(seed))`` with its
        counter at ``[0, 0, 0, i]``, as in Grain: the result depends only on
        the seed and the index, never on timing or workers.

        Args:
            transform: A function of an element and a ``numpy.random.Generator``,
                or a ``chute.transforms.RandomMap``.
            seed: An int >= 0 of any size, as in Grain; when None, derived from the
                ``.seed()`` marks above.

        Returns:
            A MapDataset of the same length.

        Raises:
            ValueError: No ``seed`` and no ``.seed()`` mark above.

        >>> ds = MapDataset.range(5).seed(41).random_map(lambda x, rng: int(rng.integers(0, 1000)))
        >>> list(ds)
        [94, 524, 770, 242, 602]
        """
        return _s.RandomMapMapDataset(self, transform, seed=seed)

    def shuffle(self, seed: int | None = None) -> ShuffleMapDataset[T]:
        """A global shuffle, different in every epoch.

        A pseudo-random permutation of the indices (Grain's index shuffle, so
        the order is Grain's for the same seed), computed on the fly: no buffer,
        any length.  Indices past ``len`` (epoch ``e``) use seed ``seed + e``.

        Args:
            seed: An integer in ``[0, 2**32)``; when None, derived from the
                ``.seed()`` marks above.

        Returns:
            A MapDataset of the same length.

        Raises:
            ValueError: No ``seed`` and no ``.seed()`` mark above.

        >>> list(MapDataset.range(10).shuffle(seed=7))
        [4, 0, 3, 7, 2, 9, 6, 8, 1, 5]
        """
        return _s.ShuffleMapDataset(self, seed=seed)

    def slice(self, sl: slice | Sequence[int]) -> SliceMapDataset[T]:
        """The elements at a slice or a sequence of indices.

        A sequence (chute's addition) picks positions of the first epoch, as
        numpy's indexing does: ``-1`` is position ``len - 1`` and a position
        outside ``[-len, len)`` is an ``IndexError``.  (``ds[i]`` instead reads
        any integer as Grain does, ``-1`` being the last element of epoch -1.)

        Args:
            sl: A ``slice``, or a sequence of positions.

        Returns:
            A MapDataset of the selected elements, in the order given.

        >>> ds = MapDataset.range(10)
        >>> list(ds.slice(slice(1, 8, 3))), list(ds.slice([4, 2]))
        ([1, 4, 7], [4, 2])
        """
        return _s.SliceMapDataset(self, sl)

    def repeat(
        self, num_epochs: int | None = None, *, reseed_each_epoch: bool = True
    ) -> RepeatMapDataset[T]:
        """Repeats the dataset (forever when ``num_epochs`` is None).

        Epoch ``e`` reads indices ``e * len`` onwards of this dataset, so
        shuffles reshuffle and random maps reseed in every epoch.

        Args:
            num_epochs: How many times; None repeats forever (``len`` is then
                ``sys.maxsize``).
            reseed_each_epoch: When False, every epoch repeats the first one's
                order and randomness.

        Returns:
            A MapDataset ``num_epochs`` times as long.

        >>> list(MapDataset.range(3).seed(1).shuffle().repeat(2))
        [1, 0, 2, 2, 1, 0]
        """
        return _s.RepeatMapDataset(self, num_epochs, reseed_each_epoch=reseed_each_epoch)

    def to_iter_dataset(
        self, read_options: ReadOptions | None = None, *, allow_nones: bool = False
    ) -> PrefetchIterDataset[T]:
        """An IterDataset reading this dataset in order, in chunks, on threads.

        Filtered (``None``) elements are skipped.  Chunk sizes and the number
        of read-ahead threads adapt to the work; the order never does.

        Args:
            read_options: Threads and read-ahead (``chute.ReadOptions``).
            allow_nones: Yield filtered elements as ``None`` instead of skipping.

        Returns:
            An IterDataset whose iterators checkpoint by index.

        >>> from chute import ReadOptions
        >>> it = iter(MapDataset.range(4).to_iter_dataset(ReadOptions(num_threads=2)))
        >>> next(it), it.get_state()["next_index"]
        (0, 1)
        """
        return _s.PrefetchIterDataset(self, read_options=read_options, allow_nones=allow_nones)

    def _flat_map(self, transform: FlatMap) -> FlatMapMapDataset:
        """``apply``'s stage for a ``FlatMap`` (Grain has no ``flat_map`` method)."""
        return _s.FlatMapMapDataset(self, transform)


def as_iter_dataset(parent: Any, stage: str) -> IterDataset[Any]:
    """``parent`` as an IterDataset (a MapDataset is read in order), for ``stage``'s errors."""
    if isinstance(parent, MapDataset):
        return parent.to_iter_dataset()
    if not isinstance(parent, IterDataset):
        raise TypeError(
            f"{stage} reads an IterDataset or a MapDataset (got {parent!r} that is a "
            f"{type(parent).__name__}); build one with "
            "chute.MapDataset.source(...).to_iter_dataset()."
        )
    return parent
