"""``DatasetIterator``: the checkpointable iterator every stage returns.

Iterators hold all of a pipeline's mutable state.  A stage's iterator
implements ``__next__``, ``get_state`` and ``set_state``; the base class owns
``close()``, the context-manager protocol, and the helpers that give every
state a ``"version"`` and the stage's name and check them on restore.

The iterator that ``iter(dataset)`` returns to the user (not those the stages
build for their parents) also knows its dataset, so its state carries the
pipeline's fingerprint (``chute._core.fingerprint``), checked on restore, and
it takes ``next()``, ``get_state()`` and ``set_state()`` one at a time
(``chute._core.thread_guard``), so a checkpoint may be taken from any thread.

``set_state()`` checks the whole state before it changes anything
(``chute._core.state_check``): every stage's ``set_state`` is wrapped so that
the outermost call checks, then applies.
"""

from __future__ import annotations

import abc
import functools
import inspect
import multiprocessing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from chute._core import errors, fingerprint, pipeline_context, registry, state_check
from chute._core.capabilities import HasParents
from chute._core.iterator_reports import describe_chain, skipped_records
from chute._core.nesting import inner_iterators, is_nested
from chute._core.thread_guard import guard

T = TypeVar("T")

STATE_VERSION = 1


def _as_tuple(parents: Any) -> tuple[Any, ...]:
    if isinstance(parents, (list, tuple)):
        return tuple(parents)
    if isinstance(parents, (DatasetIterator, HasParents)):  # one parent; a DatasetIterator: fast
        return (parents,)
    return tuple(parents)


