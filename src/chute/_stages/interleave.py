"""``InterleaveIterDataset``: many datasets read in turn, ``cycle_length`` at once.

Order (Grain's, checked against Grain 0.2.18): the first ``cycle_length``
datasets take the places of the cycle, and ``next()`` takes one element from
each place in turn.  When the dataset in a place runs out, the next unopened
dataset takes that place and the turn passes on to the following place; when
none is left, the place closes and the others go on.  ``cycle_length`` 1
chains the datasets; a ``cycle_length`` of at least the number of datasets
reads them all in turn.  A hole (``None``) in a MapDataset of datasets, left
by a filter, is skipped as if it were not there.  Under ``mp_prefetch`` each
worker reads its share of the datasets (worker ``w`` of ``n``: datasets
``w, w + n, ...``), as in Grain.

Threads: ``num_make_iter_threads`` threads open the iterators of upcoming
datasets ahead of need (``make_iter_buffer_size`` each), and with
``iter_buffer_size`` > 0 every open iterator reads that many elements ahead on
its own thread (``ThreadPrefetchIterDataset``).  Output never depends on
timing.  ``close()``, ``set_state()`` and the end of the data stop and join
every thread; garbage collection (a ``break`` out of a loop) stops them.

Options: the datasets' pipelines read the ``DatasetOptions`` of the
interleave's pipeline (set before or after it) over their own, as in Grain;
options set inside a dataset stay inside it.

Errors: an exception from a dataset's ``next()`` reaches the caller unchanged
(with the notes the dataset added) and the turn stays, so the next ``next()``
reads that dataset on.  A dataset that fails to open (its MapDataset element
or its ``iter()`` raises) raises once, with a note naming the dataset, and is
then skipped.

State: the turn, the index of the next dataset to open, and for each place
the dataset it reads and that iterator's state (``None``: closed,
``"waiting"``: waiting for its next dataset).  Read-ahead is never saved, so
a state moves between thread settings; a restore opens just the datasets in
the cycle, each when its turn comes (at once on the make-iter threads).
"""

from __future__ import annotations

import concurrent.futures
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from chute._core import errors
from chute._core.dataset import STATE_VERSION, DatasetIterator, IterDataset, MapDataset
from chute._core.errors import CheckpointError
from chute._core.pipeline_context import PipelineContext, iter_inside, join
from chute._core.state_check import by_stage, fields, is_int, refuse, require
from chute._core.validate import check_int
from chute._execution.daemon_pool import DaemonPool
from chute._stages.next_index import get_next_index, set_next_index
from chute._stages.thread_prefetch import _ThreadPrefetchIterator

_NAME = "InterleaveIterDataset"
_WAITING = "waiting"  # a place waiting for its next dataset


def _check_datasets(datasets: Any) -> MapDataset[Any]:
    """The datasets as a MapDataset, so ``mp_prefetch`` shares them out among workers."""
    if isinstance(datasets, MapDataset):
        return datasets
    if isinstance(datasets, (IterDataset, str, bytes)) or not isinstance(datasets, Sequence):
        raise TypeError(
            f"{_NAME}: datasets must be a sequence of datasets or a MapDataset whose elements "
            f"are datasets (got {datasets!r} that is a {type(datasets).__name__})."
        )
    if not datasets:
        raise ValueError(f"{_NAME}: datasets is empty; give at least one dataset to read.")
    for i, ds in enumerate(datasets):
        if not isinstance(ds, (IterDataset, MapDataset)):
            raise TypeError(
                f"{_NAME}: datasets[{i}] must be an IterDataset or a MapDataset (got "
                f"{ds!r} that is a {type(ds).__name__})."
            )
    return MapDataset.source(list(datasets))


def _check_cycle_length(cycle_length: Any) -> int:
    if isinstance(cycle_length, bool) or not isinstance(cycle_length, (int, np.integer)):
        raise TypeError(
            f"{_NAME}: cycle_length must be an int >= 1 (got {cycle_length!r} that is a "
            f"{type(cycle_length).__name__}); chute does not autotune it, pass a number "
            "such as 16."
        )
    return check_int(cycle_length, f"{_NAME}: cycle_length", minimum=1)


