"""How deep in nested ``iter()`` calls this thread is: the outermost iterator is the
user's, whose state carries the pipeline's fingerprint; iterators that stages build for
their parents, inside it, carry none."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["forget_nesting", "inner_iterator", "inner_iterators", "is_nested"]

_NESTING = threading.local()  # how deep in nested ``__iter__`` calls this thread is


def forget_nesting() -> None:
    """A forked worker process starts its own pipeline: its first ``iter()`` is outermost."""
    _NESTING.depth = 0


@contextlib.contextmanager
def inner_iterators() -> Iterator[None]:
    """Iterators built inside are parts of a larger whole: they carry no fingerprint."""
    depth = getattr(_NESTING, "depth", 0)
    _NESTING.depth = depth + 1
    try:
        yield
    finally:
        _NESTING.depth = depth


@contextlib.contextmanager
def inner_iterator(dataset: Iterable[Any]) -> Iterator[Any]:
    """An iterator of ``dataset`` built as a part of a larger whole (no fingerprint), to
    read or check a state against, closed on leaving."""
    with inner_iterators():
        it: Any = iter(dataset)
    try:
        yield it
    finally:
        it.close()


def is_nested() -> bool:
    """Whether an ``iter()`` of this thread is building this one."""
    return bool(getattr(_NESTING, "depth", 0))
