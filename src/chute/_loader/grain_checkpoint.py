"""``to_grain_state`` and ``from_grain_state``: chute's public converters.

``iterator.set_state()`` already recognises a state Grain saved; these make
the crossing explicit, and write Grain's state so a job can go back.
"""

from __future__ import annotations

import json
from typing import Any

from chute._core.iterator import DatasetIterator
from chute._grain.state import from_grain, to_grain
from chute._loader import data_loader
from chute._loader.capabilities import AllowsPipelineChange
from chute._loader.grain_state import loader_from_grain, loader_to_grain


def to_grain_state(iterator: Any) -> Any:
    """The iterator's position as Grain's iterator of the same pipeline saves it.

    Grain restores it into the same pipeline (and, for ``mp_prefetch`` and the
    DataLoader, the same worker count, as Grain needs).

    Args:
        iterator: An iterator of a dataset, or of a ``DataLoader``.

    Returns:
        A dict for a dataset iterator; JSON bytes for a DataLoader iterator.

    Raises:
        CheckpointError: A stage has no Grain counterpart, or the position is one
            Grain cannot hold (the message says which and what to do).

    >>> from chute import MapDataset
    >>> it = iter(MapDataset.range(10).to_iter_dataset().batch(3))
    >>> _ = next(it)
    >>> to_grain_state(it)
    {'next_index': 3}
    """
    if isinstance(iterator, data_loader.DataLoaderIterator):
        return loader_to_grain(iterator._loader, iterator.get_state())
    return to_grain(_checked(iterator), iterator.get_state())


def from_grain_state(iterator: Any, state: Any) -> Any:
    """chute's state for ``iterator`` at the position of a state Grain saved.

    ``iterator.set_state(grain_state)`` does the same in one step.  A window
    shuffle reads one window through ``iterator`` to place the position;
    restore with ``set_state`` afterwards, as usual.

    Args:
        iterator: A chute iterator of the pipeline Grain ran.
        state: What Grain's ``get_state()`` returned (JSON bytes for its DataLoader).

    Returns:
        A state ``iterator.set_state()`` accepts.

    Raises:
        CheckpointError: The state does not fit the pipeline, or cannot be crossed.

    >>> from chute import MapDataset
    >>> it = iter(MapDataset.range(10).to_iter_dataset())
    >>> from_grain_state(it, {"next_index": 4})["next_index"]
    4
    """
    if isinstance(iterator, data_loader.DataLoaderIterator):
        saved = json.loads(state)
        loader = iterator._loader
        allowed = isinstance(iterator, AllowsPipelineChange) and iterator._allow_pipeline_change
        chute = loader_from_grain(loader, saved, check=not allowed)
        chute.update(  # checked above against Grain's description of them
            version=data_loader.STATE_VERSION,
            sampler=repr(loader._sampler),
            data_source=data_loader.describe_source(loader._data_source),
            shard_options=loader._describe_shard(),
        )
        return json.dumps(chute).encode()
    return from_grain(_checked(iterator), state)


def _checked(iterator: Any) -> DatasetIterator[Any]:
    if not isinstance(iterator, DatasetIterator):
        raise TypeError(
            "chute.checkpoint: expected an iterator of a chute dataset or DataLoader "
            f"(got {iterator!r} that is a {type(iterator).__name__})."
        )
    return iterator