class InterleaveIterDataset(IterDataset[Any]):
    """Reads many datasets in turn, ``cycle_length`` of them at a time.

    Args:
      datasets: a sequence of IterDatasets or MapDatasets, or a MapDataset
        whose elements are datasets, such as
        ``MapDataset.source(paths).map(ParquetIterDataset)``.
      cycle_length: how many datasets are read at once (an int >= 1).
      num_make_iter_threads: threads that open upcoming datasets' iterators
        ahead of need (0: open them when needed, on the calling thread).
      make_iter_buffer_size: iterators each of those threads keeps ready.
      iter_buffer_size: elements each open iterator reads ahead on its own
        thread (0: read inline).

    Raises:
      TypeError, ValueError: when the pipeline is built, for bad arguments.

    >>> from chute import MapDataset
    >>> datasets = [MapDataset.range(0, 3), MapDataset.range(10, 12), MapDataset.range(20, 22)]
    >>> list(InterleaveIterDataset(datasets, cycle_length=2))
    [0, 10, 1, 11, 2, 20, 21]
    >>> files = MapDataset.source([3, 1, 2]).map(lambda n: MapDataset.range(100 * n, 100 * n + n))
    >>> list(InterleaveIterDataset(files, cycle_length=3, iter_buffer_size=0))
    [300, 100, 200, 301, 201, 302]
    """

    def __init__(
        self,
        datasets: Sequence[IterDataset[Any] | MapDataset[Any]] | MapDataset[Any],
        *,
        cycle_length: int,
        num_make_iter_threads: int = 1,
        make_iter_buffer_size: int = 1,
        iter_buffer_size: int = 1,
    ) -> None:
        super().__init__(_check_datasets(datasets))
        # Given as a list, the datasets exist already: a restore may look them up to check
        # their places' states.  A MapDataset may build each on demand: a restore builds none.
        self._listed = not isinstance(datasets, MapDataset)
        self._cycle = _check_cycle_length(cycle_length)
        what = f"{_NAME}: "
        self._threads = check_int(num_make_iter_threads, what + "num_make_iter_threads", minimum=0)
        self._ahead = check_int(make_iter_buffer_size, what + "make_iter_buffer_size", minimum=0)
        self._read_ahead = check_int(iter_buffer_size, what + "iter_buffer_size", minimum=0)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Interleaves only the datasets ``datasets[sl]`` from now on, in place (Grain's sharding).

        Each call slices the datasets kept so far, as Grain's does.

        Args:
          sl: which datasets to keep, e.g. ``slice(shard, None, shard_count)``.
          sequential_slice: accepted for Grain's signature.
        """
        if not isinstance(sl, slice):
            raise TypeError(f"{_NAME}.set_slice() takes a slice (got {sl!r}).")
        self._parents = (self._parent.slice(sl),)

    def __iter__(self) -> DatasetIterator[Any]:
        datasets = self._parent
        opener = _Opener(datasets, self._threads, self._threads * self._ahead, self._read_ahead)
        it = _InterleaveIterator(len(datasets), min(self._cycle, len(datasets)), opener)
        it._listed = self._listed
        return it

    def _describe(self) -> str:
        return (
            f"{self._parent!r}, cycle_length={self._cycle}, num_make_iter_threads="
            f"{self._threads}, make_iter_buffer_size={self._ahead}, "
            f"iter_buffer_size={self._read_ahead}"
        )


class _Place:
    """A place in the cycle: dataset ``index``, its iterator once open, else a state to restore."""

    __slots__ = ("index", "iterator", "state")

    def __init__(self, index: int, iterator: Any = None, state: Any = None) -> None:
        self.index, self.iterator, self.state = index, iterator, state


class _InterleaveIterator(DatasetIterator[Any]):
    _stage = "interleave"
    _state_fields = fields(**dict.fromkeys(("turn", "next_dataset", "places"), by_stage))

    _listed = False  # the datasets were given as a list: see InterleaveIterDataset

    def __init__(self, count: int, cycle: int, opener: _Opener) -> None:
        super().__init__()
        self._count, self._opener = count, opener
        opener.context = join(self)  # the datasets read this pipeline's options, as in Grain
        # Every place starts waiting: the first round fills them in order, reading nothing.
        self._restart(0, 0, [_WAITING] * cycle)

    def _restart(self, turn: int, next_dataset: int, places: list[Any]) -> None:
        self._turn, self._next_dataset, self._places = turn, next_dataset, places
        self._active = sum(p is not None for p in places)
        self._scheduled = False

    def __next__(self) -> Any:
        if self._closed:
            self._raise_closed()
        if not self._scheduled:
            self._schedule()
        places, cycle = self._places, len(self._places)
        while self._active:
            turn = self._turn
            place = places[turn]
            if place is None or place is _WAITING:
                if place is _WAITING:
                    self._fill(turn)  # may raise: the turn stays, the next call goes on
                self._turn = (turn + 1) % cycle
                continue
            iterator = place.iterator if place.iterator is not None else self._reopen(turn)
            if iterator is None:
                continue
            try:
                value = next(iterator)  # a user error propagates; the turn stays
            except StopIteration:
                iterator.close()
                places[turn] = _WAITING
                continue
            self._turn = (turn + 1) % cycle
            return value
        raise StopIteration

    def _fill(self, turn: int) -> None:
        """Opens the next dataset in place ``turn``, skipping holes; closes it if none is left."""
        while self._next_dataset < self._count:
            index = self._next_dataset
            self._next_dataset += 1
            self._opener.ahead(self._next_dataset, self._waiting() - 1)
            try:
                iterator = self._opener.take(index, None)
            except Exception as exc:
                errors.annotate(exc, f"{_NAME} (opening dataset {index})", index)
                raise
            if iterator is not None:
                self._places[turn] = _Place(index, iterator)
                return
        self._places[turn] = None
        self._active -= 1
        if not self._active:
            self._opener.reset()  # the end: join the idle threads now

    def _reopen(self, turn: int) -> Any:
        """Opens a restored place's dataset at its saved state; on failure the place waits."""
        place = self._places[turn]
        try:
            place.iterator = self._opener.take(place.index, place.state)
        except CheckpointError as exc:  # the saved state does not fit the dataset: keep it
            errors.annotate(exc, f"{_NAME} (restoring dataset {place.index})", place.index)
            raise
        except Exception as exc:
            self._places[turn] = _WAITING
            errors.annotate(exc, f"{_NAME} (restoring dataset {place.index})", place.index)
            raise
        if place.iterator is None:  # now a hole: the data changed since the checkpoint
            self._places[turn] = _WAITING
        return place.iterator

    def _waiting(self) -> int:
        return sum(p is _WAITING for p in self._places)

    def _schedule(self) -> None:
        """Starts opening, ahead on threads, what the cycle will need first."""
        places = self._places
        restored = [
            (p.index, p.state) for p in places if isinstance(p, _Place) and p.iterator is None
        ]
        self._opener.restore(restored)
        self._opener.ahead(self._next_dataset, self._waiting())
        self._scheduled = True

    def _dataset_iterator(self, index: int) -> Any:
        """A fresh iterator of dataset ``index``, without read-ahead (for state translation)."""
        opener = self._opener
        iterator = _open(opener._datasets, index, None, 0, opener.context)
        if iterator is None:
            raise CheckpointError(f"{_NAME}: dataset {index} is a hole (None) and has no state.")
        return iterator

    def _only_iterator(self, name: str, open_it: bool) -> Any:
        """The iterator of the one dataset interleaved (Grain's next-index helpers need one)."""
        if self._count != 1:
            raise NotImplementedError(
                f"{name} is not supported for InterleaveDatasetIterator with more than one "
                f"dataset. chute: this is an interleave of {self._count} datasets; use "
                "get_state() and set_state() instead."
            )
        place = self._places[0] if self._places else None
        if open_it and place is _WAITING:
            self._fill(0)
        elif open_it and isinstance(place, _Place) and place.iterator is None:
            self._reopen(0)
        place = self._places[0] if self._places else None
        return place.iterator if isinstance(place, _Place) else None

    def _get_next_index(self) -> int:
        iterator = self._only_iterator("get_next_index", open_it=False)
        return 0 if iterator is None else get_next_index(iterator)

    def _set_next_index(self, index: int) -> None:
        iterator = self._only_iterator("set_next_index", open_it=True)
        if iterator is None:
            raise ValueError("set_next_index: the interleaved dataset is exhausted or empty.")
        set_next_index(iterator, index)

    def get_state(self) -> dict[str, Any]:
        return self._state(
            turn=self._turn,
            next_dataset=self._next_dataset,
            places=[_saved(p) for p in self._places],
        )

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "turn", "next_dataset", "places")
        places = _loaded(state, len(self._places), self._count)
        self._release()
        self._restart(state["turn"], state["next_dataset"], places)

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        """The places, and each open place's state against a fresh iterator of its dataset.

        Datasets given as a MapDataset may be built on demand (a user's function
        per file): a restore builds none, so their places' states are checked
        whole when each dataset opens; a refusal there raises from ``next()`` and
        keeps the place, skipping nothing.
        """
        places = _loaded(state, len(self._places), self._count)
        opened = [p.index for p in places if isinstance(p, _Place)]
        require(self, len(set(opened)) == len(opened), where, f"datasets {opened} open twice")
        require(
            self,
            None not in places or state["next_dataset"] == self._count,
            where,
            "a place is closed before every dataset was opened",
        )
        for k, place in enumerate(places):
            if isinstance(place, _Place) and place.state is not None:  # None: from its start
                saved, place_where = place.state, f"{where}['places'][{k}][1]"
                if not (
                    isinstance(saved, dict)
                    and saved.get("version") == STATE_VERSION
                    and isinstance(saved.get("stage"), str)
                ):
                    expected = f"None or a dataset's state (a dict with 'version': {STATE_VERSION})"
                    raise refuse(self, f"places[{k}][1]", place_where, expected, saved)
                if self._listed:
                    iterator = self._dataset_iterator(place.index)
                    try:
                        iterator._validate_state(saved, place_where)
                    finally:
                        iterator.close()

    def _release(self) -> None:
        """Closes every iterator and joins every thread."""
        self._opener.reset()
        for place in self._places:
            if isinstance(place, _Place) and place.iterator is not None:
                place.iterator.close()

    def close(self) -> None:
        if self._closed:
            return
        self._release()
        self._restart(0, self._count, [])
        super().close()


