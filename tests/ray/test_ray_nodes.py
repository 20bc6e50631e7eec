"""RayExecutor on a cluster of several nodes (Ray's own test cluster, on this machine):
a node joins and another leaves mid-epoch, and the epoch keeps every element once, in order."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import chute as grain
from chute import MultiprocessingOptions, RayExecutor

ray = pytest.importorskip("ray")
# JAX, when an earlier test started it in this process, warns at every fork; Ray's test
# cluster starts its nodes' processes from here.
pytestmark = pytest.mark.filterwarnings(r"ignore:os.fork\(\) was called:RuntimeWarning")


@pytest.fixture(scope="module")
def cluster(two_node_cluster: Callable[..., Iterator[Any]]) -> Iterator[Any]:
    """A head without CPUs (the driver's) and two one-CPU nodes: one worker lands on each."""
    fast_failure_detection = {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 200,
        "health_check_failure_threshold": 3,
    }
    yield from two_node_cluster(1, fast_failure_detection)


def _slow_times_ten(x: int) -> int:
    time.sleep(0.005)
    return x * 10


def test_a_node_removed_mid_epoch_loses_nothing_and_the_log_names_it(
    cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ds = grain.MapDataset.range(1000).seed(1).shuffle().to_iter_dataset().map(_slow_times_ten)
    expected = list(ds)
    prefetched = ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor())
    with caplog.at_level(logging.WARNING, logger="chute"), iter(prefetched) as it:
        got = [next(it) for _ in range(40)]
        workers = it._parents  # type: ignore[attr-defined]
        nodes = {w.node for w in workers}
        assert len(nodes) == 2  # one worker on each one-CPU node
        old_node = workers[1].node
        leaving = next(n for n in cluster.worker_nodes if n.node_id[:8] in old_node)
        cluster.add_node(num_cpus=1)  # room for the worker that loses its node
        cluster.wait_for_nodes()
        cluster.remove_node(leaving, allow_graceful=False)  # with the worker on it
        got += list(it)
    assert got == expected
    deaths = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert deaths and f"Ray worker 1 of 2 on {old_node} died" in deaths[0]
    assert workers[1].node not in (old_node, workers[0].node)  # it came back on the new node


def test_a_checkpoint_moves_to_a_cluster_of_another_size_and_to_local_workers(
    cluster: Any,
) -> None:
    ds = grain.MapDataset.range(60).to_iter_dataset().map(_slow_times_ten)
    expected = list(ds)
    with iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor())) as it:
        head = [next(it) for _ in range(25)]
        state = it.get_state()
    one = ds.mp_prefetch(MultiprocessingOptions(1), executor=RayExecutor())
    with iter(one) as it:  # one worker now, as on a smaller cluster
        it.set_state(state)
        assert head + list(it) == expected
    with iter(ds.mp_prefetch(MultiprocessingOptions(3))) as it:
        it.set_state(state)
        assert head + list(it) == expected
