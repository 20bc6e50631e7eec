"""Which failures of an object store are worth retrying, and how long to wait between tries.

Transient failures are HTTP 429/500/502/503/504 answers, timeouts, refused, dropped or reset
connections and answers cut off mid-body; they are retried with exponential backoff and
full jitter (a delay drawn uniformly from ``[0, min(max_delay, base_delay * 2**attempt)]``),
at most ``attempts`` times per request and never past ``deadline`` seconds from the first
try.  Everything else (403, 404, a changed object, a request the client cannot build)
raises at once, and so does a credential lookup that found none
(``chute._remote.credentials``): it raises ``chute.CredentialsNotFoundError``, which says
what to set.  A request that keeps failing raises ``chute.ObjectStoreError``
(``RetryBudgetExceeded`` here); when its last failure was a refused connection, it says to
check the endpoint.

A failure is told by its type and its status code, never by the words of its message:

* Python's own types: ``ConnectionError`` (refused, reset, aborted), ``TimeoutError``,
  ``http.client.IncompleteRead`` are transient; ``FileNotFoundError``,
  ``PermissionError``, ``IsADirectoryError``, ``NotADirectoryError`` are not.
* A status code, from the exception's ``status``, ``code`` or ``status_code`` (aiohttp,
  gcsfs's ``HttpError``), or its ``response`` (requests, botocore).
* obstore's errors carry no attribute but the structured form of the Rust error
  (``Debug source:``): its ``status`` field, or the ``kind`` of its ``HttpError``, which
  is transient for ``Connect``, ``Request``, ``Timeout`` and ``Interrupted`` (the kinds
  object_store itself retries) and not for ``Decode`` or ``Unknown``.
* The transport errors of the HTTP stacks fsspec's filesystems use, when imported:
  aiohttp's ``ClientConnectionError`` and ``ClientPayloadError``, requests',
  urllib3's and botocore's connection, timeout and body errors.
* Otherwise the exception it was raised from (``raise ... from``) decides.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import random
import re
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from chute._core.errors import ObjectStoreError
from chute._remote import credentials
from chute._remote.obstore_errors import causes, rust_error

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
TRANSIENT_KINDS = frozenset({"Connect", "Request", "Timeout", "Interrupted"})
_PERMANENT = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    ssl.SSLCertVerificationError,
)
_TRANSIENT = (ConnectionError, TimeoutError, http.client.IncompleteRead)
# The connection, timeout and body errors of the HTTP stacks under fsspec's filesystems,
# and the ones among them that no retry cures (a certificate that does not verify).
_TRANSPORT_ERRORS: dict[str, tuple[str, ...]] = {
    "aiohttp": ("ClientConnectionError", "ClientPayloadError"),
    "requests.exceptions": ("ConnectionError", "Timeout", "ChunkedEncodingError"),
    "urllib3.exceptions": ("ProtocolError", "TimeoutError"),
    "botocore.exceptions": ("ConnectionError", "ReadTimeoutError", "ResponseStreamingError"),
}
_TRANSPORT_PERMANENT: dict[str, tuple[str, ...]] = {
    "aiohttp": ("ClientConnectorCertificateError", "ClientSSLError"),
    "requests.exceptions": ("SSLError", "InvalidURL"),
}
# Fields of the Rust error that obstore prints after "Debug source:".
_RUST_STATUS = re.compile(r"\b(?:Status|Client|Server) \{\s*status: (\d{3})\b")
_RUST_KIND = re.compile(r"\bHttpError \{\s*kind: (\w+)")


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


# A request failed transiently more often, or for longer, than its policy allows: raised
# as the public ``chute.ObjectStoreError`` (this name stays for the code that knew it).
RetryBudgetExceeded = ObjectStoreError


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception reports: an attribute, its response's, or obstore's field."""
    for holder in (exc, getattr(exc, "response", None)):
        for value in _status_fields(holder):
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
                return value
    found = _RUST_STATUS.search(rust_error(exc))
    return int(found.group(1)) if found else None


def _status_fields(holder: Any) -> Iterator[Any]:
    if isinstance(holder, dict):  # botocore's ClientError.response
        yield (holder.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return
    for name in ("status", "code", "status_code"):
        yield getattr(holder, name, None)  # one at a time: aiohttp warns when "code" is read


def http_kind(exc: BaseException) -> str | None:
    """The ``kind`` of the ``HttpError`` inside an obstore error (``"Timeout"``, ...)."""
    found = _RUST_KIND.search(rust_error(exc))
    return found.group(1) if found else None


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure that a retry may cure (see the module docstring)."""
    for failure in causes(exc):  # the exception and the ones it was raised from
        if isinstance(failure, (*_PERMANENT, RetryBudgetExceeded, *_loaded(_TRANSPORT_PERMANENT))):
            return False
        status = status_of(failure)
        if status is not None:
            return status in TRANSIENT_STATUS
        if isinstance(failure, (*_TRANSIENT, *_loaded(_TRANSPORT_ERRORS))):
            return True
        kind = http_kind(failure)
        if kind is not None:
            return kind in TRANSIENT_KINDS
    return False


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a request that got no answer in time."""
    return isinstance(exc, TimeoutError) or http_kind(exc) == "Timeout"


def _loaded(types: dict[str, tuple[str, ...]]) -> tuple[type[BaseException], ...]:
    """The error types named in ``types`` of the modules imported so far (a module not
    imported raised none of its errors)."""
    found: list[Any] = []
    for module_name, names in types.items():
        module = sys.modules.get(module_name)
        if module is not None:
            found += [getattr(module, name) for name in names if hasattr(module, name)]
    return tuple(t for t in found if isinstance(t, type) and issubclass(t, BaseException))


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
            missing = credentials.missing_credentials(exc, describe())
            if missing is not None:
                raise missing from exc
            if not is_transient(exc):
                raise
            elapsed = time.monotonic() - start
            if retry >= policy.attempts or elapsed >= policy.deadline:
                raise RetryBudgetExceeded(
                    f"{describe()} failed after {retry + 1} tries in {elapsed:.1f} s "
                    f"(at most {policy.attempts} retries within {policy.deadline:g} s); "
                    f"last failure: {_last_failure(exc)}{_refused_hint(exc, describe())}"
                ) from exc
            on_retry(exc)
            rng = rng or random.Random()
            wait = min(policy.delay(retry, rng), max(0.0, policy.deadline - elapsed))
            retry += 1
            await asyncio.sleep(wait)


def _refused_hint(exc: BaseException, what: str) -> str:
    if not credentials.is_refused(exc):
        return ""
    url = what.split()[1] if len(what.split()) > 1 else what
    return f". The connection was refused: {credentials.endpoint_hint(url)}"


def _last_failure(exc: BaseException) -> str:
    first_line = f"{type(exc).__name__}: " + str(exc).split("\n", 1)[0]
    if not is_timeout(exc):
        return first_line
    from chute._core.config import config

    return (
        f"the store did not answer within the request timeout ({first_line}). chute's "
        f"stores wait {float(config.remote_request_timeout_s):g} s: raise it with "
        "chute.config.update('remote_request_timeout_s', seconds) or "
        "CHUTE_REMOTE_REQUEST_TIMEOUT_S=seconds (a store passed as filesystem= keeps the "
        "timeout of its own client_options)."
    )