def _saved(place: Any) -> Any:
    if not isinstance(place, _Place):
        return place
    if place.iterator is None:
        return [place.index, place.state]
    return [place.index, _Opener.state_of(place.iterator)]


def _loaded(state: dict[str, Any], cycle: int, count: int) -> list[Any]:
    """The places of a saved state, checked against this dataset."""
    saved, turn, next_dataset = state["places"], state["turn"], state["next_dataset"]
    if not isinstance(saved, list) or len(saved) != cycle:
        reads = f"{len(saved)} datasets" if isinstance(saved, list) else f"{saved!r:.40}"
        raise CheckpointError(
            f"{_NAME}.set_state(): the state reads {reads} at once ('places'), this "
            f"dataset {cycle}: build it with the same datasets and cycle_length."
        )
    if not (is_int(turn, max(cycle, 1) - 1) and is_int(next_dataset, count)):
        raise CheckpointError(
            f"{_NAME}.set_state(): bad position in the state: 'turn' must be an int from 0 to "
            f"{max(cycle, 1) - 1} and 'next_dataset' one from 0 to {count} (the state holds "
            f"{state})."
        )
    places: list[Any] = []
    for k, entry in enumerate(saved):
        if entry is None or entry == _WAITING:
            places.append(None if entry is None else _WAITING)
        elif isinstance(entry, list) and len(entry) == 2 and is_int(entry[0], next_dataset - 1):
            places.append(_Place(entry[0], None, entry[1]))
        else:
            raise CheckpointError(
                f"{_NAME}.set_state(): bad place {entry!r:.80} in the state at 'places'[{k}]: "
                "a place is None (closed), 'waiting', or [dataset index below 'next_dataset', "
                "its state]."
            )
    return places


