"""``get_next_index`` / ``set_next_index``: where an iterator is, as one number (Grain's helpers).

Each iterator that can say where it is as one index implements two hooks,
``_get_next_index()`` and ``_set_next_index(index)``, with Grain's meanings:

* ``to_iter_dataset``: the index in the MapDataset of the next element;
* ``map``: its parent's index; ``map_with_index`` and ``random_map``: the
  count of elements they produced (their own index and RNG counter);
* ``batch``: the index of the next batch (its parent's, divided by the batch
  size, rounded up); setting it moves the parent to ``index * batch_size``;
* ``limit``: the count of elements it produced;
* ``interleave`` of exactly one dataset: that dataset's iterator's index.

Setting an index moves the iterator without reading any data.  Other
iterators (a filter, a shuffle window, packing) cannot do that and raise
``NotImplementedError``: use ``get_state()``/``set_state()`` there.
"""

from __future__ import annotations

from typing import Any

from chute._core.iterator import DatasetIterator


def _hook(iterator: Any, name: str) -> Any:
    hook = getattr(iterator, name, None)
    if hook is None:
        stage = iterator._stage_name() if isinstance(iterator, DatasetIterator) else type(iterator)
        raise NotImplementedError(
            f"{name.strip('_')} is not supported for a {stage} iterator: it cannot say where "
            "it is as one index without reading data; use get_state() and set_state() instead."
        )
    return hook


def get_next_index(iterator: Any) -> int:
    """The index of the next element ``iterator`` produces (see the module docstring).

    Args:
      iterator: an iterator of a pipeline of the stages listed above.

    Returns:
      The index, in the iterator's own counting (batches for a batch).

    Raises:
      NotImplementedError: the iterator cannot say where it is as one index.

    >>> from chute import MapDataset
    >>> it = iter(MapDataset.range(10).to_iter_dataset().batch(3))
    >>> _ = next(it); get_next_index(it)
    1
    """
    return int(_hook(iterator, "_get_next_index")())


def set_next_index(iterator: Any, index: int) -> None:
    """Moves ``iterator`` so that the next element it produces is element ``index``.

    Args:
      iterator: an iterator of a pipeline of the stages listed above.
      index: the index to go to, in the iterator's own counting.

    Raises:
      NotImplementedError: the iterator cannot move there without reading data.

    >>> from chute import MapDataset
    >>> it = iter(MapDataset.range(10).to_iter_dataset().batch(3))
    >>> set_next_index(it, 2); next(it).tolist()
    [6, 7, 8]
    """
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"set_next_index: index must be an int >= 0 (got {index!r}).")
    _hook(iterator, "_set_next_index")(index)
