"""``DataLoaderIterator``: a ``DataLoader``'s pass, read from its worker pool.

The iterator builds each worker's dataset (``pipeline.worker_dataset``: the
worker's sampler positions, read and transformed) and leaves the rest to a
``WorkerPool``: the workers' turns, their buffers, and restores, into the same
worker count or another.  Its state is JSON bytes: the workers' positions,
whose turn it is, the stream of positions they share, and a description of
the sampler, the source and the loader's shard that ``set_state()`` checks.
"""

from __future__ import annotations

import functools
import json
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from chute._core.config import config
from chute._core.errors import CheckpointError, add_note, closed_error
from chute._execution import worker_seeds
from chute._execution.pool import PoolSpec, WorkerPool
from chute._loader.grain_state import is_grain_loader_state, loader_from_grain
from chute._loader.loader_state_check import check_loader_state
from chute._loader.none_records import unbox
from chute._loader.pipeline import stacked_by, worker_dataset
from chute._stages.source_dataset import start_downloads
from chute._stages.streams import Stream, positions_of
from chute._stats import instrument
from chute._stats.collector import LoaderCollector
from chute._stats.records import StageRecord

if TYPE_CHECKING:
    from chute._loader.data_loader import DataLoader

__all__ = ["STATE_VERSION", "DataLoaderIterator", "describe_source"]

STATE_VERSION = 1


def describe_source(source: Any) -> str:
    """A short, stable description of a source, for checkpoint checks."""
    kind = type(source)
    if isinstance(source, (list, tuple, range, np.ndarray)) or kind.__repr__ is object.__repr__:
        return f"{kind.__module__}.{kind.__qualname__}(len={len(source)})"
    return repr(source)


def _iterate(ds: Any, tracked: bool) -> Any:
    """``iter(ds)``; when ``tracked``, of a timed copy, with the collector of its figures."""
    if not tracked:
        return iter(ds)
    timed, collector = instrument.instrument(ds)
    it = iter(timed)
    it._chute_stats = collector
    return it


