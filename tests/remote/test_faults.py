"""Transient failures (told by type and status) are retried and counted; a spent budget
raises, naming the URL; a store that never answers times out, naming what to raise."""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable
from typing import Any

import pytest

from chute._remote import RetryBudgetExceeded, RetryPolicy, open_source
from chute._remote.retry import is_timeout, is_transient

FAST = RetryPolicy(attempts=10, deadline=30, base_delay=0.001, max_delay=0.01)
ONE_RETRY = RetryPolicy(attempts=1, base_delay=0.001, max_delay=0.001)


@pytest.mark.parametrize("faults", [(503,), (500, 503, "reset", "cut")], ids=["503", "mixed"])
def test_reads_survive_injected_faults_with_identical_bytes(s3, faults) -> None:
    data = os.urandom(1 << 20)
    url = s3.put("flaky.bin", data)
    source = open_source(url, retry=FAST, max_in_flight=8)
    source.coalesce = 0
    s3.proxy.configure(fault_rate=0.3, faults=faults, seed=7, methods=("GET", "HEAD"))
    ranges = [(i * 20_000, 5_000 + i) for i in range(40)]
    for _ in range(3):
        assert source.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
    assert s3.proxy.injected > 0
    assert source.retries == s3.proxy.injected


def test_open_retries_a_failing_head(s3) -> None:
    url = s3.put("head.bin", b"abc")
    s3.proxy.configure(fault_rate=0.5, faults=(503,), methods=("HEAD",), seed=3)
    source = open_source(url, retry=FAST)
    assert source.read_all() == b"abc"
    assert source.retries == s3.proxy.injected


def test_spent_retry_budget_names_the_url_and_last_failure(s3) -> None:
    url = s3.put("down.bin", b"x" * 1000)
    source = open_source(url, retry=RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.001))
    s3.proxy.configure(fault_rate=1.0, faults=(503,))
    with pytest.raises(RetryBudgetExceeded) as info:
        source.read_ranges([(0, 10)])
    message = str(info.value)
    assert url in message and "after 4 tries" in message and "503" in message
    assert source.retries == 3 and s3.proxy.requests == 4


def test_deadline_bounds_the_retries(s3) -> None:
    url = s3.put("slow.bin", b"x" * 1000)
    policy = RetryPolicy(attempts=1000, deadline=0.0, base_delay=0.001)
    source = open_source(url, retry=policy)
    s3.proxy.configure(fault_rate=1.0, faults=("reset",))
    with pytest.raises(RetryBudgetExceeded, match="after 1 tries"):
        source.read_ranges([(0, 10)])
    assert source.retries == 0


def test_retry_policy_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="attempts must be an int >= 0"):
        RetryPolicy(attempts=-1)
    with pytest.raises(ValueError, match="deadline must be a number >= 0"):
        RetryPolicy(deadline=-1.0)


def _error_of(call: Callable[[], object]) -> Exception:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("the call did not fail")