# -- opening the datasets' iterators ---------------------------------------------------


def _open(
    datasets: MapDataset[Any], index: int, state: Any, read_ahead: int, context: PipelineContext
) -> Any:
    """Dataset ``index``'s iterator, restored to ``state``; ``None`` for a hole.

    The dataset's stages read the interleave's options over their own (``context``).
    """
    ds = datasets[index]
    if ds is None:
        return None
    if isinstance(ds, MapDataset):
        ds = ds.to_iter_dataset()
    elif not isinstance(ds, IterDataset):
        raise TypeError(
            f"{_NAME}: element {index} of datasets must be an IterDataset or a MapDataset "
            f"(got {ds!r} that is a {type(ds).__name__})."
        )
    iterator: Any = iter_inside(context, ds)
    try:
        if state is not None:
            iterator.set_state(state)
        if read_ahead:
            iterator = _ThreadPrefetchIterator(iterator, read_ahead)
            iterator._warm_up()
    except BaseException:
        iterator.close()
        raise
    return iterator


def _abandon(executor: DaemonPool) -> None:
    executor.shutdown(wait=False, cancel_futures=True)


class _Opener:
    """Opens the datasets' iterators: when needed, or ahead of need on threads.

    With ``threads`` > 0, ``ahead()`` keeps the iterators of the next datasets
    opening on a pool of threads and ``take()`` waits for the one it needs; an
    error raised while opening is raised by ``take()``.  ``reset()`` cancels
    what is queued, joins the threads and closes what they opened.
    """

    def __init__(self, datasets: MapDataset[Any], threads: int, ahead: int, read_ahead: int):
        self._datasets, self._count = datasets, len(datasets)
        self._threads, self._ahead, self._read_ahead = threads, ahead, read_ahead
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._executor: DaemonPool | None = None
        self._finalizer: weakref.finalize | None = None
        self.context = PipelineContext()  # the interleave iterator's: it sets its own

    def ahead(self, start: int, waiting: int) -> None:
        """Starts opening datasets ``start`` on, for ``waiting`` places and the read-ahead."""
        if self._threads:
            for index in range(start, min(start + max(waiting, 0) + self._ahead, self._count)):
                if index not in self._pending:
                    self._submit(index, None)

    def restore(self, places: list[tuple[int, Any]]) -> None:
        """Starts opening restored places' datasets at their saved states."""
        if self._threads:
            for index, state in places:
                self._submit(index, state)

    def take(self, index: int, state: Any) -> Any:
        """Dataset ``index``'s iterator (``None`` for a hole), waiting if it is opening."""
        future = self._pending.pop(index, None)
        if future is not None:
            return future.result()
        return _open(self._datasets, index, state, self._read_ahead, self.context)

    def _submit(self, index: int, state: Any) -> None:
        if self._executor is None:
            self._executor = DaemonPool(
                self._threads, thread_name_prefix=f"chute-interleave-{id(self):x}"
            )
            self._finalizer = weakref.finalize(self, _abandon, self._executor)
        job = self._executor.submit(
            _open, self._datasets, index, state, self._read_ahead, self.context
        )
        self._pending[index] = job

    def reset(self) -> None:
        """Cancels what is queued, joins the threads, closes the iterators they opened."""
        executor, pending = self._executor, self._pending
        self._executor, self._pending = None, {}
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        for job in pending.values():
            if not job.cancelled() and job.exception() is None and job.result() is not None:
                job.result().close()

    @staticmethod
    def state_of(iterator: Any) -> Any:
        """The dataset's own state, without the read-ahead's wrapping."""
        state = iterator.get_state()
        return state["parent"] if isinstance(iterator, _ThreadPrefetchIterator) else state
