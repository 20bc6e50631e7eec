"""Virtual shards on Ray workers: a checkpoint moves between local hosts and workers and
Ray actors on a cluster of two nodes (Ray's own test cluster, on this machine), and a
killed actor resumes its shards exactly once.

One cluster serves the module (Ray starts slowly): a head without CPUs (the driver's)
and two nodes of two CPUs, so three one-CPU workers span both nodes.  The checker
(``chute.testing.assert_resumes_exactly``) runs each host of a local topology in a
process of its own, and the hosts of a Ray topology here, one after another, with
their workers as Ray actors.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute as grain
from chute import MultiprocessingOptions, RayExecutor, ShardOptions, WorkerDiedError
from chute.experimental import merge_states, virtual_shards
from chute.testing import ResumeReport, Topology, assert_resumes_exactly

ray = pytest.importorskip("ray")
# JAX, when an earlier test started it in this process, warns at every fork; Ray's test
# cluster starts its nodes' processes from here.
pytestmark = [
    pytest.mark.usefixtures("cluster"),
    pytest.mark.filterwarnings(r"ignore:os.fork\(\) was called:RuntimeWarning"),
]

#: The number of virtual shards: 1, 2 and 4 hosts divide it.
V = 8


@pytest.fixture(scope="module")
def cluster(two_node_cluster: Callable[..., Iterator[Any]]) -> Iterator[Any]:
    """A head without CPUs and two nodes of two CPUs each, for the module's tests."""
    yield from two_node_cluster(2)


def _not_a_multiple_of_3(x: int) -> bool:
    return x % 3 != 0


def _tokens(x: int) -> dict[str, np.ndarray]:
    return {"tokens": np.arange(x, x + 1 + x % 5, dtype=np.int32)}


def _filter_batch(shard: ShardOptions, fn: Callable[[int], int] | None = None) -> Any:
    """Shard ``shard``'s pipeline: its slice, shuffled, filtered, batched by 3."""
    ds = grain.MapDataset.range(200)[shard.shard_index :: shard.shard_count]
    ds = ds.seed(7).shuffle().to_iter_dataset()
    if fn is not None:
        ds = ds.map(fn)
    return ds.filter(_not_a_multiple_of_3).batch(3)


def _packed(shard: ShardOptions) -> Any:
    """Shard ``shard``'s pipeline: variable-length token runs packed first-fit into 12."""
    ds = grain.MapDataset.range(120)[shard.shard_index :: shard.shard_count]
    ds = ds.seed(3).shuffle().to_iter_dataset().map(_tokens)
    return grain.experimental.FirstFitPackIterDataset(
        ds, length_struct={"tokens": 12}, num_packing_bins=2
    )


def _long(shard: ShardOptions) -> Any:
    """Shard ``shard``'s pipeline: 800 numbers shuffled and filtered, no batches."""
    ds = grain.MapDataset.range(6400)[shard.shard_index :: shard.shard_count]
    return ds.seed(5).shuffle().to_iter_dataset().filter(_not_a_multiple_of_3)


def _filter_batch_pipeline() -> Any:
    return virtual_shards(_filter_batch, V)


def _packed_pipeline() -> Any:
    return virtual_shards(_packed, V)


PIPELINES = {"filter_batch": _filter_batch_pipeline, "packing": _packed_pipeline}


def _moves(report: ResumeReport) -> set[tuple[bool, bool]]:
    """``(from Ray, to Ray)`` of each resume in ``report``."""
    on_ray = [" on Ray" in topology for topology, _ in report.parts]
    return set(itertools.pairwise(on_ray))


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_state_saved_on_local_hosts_resumes_on_ray_workers_and_back(name: str) -> None:
    report = assert_resumes_exactly(
        PIPELINES[name],
        topologies=[Topology(2, 2), Topology(1, 3, executor=RayExecutor())],
        resumes=3,
        seed=4,  # its draws move both ways, for both pipelines (checked below)
    )
    assert {(False, True), (True, False)} <= _moves(report), report.parts


def test_a_state_saved_on_ray_workers_resumes_on_hosts_without_workers() -> None:
    report = assert_resumes_exactly(
        _filter_batch_pipeline,
        topologies=[Topology(2, 1, executor=RayExecutor()), Topology(1, 0), Topology(4, 0)],
        resumes=3,
        seed=0,  # draws 1x0, then Ray, 4x0, 1x0
    )
    assert {(False, True), (True, False)} <= _moves(report), report.parts


