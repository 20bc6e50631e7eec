"""Stopping the workers when the process is told to terminate (SIGTERM).

Clusters stop a preempted job with SIGTERM, whose default action ends the
process at once: no ``finally``, no finalizers, so workers' shared memory
would be left for the resource tracker to reclaim with a warning.  When
chute starts workers and SIGTERM still has its default action, it installs
a handler that stops every worker and frees its shared memory, then restores
the default action and sends SIGTERM again: the process still dies by the
signal (exit status -15, or 143 in a shell), as it would have.

A handler the program installed itself is never replaced (chute installs
none then; such a program usually exits normally, and normal exit stops the
workers).  A handler installed after chute's replaces it; one that chains
to the previous handler reaches chute's, which ends the process as the
default action would.  Processes forked from this one treat SIGTERM in the
default way; chute's workers install their own handler, which stops the
worker at once and cleanly (``worker_loop``): that is how ``close()`` stops them.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from chute._core.fork import ForkCheck

__all__ = ["install", "on_terminate"]

_cleanups: dict[int, Callable[[], Any]] = {}
_owner = ForkCheck()
_stopping = False


def on_terminate(cleanup: Callable[[], Any]) -> None:
    """Runs ``cleanup`` (a ``weakref.finalize``, say) if SIGTERM ends this process.

    Cleanups that are ``weakref.finalize`` objects and have already run are
    dropped as new ones come.
    """
    for key in [k for k, c in _cleanups.items() if getattr(c, "alive", True) is False]:
        del _cleanups[key]
    _cleanups[id(cleanup)] = cleanup


def install() -> None:
    """Installs the handler, if SIGTERM has its default action and this is the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    if _owner.forked() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum: int, frame: Any) -> None:
    global _stopping
    if not _owner.forked() and not _stopping:
        _stopping = True
        for cleanup in list(_cleanups.values()):
            try:
                cleanup()
            except Exception:  # the process is ending: free what can be freed
                pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _forget_in_child() -> None:
    """A forked child gets SIGTERM's default action back, and no cleanups of its parent's."""
    global _owner
    _owner = ForkCheck()
    _cleanups.clear()
    if signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
