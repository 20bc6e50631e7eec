"""What a failed request's exception says, for the retry policy and the credential check.

obstore prints its structured Rust error after ``Debug source:`` (``rust_error``);
chute and obstore raise their errors from the failures under them (``causes``).

>>> try:
...     try:
...         raise ConnectionRefusedError("refused")
...     except OSError as exc:
...         raise RuntimeError("GET failed") from exc
... except RuntimeError as exc:
...     [type(e).__name__ for e in causes(exc)]
['RuntimeError', 'ConnectionRefusedError']
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["causes", "rust_error"]

_DEPTH = 8  # exceptions of a chain looked at, at most


def rust_error(exc: BaseException) -> str:
    """The structured Rust error an obstore exception prints, or ``""``."""
    if not type(exc).__module__.startswith("obstore"):
        return ""
    return str(exc).partition("\nDebug source:\n")[2]


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then each exception it was raised from (``__cause__``), at most 8."""
    found: BaseException | None = exc
    for _ in range(_DEPTH):
        if found is None:
            return
        yield found
        found = found.__cause__
