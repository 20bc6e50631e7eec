"""Argument checks shared by the stages; messages say what came and what to do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _got(value: object) -> str:
    return f"got {value!r} that is a {type(value).__name__}"


def grain_first(grains: str, advice: str) -> str:
    """Returns Grain's sentence for an error, then chute's advice after ``chute:``.

    Code written for Grain that matches the start of its messages keeps working.

    >>> grain_first("batch_size must be positive.", "batch_size must be >= 1 (got 0).")
    'batch_size must be positive. chute: batch_size must be >= 1 (got 0).'
    >>> grain_first("Count must be a non-negative integer. Got 0", "give a count >= 1.")
    'Count must be a non-negative integer. Got 0. chute: give a count >= 1.'
    """
    joint = " " if grains.endswith((".", ":")) else ". "
    return f"{grains}{joint}chute: {advice}"


def check_int(
    value: object, what: str, *, minimum: int | None = None, grains: str | None = None
) -> int:
    """Returns ``value`` as an int, or raises: ``TypeError`` for a non-int, ``ValueError`` if low.

    Args:
        value: The argument to check.
        what: Where it was given and its name, e.g. ``"MapDataset.batch(): batch_size"``.
        minimum: The smallest value allowed, if any.
        grains: Grain's sentence for a value below ``minimum``, to start the message with.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int ({_got(value)}).")
    if minimum is not None and value < minimum:
        advice = f"{what} must be >= {minimum} (got {value})."
        raise ValueError(advice if grains is None else grain_first(grains, advice))
    return int(value)


def check_positive_int(value: object, what: str, *, grains: str | None = None) -> int:
    return check_int(value, what, minimum=1, grains=grains)


def check_callable(value: object, what: str) -> Callable[..., Any]:
    if not callable(value):
        raise TypeError(f"{what} must be callable ({_got(value)}).")
    return value
