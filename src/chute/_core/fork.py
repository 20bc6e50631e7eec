"""``ForkCheck``: whether per-process state was made in this process or inherited by fork.

Open files, locks, thread pools, event loops and shared-memory names belong to the
process that made them.  A child forked from it inherits copies that it must not use
(a lock that one of the parent's threads held stays locked for ever, and the threads
themselves are gone) and must not close or unlink (the parent still uses them).  An
object keeps a ``ForkCheck`` beside such state, made with it: where ``forked()`` says
so, it makes the state again before using it, and it releases the state only where
``forked()`` is false.  An object unpickled in another process counts as forked too.

>>> check = ForkCheck()
>>> check.forked()
False
>>> check.pid = -1  # as a forked child sees its parent's check
>>> check.forked()
True
"""

from __future__ import annotations

import os

__all__ = ["ForkCheck"]


class ForkCheck:
    """Remembers the process it was made in.

    Attributes:
        pid: The id of that process.
    """

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()

    def forked(self) -> bool:
        """Whether this process is another than the one that made the check: a child
        forked from it (or one that unpickled it), whose copy of the state is not its own."""
        return self.pid != os.getpid()

    def __repr__(self) -> str:
        return f"ForkCheck(pid={self.pid})"
