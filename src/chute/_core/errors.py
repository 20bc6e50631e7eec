"""chute's own exceptions, and how user errors are reported.

Exceptions raised by *user code* (a map function, a source's ``__getitem__``)
are never wrapped: they reach the caller as the very exception type the user
raised, with a note (``exc.add_note``) naming the chute stage and the element
index.  The library's own exceptions form one tree, all importable from
``chute`` itself::

    ChuteError                      base of every chute-specific error
    ├── IteratorClosedError (RuntimeError)
    │                               next() on an iterator after close()
    ├── CheckpointError (ValueError) a state that does not fit the pipeline
    ├── ErrorBudgetExceededError (RuntimeError)
    │                               more elements failed than the budget allows
    ├── FilterThresholdError (ValueError) a filter dropped more than
    │                               DatasetOptions.filter_raise_threshold_ratio
    ├── SourceChangedError (OSError) an object (in a bucket, or a local file)
    │   │                           changed after it was opened for reading
    │   └── FileChangedError (ValueError) the same, raised for a local file by
    │                               ArrayRecordDataSource's own reader and by
    │                               TFRecord sources, where chute raised a
    │                               ValueError before: catch SourceChangedError
    ├── ObjectStoreError (OSError)  a request to a bucket's store failed for good:
    │   │                           it kept failing past its retries (a refused
    │   │                           connection: the message says to check the
    │   │                           endpoint)
    │   └── CredentialsNotFoundError (PermissionError)
    │                               no credentials found for the store; the
    │                               message says what to set
    └── WorkerDiedError (RuntimeError) a worker process ended without being
                                    asked to (killed, out of memory), or could
                                    not start (its note says why)

Outside the tree, ``batch()`` raises ``chute._core.tree.StructureMismatchError``
for elements of different structures: a ``ValueError`` as Grain's ``batch`` raises,
and a ``TypeError`` as Grain's ``BatchOperation`` raises.  A window shuffle's seed
outside ``[0, 2**32)`` raises ``chute._core.seeding.SeedRangeError``: a ``TypeError``
as in Grain, and the ``ValueError`` chute raised before.  An exception raised
in a worker process reaches the parent as the same exception, with notes
naming the stage, the element index and the worker.

Bad arguments raise plain ``TypeError``/``ValueError`` when the pipeline is
built, each saying what was expected, what came and how to fix it.
"""

from __future__ import annotations

import dataclasses
import sys


class ChuteError(Exception):
    """Base class of chute's own exceptions."""


class IteratorClosedError(ChuteError, RuntimeError):
    """Raised by ``next()`` on an iterator that was closed."""


class CheckpointError(ChuteError, ValueError):
    """Raised by ``set_state()`` when a state does not belong to the pipeline."""


class ErrorBudgetExceededError(ChuteError, RuntimeError):
    """Raised when more elements failed than an error budget allows."""


class FilterThresholdError(ChuteError, ValueError):
    """A filter dropped at least ``filter_raise_threshold_ratio`` of a window."""


class SourceChangedError(ChuteError, OSError):
    """An object changed (another ETag or generation) after it was opened for reading.

    Every source raises it, or ``FileChangedError``, for a file or object that changed
    (or was replaced) while it was read or since an index recorded it."""


class FileChangedError(SourceChangedError, ValueError):
    """A ``SourceChangedError`` for a local file that is also a ``ValueError``.

    ``ArrayRecordDataSource`` (reading with array_record's reader) and the TFRecord
    sources raised ``ValueError`` for a local file that changed; they raise this now, so
    code that catches either keeps working."""


class ObjectStoreError(ChuteError, OSError):
    """A request to an object store failed for good.

    It kept failing after its retries (``s3://``, ``gs://``, ``az://``, ``https://``), or
    cannot pass however often it is tried.  A missing object and denied access raise
    ``FileNotFoundError`` and ``PermissionError`` instead, as for local files."""


class CredentialsNotFoundError(ObjectStoreError, PermissionError):
    """No credentials for a bucket's store were found.

    None were in the environment, and no instance-metadata server answered.  The message
    names the variables to set."""


