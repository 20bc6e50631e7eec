"""Checkpoints from any thread: the user's iterator takes its calls one at a time.

Training programs often save checkpoints from a background thread while the
training loop iterates.  ``get_state()`` called there while ``next()`` runs in
the loop would read positions half-way through an element.  So the iterator
that ``iter(dataset)`` hands to the user holds a lock that ``next()``,
``get_state()`` and ``set_state()`` each take: a state taken from any thread is
the position between two elements the loop received, and restores to the
element the loop receives next.  ``close()`` does not wait for it, so another
thread can still interrupt a ``next()`` that waits for data.

Only that outermost iterator pays for the lock (about 0.1 us per ``next()``): its
class is swapped for a subclass made once per class, as statistics swap theirs
(``chute._stats.instrument``); the iterators that stages build for their parents
are left as they are.  The lock is re-entrant, so a stage whose ``set_state``
reads its own state does not wait for itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from chute._core.registry import UNTIMED
from chute._core.state_check import CHECKS_FIRST

__all__ = ["guard"]

_TWIN = "_chute_guarded"  # on a class: its guarded subclass
_BASE = "_chute_guard_base"  # on a guarded subclass: the class it guards
_GUARDED = ("__next__", "_next_many", "get_state", "set_state")


def guard(it: Any) -> None:
    """Makes ``it`` take ``next()``, ``get_state()`` and ``set_state()`` one at a time.

    Raises:
        AttributeError: ``it`` has ``__slots__`` without room for the lock.
    """
    cls = type(it)
    if _BASE in cls.__dict__:  # guarded already
        return
    twin = cls.__dict__.get(_TWIN)
    if twin is None:
        twin = _guarded_class(cls)
        setattr(cls, _TWIN, twin)
    it._lock = threading.RLock()
    it.__class__ = twin


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    if method.__name__ in ("__next__", "get_state"):  # no argument: the fastest call

        def call(self: Any) -> Any:
            lock = self._lock
            lock.acquire()
            try:
                return method(self)
            finally:
                lock.release()

    else:

        def call(self: Any, arg: Any) -> Any:  # type: ignore[misc]
            lock = self._lock
            lock.acquire()
            try:
                return method(self, arg)
            finally:
                lock.release()

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]
    setattr(call, CHECKS_FIRST, True)  # ``method`` checks the state itself
    return call


def _guarded_class(cls: type) -> type:
    namespace: dict[str, Any] = {
        "__slots__": (),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        _BASE: cls,
        UNTIMED: cls.__dict__.get(UNTIMED, cls),
    }
    if "_chute_record" in cls.__dict__:  # a timed class: statistics look its record up there
        namespace["_chute_record"] = cls.__dict__["_chute_record"]
    for name in _GUARDED:
        method = getattr(cls, name, None)
        if method is not None:
            namespace[name] = _locked(method)
    return type(cls)(cls.__name__, (cls,), namespace)