class DataLoaderIterator:
    """Iterates a DataLoader; ``get_state()``/``set_state()`` checkpoint it as JSON bytes.

    ``next()``, ``get_state()`` and ``set_state()`` take turns (a lock), so a
    checkpoint may be taken from another thread while the training loop
    iterates: the state is the position between two batches the loop received.

    Args:
        loader: The DataLoader to read; ``iter(loader)`` builds this for you.
    """

    #: Set by ``chute.checkpoint.allow_pipeline_change()``: take a state saved by a changed
    #: pipeline.
    _allow_pipeline_change: bool = False

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._closed = False
        self._lock = threading.RLock()
        loader._epochs += 1
        self._tracked = bool(config.py_debug_mode)
        spec = PoolSpec(
            share=self._worker_dataset,
            executor=loader._executor,
            buffer_size=loader._buffer_size,
            base_seed=worker_seeds.base_seed(loader._seed, loader._epochs),
            stack_batches=stacked_by,
            inline=None
            if loader._worker_count
            else functools.partial(_iterate, tracked=self._tracked),
            head_start=functools.partial(start_downloads, loader._source),
        )
        self._workers = WorkerPool(spec, max(1, loader._worker_count), self._everything())
        if self._tracked:  # statistics: the workers time their pipelines, and this times next()
            name = f"DataLoader({loader._worker_count} workers)"
            self._chute_stats = LoaderCollector(lambda: self._workers.workers, name)
            instrument.time_iterator(self, StageRecord(), any_class=True)
            self._chute_stats.watch(self)

    def _worker_dataset(self, w: int, workers: int, stream: Stream | None) -> Any:
        """Worker ``w`` of ``workers``: its positions of ``stream``, read and transformed."""
        loader = self._loader
        ds = worker_dataset(
            stream or self._everything(),
            w,
            workers,
            loader._sampler,
            loader._source,
            loader._operations,
            loader._read_options,
            loader._seed,
            loader._shard,
        )
        return instrument.marked(ds) if self._tracked and loader._worker_count else ds

    def _everything(self) -> Stream:
        """All the positions this loader reads, in order: the stream its workers start on."""
        return Stream((), 0, self._loader._length())

    def _stream(self) -> Stream:
        """The positions the workers share now (the pool of a loader always has a stream)."""
        return self._workers.stream or self._everything()

    def __iter__(self) -> DataLoaderIterator:
        return self

    def __next__(self) -> Any:
        with self._lock:
            if self._closed:
                raise closed_error("DataLoaderIterator")
            return unbox(next(self._workers))  # a record whose data is None (none_records.py)

    def _buffer_fill(self) -> tuple[int, int]:
        """Workers with an element ready, and the workers (read by the statistics only)."""
        return self._workers.buffer_fill()

    def start_prefetch(self) -> None:
        """Starts reading ahead now; worker processes are already started with the iterator."""
        if self._closed:
            raise closed_error("DataLoaderIterator")
        self._workers.start_prefetch()

    # -- checkpoints -----------------------------------------------------------------

    def get_state(self) -> bytes:
        """The loader's position: the workers' positions and whose turn it is.

        Returns:
            JSON bytes, small and independent of the buffered elements.
        """
        with self._lock:
            return self._get_state()

    def _get_state(self) -> bytes:
        workers = self._workers.get_state()
        states, stream = workers["workers"], self._stream()
        state = {
            "version": STATE_VERSION,
            "worker_count": len(states),
            "turn": workers["turn"],
            "exhausted": workers["exhausted"],
            "stream": {"pending": list(stream.pending), "tail": stream.tail},
            "positions": positions_of(states),
            "workers": states,
            "sampler": repr(self._loader._sampler),
            "data_source": describe_source(self._loader._data_source),
            "shard_options": self._loader._describe_shard(),
        }
        return json.dumps(state).encode()

    def set_state(self, state: bytes | str) -> None:
        """Resumes at a position from ``get_state()``, also with another ``worker_count``.

        The whole state is checked before a worker stops; a state that is
        refused leaves the iterator where it was.

        Args:
            state: The bytes (or str) that ``get_state()`` returned.

        Raises:
            CheckpointError: The state comes from a loader built differently, is
                damaged (the message names the key), or cannot move to this worker
                count (the message says why).
        """
        with self._lock:
            saved = self._parse(state)
            check_loader_state(self._loader, saved)
            self._check_worker_count(saved)
            try:
                before: bytes | None = self._get_state()
            except Exception:  # a worker died before its first state: no position to go back to
                before = None
            try:
                self._restore(saved)
            except CheckpointError as exc:  # found while an inline worker replayed its pulls
                if before is not None:
                    self._restore(self._parse(before))
                    add_note(exc, "chute: the iterator is back where it was before set_state().")
                raise

    def _check_worker_count(self, saved: dict[str, Any]) -> None:
        """Raises unless ``saved`` restores with this loader's worker count."""
        if saved["worker_count"] == max(1, self._loader._worker_count):
            return
        problem = self._loader._relayout_problem()
        if problem is None and saved["positions"] is None:
            problem = "a worker stopped part way through a batch (after an error)"
        if problem is not None:
            raise CheckpointError(
                f"this checkpoint was saved with {saved['worker_count']} worker(s) and cannot be "
                f"restored into a DataLoader with worker_count={self._loader._worker_count}: "
                f"{problem}. Restore it with the saved worker count."
            )

    def _restore(self, saved: dict[str, Any]) -> None:
        stream = Stream(
            tuple(saved["stream"]["pending"]), int(saved["stream"]["tail"]), self._loader._length()
        )
        workers = max(1, self._loader._worker_count)
        if saved["worker_count"] == workers:  # new workers at the saved states
            turn, exhausted = saved["turn"], saved["exhausted"]
            self._workers.restore(stream, saved["workers"], turn, exhausted, in_place=False)
        else:
            self._workers.redeal(stream, saved["worker_count"], saved["positions"], workers)

    def _parse(self, state: bytes | str) -> dict[str, Any]:
        try:
            saved = json.loads(state)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(
                f"DataLoaderIterator.set_state() takes the bytes returned by get_state() ({exc})."
            ) from None
        allowed = self._allow_pipeline_change
        if is_grain_loader_state(saved):  # saved by Grain's DataLoader
            try:
                return loader_from_grain(self._loader, saved, check=not allowed)
            except CheckpointError:
                raise
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise CheckpointError(
                    f"DataLoaderIterator.set_state(): the Grain DataLoader state is damaged "
                    f"({type(exc).__name__}: {exc}); pass the bytes Grain's get_state() returned."
                ) from None
        version = saved.get("version") if isinstance(saved, dict) else None
        if type(version) is not int or version != STATE_VERSION:
            raise CheckpointError(
                f"DataLoaderIterator.set_state(): unsupported state version {version!r} "
                f"(this chute reads version {STATE_VERSION})."
            )
        for key, mine in (
            ("sampler", repr(self._loader._sampler)),
            ("data_source", describe_source(self._loader._data_source)),
            ("shard_options", self._loader._describe_shard()),
        ):
            if allowed or (key == "shard_options" and key not in saved):  # not in older states
                continue
            if key not in saved:
                raise CheckpointError(
                    f"DataLoaderIterator.set_state(): the state does not record its {key} (no "
                    f"{key!r} entry; it holds {sorted(saved)}), so it cannot be checked against "
                    f"this DataLoader's {key} {mine}. Pass the bytes that "
                    "DataLoaderIterator.get_state() returned."
                )
            if saved[key] != mine:
                raise CheckpointError(
                    f"the checkpoint was saved with {key} {saved[key]} but this DataLoader "
                    f"has {mine}; restore it into a DataLoader built the same way (changed on "
                    "purpose? call chute.checkpoint.allow_pipeline_change(iterator) first)."
                )
        return saved

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Stops the workers (threads and processes); ``next()`` afterwards raises."""
        if not self._closed:
            self._closed = True
            self._workers.close()

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
