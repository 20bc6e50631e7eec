"""Shared fixtures for chute's tests."""

from __future__ import annotations

import pytest

from chute import ReadOptions
from chute._execution import processes

# Every way to_iter_dataset can run: inline, and on threads.
READ_MODES = {
    "inline": ReadOptions(num_threads=0, prefetch_buffer_size=0),
    "threads": ReadOptions(num_threads=4, prefetch_buffer_size=16, autotune=False),
    "tuned": ReadOptions(num_threads=4, prefetch_buffer_size=16),
}


@pytest.fixture(params=sorted(READ_MODES))
def read_options(request: pytest.FixtureRequest) -> ReadOptions:
    """Read options for each execution mode; tests that care take this fixture."""
    return READ_MODES[request.param]


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_to_workers(request: pytest.FixtureRequest) -> None:
    """Worker processes import functions by module name, and test modules are not
    importable there; cloudpickle sends their functions and classes by value instead."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that fork worker processes from this one run first, while no other test has
    left this process unsafe to fork (array_record's reader starts native threads that a
    forked child crashes in; servers and clients leave threads running). The remote tests
    run late, then the Ray tests (Ray's client threads stay), and the accelerator tests
    last: they start JAX's runtime in this process."""

    def rank(item: pytest.Item) -> int:
        if item.nodeid.startswith("tests/accel/"):
            return 4
        if item.nodeid.startswith("tests/ray/"):
            return 3
        if item.nodeid.startswith("tests/remote/"):
            return 2
        forks = getattr(item, "callspec", None) and item.callspec.params.get("start_method")
        return 0 if forks == "fork" or item.get_closest_marker("forks") else 1

    items.sort(key=rank)


@pytest.fixture(params=["fork", "forkserver"])
def start_method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Worker processes started each way: forked from this process, and by the fork server."""
    reason = processes.fork_unsafe_reason()
    if request.param == "fork" and reason is not None:
        pytest.skip(f"this test process cannot fork its workers safely: {reason}")
    monkeypatch.setenv(processes.START_ENV, request.param)
    return str(request.param)