def _bare_store(endpoint: str, bucket: str = "b", timeout: float = 30.0) -> Any:
    """An obstore store that does not retry, so its first failure is the one raised."""
    from obstore.store import S3Store

    config = {"endpoint": endpoint, "region": "us-east-1", "access_key_id": "test",
              "secret_access_key": "test"}  # fmt: skip
    return S3Store(
        bucket,
        config=config,
        client_options={"allow_http": True, "timeout": datetime.timedelta(seconds=timeout)},
        retry_config={"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=60)},
    )


@pytest.mark.parametrize(
    "fault, transient",
    [(503, True), (500, True), (429, True), ("reset", True), ("cut", True),
     (400, False), (403, False), (404, False)],
)  # fmt: skip
def test_obstore_failures_are_told_by_their_status_and_kind(s3, fault, transient) -> None:
    import obstore

    s3.put("k.bin", b"x" * 100_000)
    store = _bare_store(s3.proxy.url, s3.bucket)
    s3.proxy.configure(fault_rate=1.0, faults=(fault,))
    exc = _error_of(lambda: bytes(obstore.get(store, "k.bin").bytes()))
    assert is_transient(exc) is transient, exc
    assert not is_timeout(exc)


def test_a_silent_store_times_out_and_a_refused_connection_is_transient(silent) -> None:
    import obstore

    exc = _error_of(lambda: obstore.head(_bare_store(silent.url, timeout=0.2), "k"))
    assert is_transient(exc) and is_timeout(exc), exc
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    exc = _error_of(lambda: obstore.head(_bare_store(refused), "k"))
    assert is_transient(exc) and not is_timeout(exc), exc


def test_the_words_of_a_message_do_not_decide() -> None:
    from obstore.exceptions import GenericError

    worded = "Generic S3 error: HTTP error: error sending request: connection timed out"
    assert not is_transient(GenericError(worded))  # neither a status nor a kind
    built = (
        "Generic HTTP error: HTTP error: builder error\n\nDebug source:\nGeneric {\n"
        "    source: HttpError {\n        kind: Unknown,\n    },\n}"
    )
    assert not is_transient(GenericError(built))
    assert is_transient(GenericError(built.replace("Unknown", "Interrupted")))
    assert not is_transient(OSError("connection reset: the network went away"))
    try:
        raise ConnectionResetError(104, "reset")
    except ConnectionResetError as cause:
        wrapped = OSError("the read failed")
        wrapped.__cause__ = cause
    assert is_transient(wrapped)  # what it was raised from decides
    assert not is_transient(RetryBudgetExceeded("spent"))


def test_the_http_stacks_errors_are_told_by_type_and_status() -> None:
    aiohttp = pytest.importorskip("aiohttp")
    requests = pytest.importorskip("requests")
    gcsfs_retry = pytest.importorskip("gcsfs.retry")
    assert is_transient(aiohttp.ClientPayloadError("Response payload is not completed"))
    assert is_transient(aiohttp.ServerDisconnectedError())
    assert is_transient(aiohttp.ClientResponseError(None, (), status=503))  # type: ignore[arg-type]
    assert not is_transient(aiohttp.ClientResponseError(None, (), status=404))  # type: ignore[arg-type]
    assert is_transient(requests.exceptions.ChunkedEncodingError())
    assert not is_transient(requests.exceptions.SSLError())
    assert is_transient(gcsfs_retry.HttpError({"code": 503, "message": "backend error"}))
    assert not is_transient(gcsfs_retry.HttpError({"code": 401, "message": "login"}))


def test_a_body_cut_off_mid_stream_is_retried(s3) -> None:
    data = os.urandom(1 << 20)
    url = s3.put("cut.bin", data)
    source = open_source(url, retry=FAST, max_in_flight=4)
    source.coalesce = 0
    s3.proxy.configure(fault_rate=0.4, faults=("cut",), seed=3)
    ranges = [(i * 50_000, 20_000) for i in range(20)]
    assert source.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
    assert s3.proxy.injected > 0 and source.retries == s3.proxy.injected


def test_a_store_that_never_answers_times_out_naming_the_url_and_the_option(
    silent, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chute

    monkeypatch.setenv("AWS_ENDPOINT_URL", silent.url)
    for name, value in (("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    chute.config.update("remote_request_timeout_s", 0.3)
    try:
        source = open_source("s3://bucket/silent.bin", known=(1000, '"etag"'), retry=ONE_RETRY)
        with pytest.raises(RetryBudgetExceeded) as info:
            source.read_ranges([(0, 10)])
    finally:
        chute.config.update("remote_request_timeout_s", 30.0)
    message = str(info.value)
    assert "GET s3://bucket/silent.bin bytes 0-10 failed after 2 tries" in message
    assert "did not answer within the request timeout" in message
    assert "remote_request_timeout_s" in message and "CHUTE_REMOTE_REQUEST_TIMEOUT_S" in message


def _closed_port_url() -> str:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{closed.getsockname()[1]}"


def _no_credentials(monkeypatch: pytest.MonkeyPatch, metadata: str) -> None:
    """An environment without AWS credentials, whose instance-metadata server is
    ``metadata`` (a machine outside AWS: nothing answers there)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", metadata)


def test_missing_credentials_say_what_to_set_without_retrying(
    s3, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chute
    from chute._core import metrics
    from chute._remote import list_prefix

    url = s3.put("k.bin", b"abc")
    _no_credentials(monkeypatch, _closed_port_url())
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.proxy.url)
    before = metrics.snapshot()["remote_retries"]
    for call in (lambda: open_source(url), lambda: list_prefix(url)):
        with pytest.raises(chute.CredentialsNotFoundError) as info:
            call()
        message = str(info.value)
        assert url in message and "no credentials found for S3" in message
        assert "AWS_ACCESS_KEY_ID" in message and "AWS_SECRET_ACCESS_KEY" in message
        assert isinstance(info.value, (chute.ObjectStoreError, PermissionError))
    assert metrics.snapshot()["remote_retries"] == before
    assert s3.proxy.requests == 0  # the store itself was never asked


def test_a_refused_connection_names_the_endpoint_to_check(monkeypatch: pytest.MonkeyPatch) -> None:
    import chute

    refused = _closed_port_url()
    monkeypatch.setenv("AWS_ENDPOINT_URL", refused)
    for name, value in (("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with pytest.raises(chute.ObjectStoreError) as info:
        open_source("s3://bucket/k.bin", retry=ONE_RETRY)
    message = str(info.value)
    assert "HEAD s3://bucket/k.bin failed after 2 tries" in message
    assert f"connection was refused: check the endpoint (AWS_ENDPOINT_URL={refused})" in message


_METADATA_DENIED = """Generic {store} error: Error performing token request: ...

Debug source:
Generic {{
    store: "{store}",
    source: TokenRequest {{
        source: RetryError(
            RetryErrorImpl {{
                method: GET,
                uri: Some(
                    http://169.254.169.254{path},
                ),
                retries: 0,
                inner: Status {{
                    status: {status},
                    body: None,
                }},
            }},
        ),
    }},
}}"""


@pytest.mark.parametrize(
    ("store", "path", "variable"),
    [
        ("GCS", "/computeMetadata/v1/instance/service-accounts/default/token",
         "GOOGLE_APPLICATION_CREDENTIALS"),
        ("MicrosoftAzure", "/metadata/identity/oauth2/token?api-version=2019-08-01",
         "AZURE_STORAGE_ACCOUNT_KEY"),
        ("S3", "/latest/api/token", "AWS_SECRET_ACCESS_KEY"),
    ],
)  # fmt: skip
def test_each_stores_failed_credential_lookup_says_what_to_set(
    store: str, path: str, variable: str
) -> None:
    """obstore's errors as they read when the metadata server is denied (403) or throttled."""
    from obstore.exceptions import GenericError

    import chute
    from chute._remote.credentials import missing_credentials

    denied = GenericError(_METADATA_DENIED.format(store=store, path=path, status=403))
    found = missing_credentials(denied, "GET x://b/k")
    assert isinstance(found, chute.CredentialsNotFoundError), denied
    assert f"GET x://b/k: no credentials found for {store}" in str(found)
    assert variable in str(found)
    throttled = GenericError(_METADATA_DENIED.format(store=store, path=path, status=503))
    assert missing_credentials(throttled, "GET x://b/k") is None  # on the cloud: retried
    elsewhere = GenericError(_METADATA_DENIED.format(store=store, path="/b/k", status=403))
    assert missing_credentials(elsewhere, "GET x://b/k") is None  # the store's own 403


def test_a_failed_first_read_at_open_counts_as_the_retry_it_is(s3) -> None:
    # An index opens with one GET of its first bytes; when that fails, a HEAD asks again.
    url = s3.put("index.bin", b"0123456789" * 100)
    s3.proxy.configure(fault_rate=1.0, faults=(503,), methods=("GET",), max_in_a_row=1)
    source = open_source(url, first=64)
    assert source.size() == 1000 and s3.proxy.injected == 1
    assert source.retries == 1
    assert source.read_ranges([(0, 10)]) == [b"0123456789"]
