"""Exceptions raised in a worker process, as the parent shows them.

The worker pickles the exception (notes included; its traceback cannot
travel; a class of the script's ``__main__`` by name, so that the parent's
``except`` catches it) and formats two tracebacks: the full one, and a short one that keeps
only the frames of the user's code (chute's own frames and the thread and
process machinery left out; the innermost frame when none is the user's),
without repeating the message and without the copy of the exception that a
retried read leaves in its context.  The parent re-raises the same
exception with the short traceback in a note naming the worker, or the
full one when ``CHUTE_FULL_TRACEBACKS=1`` is set in the parent.

>>> def fails():
...     raise KeyError("missing")
>>> try:
...     fails()
... except KeyError as exc:
...     error = rebuild(report(exc), worker=1, count=2)
>>> error
KeyError('missing')
>>> note = error.__notes__[-1].splitlines()
>>> note[0].startswith("chute: raised in worker process 1 of 2."), note[-1].strip()
(True, 'raise KeyError("missing")')
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import sys
import threading
import traceback
from typing import Any

import cloudpickle

from chute._core.errors import WorkerDiedError, add_note
from chute._core.pipeline_walk import parents_of

FULL_ENV = "CHUTE_FULL_TRACEBACKS"

_CHUTE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INTERNAL = (
    _CHUTE_DIR,
    os.path.dirname(os.path.abspath(multiprocessing.__file__)) + os.sep,
    os.path.join(os.path.dirname(os.path.abspath(threading.__file__)), "concurrent") + os.sep,
    os.path.abspath(threading.__file__),
    "<frozen ",
)

Report = tuple[bytes | None, str, str]


def report(exc: BaseException) -> Report:
    """(the pickled exception or None if it cannot be pickled, full traceback, short one)."""
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickled: bytes | None = _dumps(exc)
    except Exception:
        pickled = None
    return pickled, full, short_traceback(exc)


class _MainByName(cloudpickle.Pickler):
    """cloudpickle, but a class of the ``__main__`` that a forked worker shares with its
    parent goes by name, so the parent's ``except MyError:`` catches it (by value, the
    parent would build a look-alike class).  A worker started otherwise has no such class
    in its ``__main__``: cloudpickle sends the class back to the parent that sent it."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and _in_main(obj):
            return NotImplemented  # pickle's own way for a class: its module and name
        return super().reducer_override(obj)


def _in_main(cls: type) -> bool:
    """Whether ``cls`` is reached by its name in this process's ``__main__``."""
    if cls.__module__ != "__main__":
        return False
    found: Any = sys.modules.get("__main__")
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is cls


def _dumps(exc: BaseException) -> bytes:
    buffer = io.BytesIO()
    _MainByName(buffer).dump(exc)
    return buffer.getvalue()


def rebuild(value: Report, worker: int, count: int, node: str | None = None) -> BaseException:
    """The worker's exception, with a note naming the worker (and the node of a Ray
    worker) and holding its traceback."""
    pickled, full, _ = value
    exc: BaseException
    try:
        exc = cloudpickle.loads(pickled) if pickled is not None else RuntimeError(full)
    except Exception:
        exc = RuntimeError(full)
    add_note(exc, traceback_note(value, worker, count, node))
    return exc


# Restarts of one worker without an element delivered in between, before its death is raised.
MAX_RESTARTS = 3


def warn_restart(who: str, how: str, restarts: int) -> None:
    """Logs that worker ``who`` died (``how``) and starts again from its last element."""
    logging.getLogger("chute").warning(
        "chute: %s died (%s); restarting it from the last element it delivered "
        "(restart %d of at most %d in a row).",
        who,
        how,
        restarts,
        MAX_RESTARTS,
    )


def could_not_start(
    report: Report, worker: int, count: int, who: str, needs: str, node: str | None = None
) -> BaseException:
    """``WorkerDiedError`` for worker ``who`` that could not start, with its error in the notes
    and as ``worker_exception``; ``needs`` says what a worker's pipeline must be."""
    exc = rebuild(report, worker, count, node)
    error = WorkerDiedError(
        f"{who} could not start: {type(exc).__name__}: {exc}. Everything the pipeline uses "
        f"must be {needs} (see the notes)."
    )
    for note in getattr(exc, "__notes__", []):
        add_note(error, note)
    error.worker_exception = exc
    return error


