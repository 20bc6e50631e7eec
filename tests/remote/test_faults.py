"""Transient failures are retried and counted; a spent budget raises, naming the URL."""

from __future__ import annotations

import os

import pytest

from chute._remote import RetryBudgetExceeded, RetryPolicy, open_source

FAST = RetryPolicy(attempts=10, deadline=30, base_delay=0.001, max_delay=0.01)


@pytest.mark.parametrize("faults", [(503,), (500, 503, "reset")], ids=["503", "mixed"])
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


def test_a_request_the_client_cannot_build_is_not_retried() -> None:
    from chute._remote.retry import is_transient

    class GenericError(Exception):
        pass

    built = "Generic HTTP error: Error performing HEAD http://h/k - HTTP error: builder error"
    assert not is_transient(GenericError(built))
    assert is_transient(GenericError("Generic HTTP error: error sending request for url"))
