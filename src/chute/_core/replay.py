"""Replaying a stage's pulls on restore, passing over only those that failed before.

Stages that hold elements across ``next()`` calls (``batch``, the window
shuffle, packing, the cache) checkpoint the pulls they made from their parent
rather than the elements: the parent's state before the first pull, how many
pulls were made and which of them raised (``"failed"``).  A restore makes the
same pulls again to rebuild the same buffer.  A pull that raised when the
checkpointed run made it was reported then, so the replay passes over it,
whatever it does now; an error at any other pull was never reported, so the
replay raises it: a transient error while restoring must not drop an element.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator
from typing import Any, TypeVar

from chute._core.errors import CheckpointError, add_note

T = TypeVar("T")

logger = logging.getLogger("chute")


def failed_pulls(state: Any, stage: str) -> set[int] | None:
    """The ``"failed"`` pull numbers of a state; None for a state saved without them.

    States saved before chute recorded failed pulls restore as they did then:
    every error during the replay is taken as one reported by the run that
    saved them (and logged).
    """
    failed = state.get("failed")
    if failed is None:
        return None
    if not isinstance(failed, list) or not all(type(k) is int and k >= 0 for k in failed):
        raise CheckpointError(
            f"{stage}.set_state(): 'failed' must be a list of pull numbers (ints >= 0), "
            f"got {failed!r:.80}; pass the dict get_state() returned."
        )
    return set(failed)


def replay_pulls(
    pull: Callable[[], T], count: int, failed: Collection[int] | None, stage: str
) -> Iterator[T]:
    """Makes ``count`` pulls again; yields what those that did not fail then give now.

    Args:
        pull: Makes one pull (``next(parent)``, maybe with parsing).
        count: How many pulls the checkpointed run made.
        failed: Which of them (0 to ``count - 1``) raised in that run; they are
            made again and passed over.  None: not recorded (an older state).
        stage: The stage's name, for messages.

    Raises:
        CheckpointError: The parent ended before ``count`` pulls.
        Exception: A pull not in ``failed`` raised: the error, with a note.
    """
    for k in range(count):
        try:
            value = pull()
        except StopIteration:
            raise CheckpointError(
                f"{stage}: the parent ended while replaying the pulls recorded in the "
                "checkpoint: the pipeline or its data differ from the ones that saved it."
            ) from None
        except Exception as exc:
            if failed is None:  # an older state: taken as an error the saving run reported
                logger.warning(
                    "%s: passing over an error at pull %d of %d while restoring a state that "
                    "does not record which pulls failed (saved by an older chute): %r",
                    stage, k + 1, count, exc,
                )  # fmt: skip
                continue
            if k in failed:
                continue
            add_note(
                exc,
                f"{stage}: raised while restoring a checkpoint, at pull {k + 1} of the {count} "
                "it replays, which did not fail in the run that saved the checkpoint; the "
                "restore stops here rather than lose that element. Call set_state() again "
                "once the cause is fixed.",
            )
            raise
        if failed is None or k not in failed:
            yield value