def traceback_note(value: Report, worker: int, count: int, node: str | None = None) -> str:
    """The note naming the worker, with its short (or full, if asked for) traceback."""
    where = (
        f"chute: raised in worker process {worker} of {count}."
        if node is None
        else f"chute: raised in Ray worker {worker} of {count} on {node}."
    )
    if os.environ.get(FULL_ENV, "") not in ("", "0"):
        return f"{where} The worker's full traceback:\n{value[1]}"
    return (
        f"{where} Traceback (most recent call last), chute's frames left out "
        f"({FULL_ENV}=1 shows all):\n{value[2]}"
    )


def short_traceback(exc: BaseException) -> str:
    """The user's frames of ``exc`` and of the distinct exceptions it was raised from."""
    lines, shown = _user_frames(exc), [exc]
    seen, current = {id(exc)}, _chained(exc)
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if not any(_repeats(current, earlier) for earlier in shown):
            lines.append(f"  raised while handling {type(current).__name__}: {current}\n")
            lines += _user_frames(current)
            shown.append(current)
        current = _chained(current)
    return "".join(lines).rstrip("\n")


def _chained(exc: BaseException) -> BaseException | None:
    if exc.__cause__ is not None:
        return exc.__cause__
    return None if exc.__suppress_context__ else exc.__context__


def _repeats(chained: BaseException, shown: BaseException) -> bool:
    """Whether ``chained`` says nothing new: a copy of ``shown`` (a read retried element
    by element raises the error again), or an error whose message ``shown`` quotes."""
    text = str(chained)
    if type(chained) is type(shown) and text == str(shown):
        return True
    return bool(text) and text in str(shown)


def _user_frames(exc: BaseException) -> list[str]:
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if not _internal(f.filename)]
    return traceback.format_list(mine or frames[-1:])


def module_frames(exc: BaseException) -> list[str]:
    """Files of the user's modules whose top-level code was running when ``exc`` was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [f.filename for f in frames if f.name == "<module>" and not _internal(f.filename)]


def _internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL)


def explain_import(exc: BaseException) -> None:
    """Adds a note when the worker failed while importing one of the user's modules."""
    modules = module_frames(exc)
    if not modules:
        return
    add_note(
        exc,
        f"chute: the worker was importing {modules[-1]} when this was raised. Workers "
        "started by the fork server import the modules that the pipeline's functions "
        "are defined in (never the script you ran), so those modules' top-level code "
        'runs in every worker: move it into a function or under if __name__ == "__main__":.',
    )


__all__ = ["FULL_ENV", "explain_import", "rebuild", "report", "short_traceback"]


def unpicklable_element(element: Any, exc: BaseException, iterator: Any) -> TypeError:
    """The error that takes the place of an element a worker cannot send to the parent."""
    path, leaf = _first_unpicklable(element)
    where = f" at {path}" if path else ""
    stage = getattr(iterator, "_label", "") or iterator._stage_name()
    read = _first_label(getattr(iterator, "_ds", None))  # the MapDataset to_iter_dataset reads
    stage += f" (reading {read})" if read else ""
    return TypeError(
        f"chute: an element made by stage {stage} cannot be sent from the worker process to "
        f"yours: it holds a {type(leaf).__name__}{where}, which cannot be pickled ({exc}). "
        "Return plain data (arrays, numbers, strings, lists, dicts) from the pipeline, and "
        "keep objects such as locks, files or connections inside the functions that use them."
    )


def _first_unpicklable(element: Any, path: str = "") -> tuple[str, Any]:
    """The path to the first leaf of ``element`` that cannot be pickled, and that leaf."""
    if isinstance(element, dict):
        items: Any = element.items()
    elif isinstance(element, (list, tuple)):
        items = enumerate(element)
    else:
        return path, element
    for key, value in items:
        try:
            cloudpickle.dumps(value)
        except Exception:
            return _first_unpicklable(value, f"{path}[{key!r}]")
    return path, element


def _first_label(ds: Any) -> str:
    """The label (``map(decode)``) of the last labelled stage of a chain of MapDatasets."""
    while ds is not None:
        if getattr(ds, "_label", ""):
            return str(ds._label)
        parents = parents_of(ds)
        ds = parents[0] if len(parents) == 1 else None
    return ""