class WorkerDiedError(ChuteError, RuntimeError):
    """A worker process ended without being asked to (killed, out of memory, crashed).

    Attributes:
        why: How a Ray worker died, in a few words (empty for a local worker: the
            message says it with the exit code).
        worker_exception: For a worker that could not start, the error that stopped
            it (None for a worker that died while it ran).
    """

    why: str = ""
    worker_exception: BaseException | None = None


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where an element comes from: its index in the source, and the file and record.

    Built only when an exception is annotated (``chute._stages._origin``).

    Attributes:
        index: The element's index in the source (the record key for a DataLoader).
        branch: Which input of a ``mix``/``concatenate`` it comes from, as
            ``"[1]"`` (``"[1][0]"`` for nested ones), or ``""``.
        file: The file that holds it, for file sources.
        record: Its record (or row) number within ``file``.
        offset: Its byte offset within ``file`` (TFRecord files).
        position: Its index in the MapDataset that ``to_iter_dataset`` reads,
            for a stage after ``to_iter_dataset``.
    """

    index: int | None = None
    branch: str = ""
    file: str | None = None
    record: int | None = None
    offset: int | None = None
    position: int | None = None

    def describe(self, element_index: int | None) -> str:
        """The note's words, e.g. ``source record 983: train-00001 record 17``."""
        parts = []
        if self.position is not None and self.position != element_index:
            parts.append(f"MapDataset index {self.position}")
        shown = {element_index, self.position}
        if self.index is not None and (self.index not in shown or self.branch or self.file):
            where = f" of input {self.branch}" if self.branch else ""
            parts.append(f"source record {self.index}{where}")
        text = ", ".join(parts)
        if self.file is not None:
            place = f"{self.file}" + (f" record {self.record}" if self.record is not None else "")
            place += f" at byte {self.offset}" if self.offset is not None else ""
            text = f"{text}: {place}" if text else place
        return text


def annotate(
    exc: BaseException, stage: str, index: int | None, origin: Origin | None = None
) -> None:
    """Adds a note naming the stage, element index and origin to a user exception.

    The element index is also kept as ``exc.chute_element_index`` (the first,
    innermost stage wins) so error budgets can record it; the origin as
    ``exc.chute_source_index``, ``chute_source_file``, ``chute_source_record``
    (and ``chute_source_offset``), where known.
    """
    if origin is None and index is None:
        origin = source_origin(exc)
    where = f"element index {index}" if index is not None else "an element"
    detail = origin.describe(index) if origin is not None else ""
    if detail:
        where += f" ({detail})"
    add_note(exc, f"chute: raised in stage {stage} while processing {where}.")
    if getattr(exc, "chute_element_index", None) is None:
        _set(exc, chute_element_index=index, chute_stage=stage)
    if origin is not None:
        mark_origin(exc, origin)


def mark_origin(exc: BaseException, origin: Origin) -> None:
    """Sets ``exc.chute_source_*`` from ``origin`` where not set yet (innermost wins)."""
    for name, value in (
        ("chute_source_index", origin.index),
        ("chute_source_file", origin.file),
        ("chute_source_record", origin.record),
        ("chute_source_offset", origin.offset),
    ):
        if value is not None and getattr(exc, name, None) is None:
            _set(exc, **{name: value})


def source_origin(exc: BaseException) -> Origin | None:
    """The origin a source's own error carries (``mark_origin`` by the source), if any."""
    if getattr(exc, "chute_source_file", None) is None:
        return None
    return Origin(
        index=getattr(exc, "chute_source_index", None),
        file=exc.chute_source_file,  # type: ignore[attr-defined]
        record=getattr(exc, "chute_source_record", None),
        offset=getattr(exc, "chute_source_offset", None),
    )


def _set(exc: BaseException, **attributes: object) -> None:
    for name, value in attributes.items():
        try:
            setattr(exc, name, value)
        except AttributeError:
            pass


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, on Python 3.10 too."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:  # pragma: no cover - Python 3.10
        notes = list(getattr(exc, "__notes__", []))
        notes.append(note)
        try:
            exc.__notes__ = notes  # type: ignore[attr-defined]
        except AttributeError:
            pass


def closed_error(what: str) -> IteratorClosedError:
    return IteratorClosedError(
        f"{what} was closed; create a new iterator with iter(dataset) "
        "(and restore it with set_state() to continue where you were)."
    )