def _host_run(ds: Any, host: int, hosts: int, state: Any, steps: int | None) -> Any:
    """Host ``host`` of ``hosts`` (in this process): its elements with their origins, and
    its state after ``steps`` of them (None: to the end)."""
    got = []
    with iter(ds.on_host(ShardOptions(host, hosts))) as it:
        if state is not None:
            it.set_state(state)
        while steps is None or len(got) < steps:
            try:
                element = next(it)
            except StopIteration:
                break
            got.append((it.last_origin, element))
        return got, it.get_state()


def _in_order(*hosts: list[tuple[Any, Any]]) -> list[Any]:
    """The hosts' elements in the global order: by ``(n, shard)`` of their origins."""
    pairs = sorted((p for host in hosts for p in host), key=lambda p: (p[0][1], p[0][0]))
    return [element for _, element in pairs]


def _same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b), f"{len(a)} elements, the uninterrupted run has {len(b)}"
    for x, y in zip(a, b):
        np.testing.assert_equal(x, y)


def test_ray_workers_on_both_nodes_go_on_from_two_hosts_states() -> None:
    ds = _filter_batch_pipeline()
    expected = list(ds)
    parts = [_host_run(ds, h, 2, None, 4) for h in range(2)]
    state = merge_states([s for _, s in parts])
    on_ray = ds.mp_prefetch(MultiprocessingOptions(3), executor=RayExecutor())
    with iter(on_ray) as it:
        it.set_state(state)
        rest = list(it)
        nodes = {w.node for w in it.workers}  # type: ignore[attr-defined]
        it.set_state(state)  # into the live actors again, moved in place
        _same(list(it), rest)
    assert len(nodes) == 2  # two one-CPU workers fit one node: the third went to the other
    _same(_in_order(*(got for got, _ in parts)) + rest, expected)


def _killed_once_at(marker: str, victim: int, x: int) -> int:
    if x == victim and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_a_killed_ray_worker_resumes_its_shards_exactly_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    expected = list(_filter_batch_pipeline())
    victim = int(grain.MapDataset.range(200)[3::V].seed(7).shuffle()[6])  # worker 0 has shard 3
    kill = functools.partial(_killed_once_at, str(tmp_path / "killed"), victim)
    ds = virtual_shards(functools.partial(_filter_batch, fn=kill), V)
    on_ray = ds.mp_prefetch(MultiprocessingOptions(3), executor=RayExecutor(restart_workers=True))
    with caplog.at_level(logging.WARNING, logger="chute"), iter(on_ray) as it:
        head = [next(it) for _ in range(len(expected) // 2)]
        state = it.get_state()
    (message,) = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert "Ray worker 0 of 3 on " in message and "restarting it" in message
    with iter(ds.mp_prefetch(MultiprocessingOptions(2))) as it:
        it.set_state(state)  # and the state after the restart moves to local workers
        _same(head + list(it), expected)


def test_without_restarts_a_killed_ray_worker_raises_and_its_state_resumes_exactly_once(
    tmp_path: Path,
) -> None:
    expected = list(_filter_batch_pipeline())
    victim = int(grain.MapDataset.range(200)[3::V].seed(7).shuffle()[6])  # worker 0 has shard 3
    kill = functools.partial(_killed_once_at, str(tmp_path / "killed"), victim)
    ds = virtual_shards(functools.partial(_filter_batch, fn=kill), V)
    executor = RayExecutor(restart_workers=False)
    got: list[Any] = []
    with iter(ds.mp_prefetch(MultiprocessingOptions(3), executor=executor)) as it:
        with pytest.raises(WorkerDiedError, match="Ray worker 0 of 3 .* Restore the last state"):
            got.extend(it)
        state = it.get_state()
    assert 0 < len(got) < len(expected)
    hosts = [_host_run(ds, h, 2, state, None)[0] for h in range(2)]  # on two hosts, no workers
    _same(got + _in_order(*hosts), expected)


def test_ray_kill_of_an_actor_mid_run_loses_no_element_of_its_shards(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ds = virtual_shards(_long, V)
    expected = list(ds)
    on_ray = ds.mp_prefetch(MultiprocessingOptions(3), executor=RayExecutor(restart_workers=True))
    with caplog.at_level(logging.WARNING, logger="chute"), iter(on_ray) as it:
        got = [next(it) for _ in range(7)]
        # Worker 1 runs shards 1, 4 and 7 (~1600 elements); it was asked for at most
        # 1 + 3 x 256 (two calls read, two in flight), so the kill lands mid-run.
        ray.kill(it.workers[1]._actor)  # type: ignore[attr-defined]
        got += list(it)
    _same(got, expected)
    (message,) = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert "Ray worker 1 of 3 on " in message and "restarting it" in message
