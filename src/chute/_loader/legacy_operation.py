"""Grain's legacy operations as callables over iterators of records, in both directions.

Code written for Grain's DataLoader calls an operation as
``op(iterator_of_records)`` and gets an iterator of records back.  chute's
operations (``MapOperation``, ``RandomMapOperation``, ``FilterOperation``,
``BatchOperation``, ``PackAndBatchOperation``) can be called that way, and a
user's own callable operation can go in ``DataLoader(operations=...)``, with
or without worker processes: ``OperationIterDataset`` runs it there.

A user's operation is a black box to chute: a checkpoint taken after it is
the position of the records it was given.  When the operation holds records
back between calls (it batches or buffers them), a resume from such a
checkpoint starts after the records it held, as in Grain; for exact resumes
write it as a chute transform instead (``Map``, ``Filter``, ``Batch``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from chute._core.dataset import DatasetIterator, IterDataset
from chute._core.errors import add_note
from chute._core.state_check import fields, parent_state
from chute._core.transforms import _name
from chute._loader.record import Record


def records_out(
    records: Iterator[Record], fn: Callable[[Record], Any], what: str
) -> Iterator[Record]:
    """``Record(metadata without its key, fn(record))`` for each record; errors get a note."""
    for index, record in enumerate(records):
        try:
            data = fn(record)
        except Exception as exc:
            add_note(exc, f"chute: raised in {what} on the record at position {index}.")
            raise
        yield Record(record.metadata.remove_record_key(), data)


class IteratorIterDataset(IterDataset[Any]):
    """A plain iterator (or any iterable) as a one-pass IterDataset, for chute's stages.

    Its iterator's state counts the elements taken; it cannot be restored (the
    iterator cannot go back): it is used only inside ``op(iterator)``.
    """

    def __init__(self, iterator: Iterable[Any]) -> None:
        super().__init__()
        # Grain's operations take any iterable of records (a list in its own tests).
        self._iterator = iter(iterator)

    def __iter__(self) -> DatasetIterator[Any]:
        return _PlainIterator(self._iterator)


class _PlainIterator(DatasetIterator[Any]):
    _stage = "iterator"

    def __init__(self, iterator: Iterator[Any]) -> None:
        super().__init__()
        self._iterator, self._taken = iterator, 0

    def __next__(self) -> Any:
        element = next(self._iterator)
        self._taken += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return self._state(taken=self._taken)

    def set_state(self, state: dict[str, Any]) -> None:
        raise ValueError("an operation called on a plain iterator cannot be restored.")


class OperationIterDataset(IterDataset[Any]):
    """Runs a user's ``operation(iterator_of_records) -> iterator_of_records`` in the loader."""

    def __init__(self, parent: IterDataset[Any], operation: Callable[..., Any]) -> None:
        super().__init__(parent)
        self._operation = operation

    def __iter__(self) -> DatasetIterator[Any]:
        return _OperationIterator(iter(self._parent), self._operation)

    def _describe(self) -> str:
        return f"{self._parent!r}, operation={_name(self._operation)}"


class _OperationIterator(DatasetIterator[Any]):
    _stage = "operation"
    _state_fields = fields(parent=parent_state)

    def __init__(self, parent: DatasetIterator[Any], operation: Callable[..., Any]) -> None:
        super().__init__(parent)
        self._operation = operation
        self._start()

    def _start(self) -> None:
        try:
            self._outputs = iter(self._operation(self._parent))
        except Exception as exc:
            self._note(exc)
            raise

    def _note(self, exc: BaseException) -> None:
        add_note(
            exc,
            f"chute: raised in DataLoader operation {_name(self._operation)}, which is called "
            "with an iterator of Records and must return one (Grain's legacy operations). "
            "A function of one element goes in as chute.transforms.Map(fn).",
        )

    def __next__(self) -> Any:
        try:
            return next(self._outputs)
        except StopIteration:
            raise
        except Exception as exc:
            self._note(exc)
            self._start()  # a generator that raised is finished: the next call goes on
            raise

    def get_state(self) -> dict[str, Any]:
        return self._state(parent=self._parent.get_state())

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._check_state(state, "parent")
        self._parent.set_state(state["parent"])
        self._start()


class RecordOperation:
    """A user's callable operation, placed among the loader's record stages."""

    def __init__(self, operation: Callable[..., Any]) -> None:
        self._operation = operation

    def _loader_stage(self, ds: IterDataset[Any]) -> IterDataset[Any]:
        return OperationIterDataset(ds, self._operation)
