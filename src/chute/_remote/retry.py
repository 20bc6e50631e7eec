"""Which failures of an object store are worth retrying, and how long to wait between tries.

Transient failures are HTTP 429/500/502/503/504 answers, timeouts and dropped or reset
connections; they are retried with exponential backoff and full jitter (a delay drawn
uniformly from ``[0, min(max_delay, base_delay * 2**attempt)]``), at most ``attempts``
times per request and never past ``deadline`` seconds from the first try.  Everything
else (403, 404, a changed object, a bad request) raises at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_STATUS = re.compile(r"status code: (\d{3})|\b(?:status|code)[=: ]+(\d{3})\b")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a remote source retries transient failures.

    Attributes:
        attempts: Retries per request after the first try (0 turns retrying off).
        deadline: Seconds from a request's first try after which no retry starts.
        base_delay: The backoff's first ceiling, in seconds; it doubles per retry.
        max_delay: The largest ceiling of one wait, in seconds.
    """

    attempts: int = 5
    deadline: float = 60.0
    base_delay: float = 0.1
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 0:
            raise ValueError(f"attempts must be an int >= 0 (got {self.attempts!r}).")
        for name in ("deadline", "base_delay", "max_delay"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0 (got {value!r}).")

    def delay(self, retry: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.max_delay, self.base_delay * 2**retry))


class RetryBudgetExceeded(OSError):
    """A request failed transiently more often, or for longer, than its policy allows."""


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception reports, from its attributes or its message."""
    for name in ("status", "code", "status_code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    match = _STATUS.search(str(exc).split("\n", 1)[0])
    if match:
        return int(match.group(1) or match.group(2))
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure that a retry may cure."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return True
    name = type(exc).__name__
    text = str(exc).split("\n", 1)[0].lower()
    if name in ("ClientError", "ServerDisconnectedError", "ClientPayloadError"):
        return True  # aiohttp's transport errors, as fsspec's filesystems raise them
    if "builder error" in text:  # the client could not even build the request: a setup fault
        return False
    return name == "GenericError" and any(
        word in text for word in ("http error", "sending request", "timed out", "connection")
    )


async def with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    on_retry: Callable[[BaseException], None],
    describe: Callable[[], str],
) -> T:
    """Awaits ``call()``, retrying transient failures as ``policy`` allows.

    ``on_retry`` is told of every failure that is retried; when the budget is spent the
    call raises ``RetryBudgetExceeded`` naming ``describe()`` and the last failure.
    """
    rng: random.Random | None = None  # made on the first failure: seeding costs
    start = time.monotonic()
    retry = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            elapsed = time.monotonic() - start
            if retry >= policy.attempts or elapsed >= policy.deadline:
                first_line = str(exc).split("\n", 1)[0]
                raise RetryBudgetExceeded(
                    f"{describe()} failed after {retry + 1} tries in {elapsed:.1f} s "
                    f"(at most {policy.attempts} retries within {policy.deadline:g} s); "
                    f"last failure: {type(exc).__name__}: {first_line}"
                ) from exc
            on_retry(exc)
            rng = rng or random.Random()
            wait = min(policy.delay(retry, rng), max(0.0, policy.deadline - elapsed))
            retry += 1
            await asyncio.sleep(wait)
