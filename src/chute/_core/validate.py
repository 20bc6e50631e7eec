"""Argument checks shared by the stages; messages say what came and what to do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _got(value: object) -> str:
    return f"got {value!r} that is a {type(value).__name__}"


def check_int(value: object, what: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int ({_got(value)}).")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be >= {minimum} (got {value}).")
    return int(value)


def check_positive_int(value: object, what: str) -> int:
    return check_int(value, what, minimum=1)


def check_callable(value: object, what: str) -> Callable[..., Any]:
    if not callable(value):
        raise TypeError(f"{what} must be callable ({_got(value)}).")
    return value
