"""A Ray cluster for the Ray tests: one per test module, on this machine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """A local two-CPU Ray cluster, shut down after the module's tests."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def two_node_cluster() -> Callable[..., Iterator[Any]]:
    """Starts two-node clusters for the modules' ``cluster`` fixtures (see ``_two_nodes``)."""
    return _two_nodes


def _two_nodes(num_cpus: int, system_config: dict[str, Any] | None = None) -> Iterator[Any]:
    """A head without CPUs (the driver's) and two nodes of ``num_cpus`` CPUs each, joined by
    this process, for a module fixture to yield; shut down when it resumes."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    head: dict[str, Any] = {"num_cpus": 0}
    if system_config is not None:
        head["_system_config"] = system_config
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(num_cpus=num_cpus)
    cluster.add_node(num_cpus=num_cpus)
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()