def _marks_outer_iterator(iter_fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wraps a dataset's ``__iter__`` so the outermost iterator knows its dataset.

    Iterators built in worker processes are left unmarked: their states travel
    with every element, and the parent's state carries the fingerprint.
    """

    @functools.wraps(iter_fn)
    def __iter__(self: Any) -> Any:
        if is_nested():
            return iter_fn(self)
        collector = None
        stats = registry.stats  # installed by chute._stats
        options = pipeline_context.carried(self)  # a worker's pipeline: its loader's options
        with inner_iterators(), pipeline_context.options_after(options):
            if stats.wanted(self):  # statistics: iterate a timed copy of the pipeline
                timed, collector = stats.instrument(self)
                it = iter(timed)
                collector.watch(it)
            else:
                it = iter_fn(self)
        if options is not None:
            pipeline_context.join(it, options)
        if isinstance(it, DatasetIterator):
            try:
                if multiprocessing.parent_process() is None:
                    it._pipeline = self
                    stats.picture_when_asked(self)
                    guard(it)
                if collector is not None:
                    it._chute_stats = collector
            except AttributeError:  # an iterator with __slots__ goes unchecked
                pass
        return it

    return __iter__


def _is_iterator_class(cls: type) -> bool:
    """Whether ``cls`` is a ``DatasetIterator`` (true of the base itself, made before its name)."""
    base = globals().get("DatasetIterator")
    return base is None or issubclass(cls, base)


class _CheckedInit(abc.ABCMeta):
    """Catches a subclass ``__init__`` that forgot ``super().__init__()``.

    On dataset classes (those without ``__next__``) it also wraps ``__iter__``
    so the iterator handed to the user carries the pipeline's fingerprint; on
    iterator classes it wraps ``set_state`` so a state is checked whole first.
    """

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> None:
        super().__init__(name, bases, namespace)
        iter_fn = namespace.get("__iter__")
        if (
            iter_fn is not None
            and not hasattr(cls, "__next__")
            and not getattr(iter_fn, "__isabstractmethod__", False)
        ):
            cls.__iter__ = _marks_outer_iterator(iter_fn)
        set_fn = namespace.get("set_state")
        if (
            set_fn is not None
            and _is_iterator_class(cls)  # an iterator, not a dataset that iterates itself
            and not getattr(set_fn, "__isabstractmethod__", False)
            and not getattr(set_fn, state_check.CHECKS_FIRST, False)
        ):
            cls.set_state = state_check.checks_first(set_fn)

    @property
    def __signature__(cls) -> inspect.Signature:
        """``__init__``'s parameters, not ``__call__``'s, for ``help()`` and ``inspect``."""
        init = inspect.signature(cls.__init__)  # type: ignore[misc]  # the class's own
        return init.replace(
            parameters=list(init.parameters.values())[1:],
            return_annotation=inspect.Signature.empty,
        )

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__call__(*args, **kwargs)
        if "_parents" not in obj.__dict__:
            raise TypeError(
                f"{cls.__name__}.__init__ must call super().__init__(parents) "
                "(chute's base class keeps the pipeline's structure there)."
            )
        if len(obj._parents) > 1:  # branches meet (zip, mix): their options become one
            pipeline_context.join(obj)
        return obj


class DatasetIterator(Iterator[T], metaclass=_CheckedInit):
    """A checkpointable iterator: ``__next__``, ``get_state``, ``set_state``.

    ``get_state()`` returns a small JSON-serialisable dict of positions with a
    ``"version"``; ``set_state()`` on a fresh iterator of the same pipeline
    resumes exactly there.  ``close()`` releases threads and processes.

    Args:
        parents: For subclasses: the iterator or iterators this one reads from.

    >>> from chute import MapDataset
    >>> it = iter(MapDataset.range(5).to_iter_dataset())
    >>> next(it), next(it)
    (0, 1)
    >>> state = it.get_state()
    >>> restored = iter(MapDataset.range(5).to_iter_dataset())
    >>> restored.set_state(state)
    >>> list(restored)
    [2, 3, 4]
    """

    _parents: tuple[DatasetIterator[Any], ...]
    #: What this stage's state holds: each key with its check (``chute._core.state_check``);
    #: None for an iterator that checks its state in its own ``set_state`` (a user's).
    _state_fields: ClassVar[Mapping[str, state_check.Check] | None] = None
    _closed: bool = False
    _pipeline: Any = None  # the dataset, on the iterator iter(dataset) returned
    _fingerprint: list[str] | None = None
    _allow_pipeline_change: bool = False
    _label: str = ""  # the call that built the stage (``map(decode)``), for errors and reprs
    _chute_stats: Any = None  # statistics on: the collector, on the iterator iter(dataset) returned

    def __init__(self, parents: DatasetIterator[Any] | Sequence[DatasetIterator[Any]] = ()) -> None:
        self._parents = _as_tuple(parents)

    @property
    def _parent(self) -> DatasetIterator[Any]:
        if len(self._parents) != 1:
            raise AttributeError(f"{type(self).__name__} has {len(self._parents)} parents, not 1.")
        return self._parents[0]

    def __iter__(self) -> DatasetIterator[T]:
        return self

    @abc.abstractmethod
    def __next__(self) -> T:
        """The next element; ``StopIteration`` at the end."""

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """The iterator's position as a small JSON-serialisable dict.

        Returns:
            A dict with a ``"version"``, the stage's name and its positions
            (never buffered elements); save it with your model checkpoint.
        """

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the iterator to a position returned by ``get_state()``.

        The whole state is checked before anything changes; a state that is
        refused leaves the iterator where it was.

        Args:
            state: A dict from ``get_state()`` of an iterator of the same pipeline.

        Raises:
            CheckpointError: The state comes from another pipeline or version, or
                is damaged (a key missing or added, a value of the wrong type or
                out of range); the message names the stage and the key.
        """

    def close(self) -> None:
        """Releases threads and processes, here and in every parent iterator.

        ``next()`` afterwards raises ``IteratorClosedError``; ``with iter(ds) as it:``
        closes on leaving the block.
        """
        self._closed = True
        for parent in self._parents:
            close = getattr(parent, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> DatasetIterator[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start_prefetch(self) -> None:
        """Starts reading ahead now (threads, workers) rather than at the first ``next()``.

        Stages that read ahead start their work; every other stage passes the
        call on to its parents.  chute's worker processes already start when
        the iterator is made, so for them this changes nothing.
        """
        for parent in self._parents:
            start = getattr(parent, "start_prefetch", None)
            if start is not None:
                start()

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """chute only: the records that error budgets in this pipeline skipped so far.

        One dict per record (position, stage, element index, error, and where the
        source knows them, as the error's note does: ``source_index``, ``file``,
        ``record``, or a TFRecord's byte ``offset``), from every budget before this
        iterator, worker processes' included.
        """
        return skipped_records(self)

    # -- helpers for chute's own stages ----------------------------------------------

    _stage: str = ""

    def _stage_name(self) -> str:
        return self._stage or type(self).__name__

    def _state(self, **fields: Any) -> dict[str, Any]:
        state = {"version": STATE_VERSION, "stage": self._stage_name(), **fields}
        if self._pipeline is not None:
            state["fingerprint"] = self._pipeline_fingerprint()
        return state

    def _pipeline_fingerprint(self) -> list[str]:
        if self._fingerprint is None:  # once per iterator: datasets never change
            self._fingerprint = fingerprint.fingerprint(self._pipeline)
        return list(self._fingerprint)

    def _check_fingerprint(self, state: Mapping[str, Any]) -> None:
        if self._pipeline is None or "fingerprint" not in state or self._allow_pipeline_change:
            return
        saved, mine = state["fingerprint"], self._pipeline_fingerprint()
        problem = fingerprint.first_difference(saved, mine)
        if problem is not None:  # said with the seeds as the user wrote them
            shown = fingerprint.fingerprint(self._pipeline, people=True)
            problem = fingerprint.first_difference(saved, mine, shown)
            raise errors.CheckpointError(
                f"this checkpoint was saved by a different pipeline ({problem}). Build the "
                "pipeline that saved it, or, if you changed it on purpose, restore with "
                "chute.checkpoint.allow_pipeline_change(iterator) first."
            )

    def _check_state(self, state: Any, *keys: str, where: str = "state") -> dict[str, Any]:
        """Checks a state's version, fingerprint, stage and ``keys``; returns it as a dict.

        ``where`` is the state's place in the whole state, for messages.
        """
        name = self._stage_name()
        whose = "the state" if where == "state" else f"the state at {where}"
        at = "" if where == "state" else f" (at {where})"
        if looks_like_grain(state):  # saved by Grain's iterator: chute._grain translates it
            state = registry.from_grain(self, state)
        if not isinstance(state, Mapping):
            raise errors.CheckpointError(
                f"{name}.set_state() takes the dict returned by get_state() "
                f"(got {type(state).__name__}){at}."
            )
        version = state.get("version")
        if type(version) is not int or version != STATE_VERSION:
            raise errors.CheckpointError(
                f"{name}.set_state(): state version {version!r} is not supported "
                f"(this chute writes and reads version {STATE_VERSION}){at}."
            )
        self._check_fingerprint(state)
        if "stage" not in state:
            raise errors.CheckpointError(
                f"{name}.set_state(): {whose} has no 'stage' entry (it holds "
                f"{sorted(map(str, state))}); this pipeline's stage there is {name} and expects "
                f"a state with 'stage': {name!r} and {list(keys)}. Pass the dict its get_state() "
                "returned."
            )
        if state["stage"] != name:
            raise errors.CheckpointError(
                f"cannot restore a {name} iterator from a state saved by a "
                f"{state['stage']!r} stage{at}: the checkpoint was written by a "
                "different pipeline. Build the same pipeline that saved it."
            )
        missing = [k for k in keys if k not in state]
        if missing:
            raise errors.CheckpointError(
                f"{name}.set_state(): {whose} lacks {missing} (it holds "
                f"{sorted(map(str, state))}); pass the dict get_state() returned."
            )
        return dict(state)

    # -- checking a whole state before applying it (chute._core.state_check) -----------

    def _validate_state(self, state: Any, where: str = "state") -> None:
        """Raises ``CheckpointError`` unless ``state`` fits this iterator and its parents.

        Changes nothing.  Iterators without ``_state_fields`` take any state here.
        """
        fields = self._state_fields
        if fields is None:
            return
        required = [k for k, check in fields.items() if not state_check.is_optional(check)]
        checked = self._check_state(state, *required, where=where)
        unknown = sorted(map(str, set(checked) - set(fields) - _HEADER))
        if unknown:
            whose = "the state" if where == "state" else f"the state at {where}"
            raise errors.CheckpointError(
                f"{self._stage_name()}.set_state(): {whose} holds {unknown}, which a "
                f"{self._stage_name()} stage never writes (it writes {sorted(fields)}); "
                "pass the dict get_state() returned, unchanged."
            )
        for key, check in fields.items():
            if key in checked:
                check(self, key, checked[key], f"{where}[{key!r}]")
        self._check_part(checked, where)
        state_check.mark_checked(state)

    def _check_part(self, state: dict[str, Any], where: str) -> None:
        """The rules that tie this stage's keys together; stages that have some add them."""

    def _reach(self) -> int | None:
        """The most elements this iterator yields from its start; None if unknown or unbounded."""
        return None

    def _restore(self, state: Any, apply: Callable[[Any, Any], None]) -> None:
        """Checks ``state`` whole, then applies it; a refusal leaves the iterator where it was.

        A state that passes the checks and still does not fit the data (the
        replay of its pulls ends early) raises ``CheckpointError`` while it is
        applied: the iterator then goes back to the position it had.
        """
        with state_check.checking(pipeline_changed=self._allow_pipeline_change):
            try:
                before: Any = self.get_state()
            except Exception:  # no position to go back to (closed, say): checks only
                before = None
            moved = False
            try:
                if looks_like_grain(state):  # saved by Grain's iterator: chute._grain translates
                    moved = True  # it, and may read ahead to do so (a window shuffle's window)
                    state = registry.from_grain(self, state)
                self._validate_state(state)
                moved = True
                apply(self, state)
            except errors.CheckpointError as exc:
                if moved and before is not None:
                    self._go_back(before, apply, exc)
                raise

    def _go_back(self, before: Any, apply: Callable[[Any, Any], None], exc: BaseException) -> None:
        try:
            apply(self, before)
        except Exception as again:
            errors.add_note(
                exc,
                f"chute: moving the iterator back to where it was failed too ({again!r}); "
                "build a new iterator.",
            )
        else:
            errors.add_note(exc, "chute: the iterator is back where it was before set_state().")

    def _raise_closed(self) -> None:
        raise errors.closed_error(f"{type(self).__name__}")

    def _repr_position(self) -> int | None:
        """The index of the next element, where a stage counts it anyway; else None."""
        return None

    def __repr__(self) -> str:
        """Its stages, newest first, and its position: ``<DatasetIterator map(f) <- ...>``."""
        return f"<DatasetIterator {describe_chain(self)}>"


_HEADER = frozenset({"version", "stage", "fingerprint"})  # keys every chute state may hold


def looks_like_grain(state: Any) -> bool:
    """True for a non-empty dict without chute's ``version`` and ``stage``: Grain's shape."""
    return isinstance(state, Mapping) and bool(state) and not {"version", "stage"} & set(state)
