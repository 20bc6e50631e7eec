"""Leaf MapDatasets: ``MapDataset.source(seq)`` and ``MapDataset.range(...)``."""

from __future__ import annotations

import builtins
import functools
import logging
import operator
from typing import Any

import numpy as np

from chute._core import errors
from chute._core.dataset import Indices, MapDataset
from chute._core.fingerprint import identity_of
from chute._core.in_place_slice import sequential_block
from chute._core.indexing import converted, numpy_index_type
from chute._core.pipeline_walk import pipeline_nodes
from chute._core.validate import check_int
from chute._stages import _origin
from chute._stages.capabilities import GoesByPublicName, StartsDownloads


def _pick(seq: list[Any] | tuple[Any, ...], indices: list[int]) -> list[Any]:
    """Reads many items of a list in one C-level call."""
    if len(indices) == 1:
        return [seq[indices[0]]]
    return list(operator.itemgetter(*indices)(seq))


logger = logging.getLogger("chute")


class SourceMapDataset(MapDataset[Any]):
    """Random access to a user's source (``__len__`` + ``__getitem__``)."""

    def __init__(self, source: Any) -> None:
        super().__init__()
        if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise TypeError(
                "MapDataset.source() takes an object with __len__ and __getitem__, such "
                f"as a list or a chute data source (got {type(source).__name__})."
            )
        self._source = source
        self._length = len(source)
        # A source may go by its public name (the same data read another way: from an
        # index, from a bucket), so checkpoints cross between the ways of reading it.
        public = source._public_name if isinstance(source, GoesByPublicName) else None
        self._label = f"source {public or type(source).__name__}"
        self._read_many = getattr(source, "__getitems__", None)
        if self._read_many is None and isinstance(source, (list, tuple)):
            self._read_many = functools.partial(_pick, source)

    def __len__(self) -> int:
        return self._length

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Reads only shard ``sl.start`` of ``sl.step`` from now on, in place (Grain's sharding).

        Each call slices the *original* source, so a dataset can be re-sharded.

        >>> ds = MapDataset.source(list("abcdefg"))
        >>> ds.set_slice(slice(1, None, 3), sequential_slice=True)
        >>> list(ds)
        ['d', 'e']
        """
        original = self.__dict__.setdefault("_original_source", self._source)
        block = sequential_block(sl, sequential_slice, len(original), "SourceMapDataset")
        self._source = original if block == slice(0, len(original)) else _Block(original, block)
        self._length = len(self._source)
        self._read_many = getattr(self._source, "__getitems__", None)
        if self._read_many is None and isinstance(self._source, (list, tuple)):
            self._read_many = functools.partial(_pick, self._source)

    def _getitems(self, indices: Indices) -> list[Any]:
        n = self._length
        if n == 0:
            raise IndexError("cannot read from an empty source.")
        wrapped = (np.asarray(indices, dtype=np.int64) % n).tolist()
        kind = numpy_index_type()
        if kind is not None:  # ds[np.int64(i)]: the source gets the index's type, as in Grain
            wrapped = converted(wrapped, kind, "MapDataset.source()")
        if self._read_many is not None:
            try:
                return list(self._read_many(wrapped))
            except Exception as exc:
                # A source that knows which index failed says so (mark_origin).
                failed = getattr(exc, "chute_source_index", None)
                self._annotate(exc, wrapped[0] if len(wrapped) == 1 else failed)
                raise
        source = self._source
        out: list[Any] = []
        append = out.append
        try:
            for i in wrapped:
                append(source[i])
        except Exception as exc:
            self._annotate(exc, wrapped[len(out)])
            raise
        return out

    def _annotate(self, exc: Exception, index: int | None) -> None:
        origin = None if index is None else _origin.locate(self, index)
        errors.annotate(exc, self._label, index, origin)

    def _parent_index(self, index: int) -> errors.Origin:
        return _origin.source_origin(self._source, index % self._length)

    def _data_identity(self) -> str | None:
        """What the source says of its data (and the block ``set_slice`` kept)."""
        return identity_of(self._source)

    def _describe(self) -> str:  # Grain's str(): names the source's class
        return f"source={type(self._source).__name__}"


class RangeMapDataset(MapDataset[int]):
    """``start, start + step, ...`` below ``stop``, like Python's ``range``."""

    def __init__(self, start: int, stop: int | None = None, step: int = 1) -> None:
        super().__init__()
        if stop is None:
            start, stop = 0, start
        check_int(start, "MapDataset.range: start")
        check_int(stop, "MapDataset.range: stop")
        check_int(step, "MapDataset.range: step")
        if step == 0:
            raise ValueError("MapDataset.range: step must not be zero.")
        self._range = builtins.range(start, stop, step)

    def __len__(self) -> int:
        return len(self._range)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Reads only shard ``sl.start`` of ``sl.step`` from now on, in place (Grain's sharding).

        >>> ds = MapDataset.range(10)
        >>> ds.set_slice(slice(3, None, 4), sequential_slice=True)
        >>> list(ds)
        [8, 9]
        """
        original = self.__dict__.setdefault("_original_range", self._range)
        self._range = original[
            sequential_block(sl, sequential_slice, len(original), "RangeMapDataset")
        ]

    def _getitems(self, indices: Indices) -> list[int]:
        r, n = self._range, len(self._range)
        if n == 0:
            raise IndexError("cannot read from an empty range.")
        idx = np.asarray(indices, dtype=np.int64) % n
        values = (r.start + r.step * idx).tolist()
        kind = numpy_index_type()
        return values if kind is None else converted(values, kind, "MapDataset.range()")

    def _parent_index(self, index: int) -> errors.Origin:
        return errors.Origin(index=index % len(self._range))

    def _data_identity(self) -> str | None:
        """The first value and the step, unless 0 and 1 (the length says the rest)."""
        r = self._range
        return None if (r.start, r.step) == (0, 1) else f"values {r.start}::{r.step}"

    def _describe(self) -> str:
        r = self._range
        return f"start={r.start}, stop={r.stop}, step={r.step}" + (
            f", seed={self._seed}" if self._seed is not None else ""
        )


class _Block:
    """Records ``block`` of a source, read through its batched path when it has one."""

    def __init__(self, source: Any, block: slice) -> None:
        self._source, self._start = source, block.start
        self._length = block.stop - block.start

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        return self._source[self._start + index]

    def __getitems__(self, indices: Any) -> list[Any]:
        shifted = [self._start + i for i in indices]
        read_many = getattr(self._source, "__getitems__", None)
        return list(read_many(shifted)) if read_many else [self._source[i] for i in shifted]

    def __repr__(self) -> str:
        return f"{self._source!r}[{self._start}:{self._start + self._length}]"

    def chute_identity(self) -> str:
        rows = f"records {self._start}:{self._start + self._length}"
        inner = identity_of(self._source)
        return f"{rows} of {inner}" if inner else rows


def start_downloads(dataset: Any) -> None:
    """Lets every source in ``dataset``'s pipeline that keeps a local cache of a bucket
    start its downloads in this process (``_start_downloads``), before worker processes
    on this host start: they read what lands rather than begin the downloads themselves
    once they run.  A source that cannot is read as before, and so is a pipeline that
    slices (``ds[a:b]``): its host may need only some of the shards."""
    from chute._stages.slice import SliceMapDataset

    sources = []
    for node in pipeline_nodes(dataset):
        if isinstance(node, SliceMapDataset):
            return
        if isinstance(node, SourceMapDataset) and isinstance(node._source, StartsDownloads):
            sources.append((node, node._source._start_downloads))
    for node, start in sources:
        try:
            start()
        except Exception:  # only a head start: the workers' reads download what they need
            logger.debug("chute: the downloads of %r did not start early", node, exc_info=True)
