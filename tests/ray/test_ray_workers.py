"""RayExecutor on a local Ray cluster: local workers' elements, order and checkpoints."""

from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute as grain
from chute import MultiprocessingOptions, RayExecutor, WorkerDiedError

pytestmark = [
    pytest.mark.usefixtures("local_ray"),
    # JAX, when an earlier test started it in this process, warns at every fork.
    pytest.mark.filterwarnings(r"ignore:os.fork\(\) was called:RuntimeWarning"),
]


def _chute_actors_alive() -> list[Any]:
    import ray

    actors = ray._private.state.actors().values()  # the control store's actor table
    return [a for a in actors if a["ActorClassName"] == "RayWorker" and a["State"] == "ALIVE"]


def _none_alive_soon(timeout: float = 15.0) -> list[Any]:
    """The chute actors still alive once Ray's control store has caught up with the kills
    (``ray.kill`` is asynchronous; the table lags it under load), polled up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while (alive := _chute_actors_alive()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _times_ten(x: int) -> int:
    return x * 10


def _even(x: int) -> bool:
    return x % 2 == 0


def _image(x: int) -> dict[str, Any]:
    return {"pixels": np.full((16, 16, 3), x % 256, np.uint8), "label": x}


def _noisy(x: int, rng: np.random.Generator) -> float:
    return x + float(rng.random())


def _pipelines() -> dict[str, grain.IterDataset]:
    source = grain.MapDataset.range(60).seed(5).shuffle().to_iter_dataset()
    return {
        "map": source.map(_times_ten),
        "filter_batch": source.filter(_even).batch(4),
        "arrays": source.map(_image).batch(5),
        "random_map": source.random_map(_noisy),
    }


def _both(ds: grain.IterDataset, workers: int = 2, **kw: Any) -> tuple[Any, Any]:
    options = MultiprocessingOptions(num_workers=workers, **kw)
    return ds.mp_prefetch(options), ds.mp_prefetch(options, executor=RayExecutor())


def _same(a: Any, b: Any) -> None:
    np.testing.assert_equal(a, b)


@pytest.mark.parametrize("name", sorted(_pipelines()))
def test_ray_workers_yield_what_local_workers_yield_in_order(name: str) -> None:
    local, on_ray = _both(_pipelines()[name])
    _same(list(on_ray), list(local))


def test_packing_after_the_ray_workers_matches_local_workers() -> None:
    def lengths(x: int) -> dict[str, np.ndarray]:
        return {"tokens": np.arange(1 + x % 7, dtype=np.int32)}

    ds = grain.MapDataset.range(40).to_iter_dataset().map(lengths)
    local, on_ray = _both(ds)
    pack = functools.partial(grain.experimental.FirstFitPackIterDataset, num_packing_bins=3,
                             length_struct={"tokens": 12})  # fmt: skip
    _same(list(pack(on_ray)), list(pack(local)))


def test_a_checkpoint_at_every_position_restores_across_ray_and_local_workers() -> None:
    ds = _pipelines()["filter_batch"]
    local, on_ray = _both(ds)
    expected = list(local)
    with iter(on_ray) as ray_it, iter(local) as local_it:
        states = []
        for _ in range(len(expected) + 1):
            states.append(ray_it.get_state())
            next(ray_it, None)
        for k, state in enumerate(states):
            local_it.set_state(state)  # Ray's state into local workers
            _same(list(local_it), expected[k:])
            ray_it.set_state(state)  # and into the live actors, moved in place
            _same(list(ray_it), expected[k:])
        local_it.set_state(states[0])
        for _ in range(3):
            next(local_it)
        ray_it.set_state(local_it.get_state())  # a local state into the actors
        _same(list(ray_it), expected[3:])


def test_a_ray_checkpoint_restores_into_another_worker_count() -> None:
    ds = _pipelines()["map"]
    expected = list(ds)
    with iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor())) as it:
        head = [next(it) for _ in range(7)]
        state = it.get_state()
    three = ds.mp_prefetch(MultiprocessingOptions(3))
    with iter(three) as it:
        it.set_state(state)
        assert head + list(it) == expected
    one_on_ray = ds.mp_prefetch(MultiprocessingOptions(1), executor=RayExecutor())
    with iter(one_on_ray) as it:
        it.set_state(state)
        assert head + list(it) == expected


def test_the_data_loader_on_ray_matches_local_workers_and_its_checkpoints_cross() -> None:
    def loader(executor: RayExecutor | None) -> grain.DataLoader:
        return grain.DataLoader(
            data_source=grain.RangeDataSource(0, 50, 1),
            sampler=grain.IndexSampler(50, grain.NoSharding(), shuffle=True, num_epochs=1, seed=3),
            operations=[grain.transforms.Map(_times_ten), grain.transforms.Batch(4)],
            worker_count=2,
            executor=executor,
        )

    expected = [b.tolist() for b in loader(None)]
    it = iter(loader(RayExecutor()))
    head = [next(it).tolist() for _ in range(5)]
    state = it.get_state()
    assert head + [b.tolist() for b in it] == expected
    local = iter(loader(None))
    local.set_state(state)
    assert head + [b.tolist() for b in local] == expected
    it.close()


def _fails_on(bad: int, x: int) -> int:
    if x == bad:
        raise ValueError(f"element {x} is bad")
    return x


def test_an_error_in_the_users_code_arrives_as_itself_and_next_goes_on() -> None:
    ds = grain.MapDataset.range(10).to_iter_dataset().map(functools.partial(_fails_on, 4))
    with iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor())) as it:
        got = [next(it) for _ in range(4)]
        with pytest.raises(ValueError, match="element 4 is bad") as raised:
            next(it)
        got += list(it)
    assert got == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "worker" in notes and "_fails_on" in notes


def _killed_once_at(marker: str, victim: int, x: int) -> int:
    if x == victim and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_a_killed_actor_restarts_and_the_epoch_keeps_every_element_once_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fn = functools.partial(_killed_once_at, str(tmp_path / "killed"), 13)
    ds = grain.MapDataset.range(30).to_iter_dataset().map(fn)
    with caplog.at_level(logging.WARNING, logger="chute"):
        got = list(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor()))
    assert got == list(range(30))
    (message,) = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert "Ray worker 1 of 2 on " in message and "restarting it" in message


def test_ray_kill_of_an_actor_mid_epoch_loses_nothing() -> None:
    import ray

    ds = grain.MapDataset.range(40).to_iter_dataset().map(_times_ten)
    with iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor())) as it:
        got = [next(it) for _ in range(9)]
        ray.kill(it._parents[0]._actor)  # type: ignore[attr-defined]
        got += list(it)
    assert got == [x * 10 for x in range(40)]


def _always_killed(starts: str, x: int) -> int:
    if x == 0:  # each start of the worker dies at its first element: one line a start
        with open(starts, "a") as f:
            f.write("started\n")
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_deaths_without_progress_raise_worker_died_naming_the_node(tmp_path: Path) -> None:
    from chute._execution.worker_errors import MAX_RESTARTS

    starts = tmp_path / "starts"
    fn = functools.partial(_always_killed, str(starts))
    ds = grain.MapDataset.range(10).to_iter_dataset().map(fn)
    it = iter(ds.mp_prefetch(MultiprocessingOptions(1), executor=RayExecutor()))
    with it, pytest.raises(WorkerDiedError, match=r"Ray worker 0 of 1 on .+ died"):
        next(it)
    # The README and RayExecutor's docstring: three restarts in a row, the fourth death raises.
    assert MAX_RESTARTS == 3 and starts.read_text().count("started") == 1 + MAX_RESTARTS


def test_a_closed_iterator_frees_its_actors_before_the_next_one_asks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from chute._execution import ray_iterator

    ds = grain.MapDataset.range(20).to_iter_dataset().map(_times_ten)
    options = MultiprocessingOptions(2)  # two workers of 1 CPU: all the cluster's CPUs
    with caplog.at_level(logging.WARNING, logger="chute"):
        for _ in range(2):
            with iter(ds.mp_prefetch(options, executor=RayExecutor())) as it:
                assert list(it) == [x * 10 for x in range(20)]
                pids = [a["Pid"] for a in _chute_actors_alive()]
            assert len(pids) == 2
            # Gone when close() returns, their CPUs back, not some time after (ray.kill's way).
            assert not [pid for pid in pids if ray_iterator._running(pid)]
    assert not [r for r in caplog.records if "has waited" in r.getMessage()]


CHUTES_OWN_CLUSTER = """
import chute as grain

ds = grain.MapDataset.range(8).to_iter_dataset()
on_ray = ds.mp_prefetch(grain.MultiprocessingOptions(1), executor=grain.RayExecutor())
print(list(on_ray))
"""


def test_the_local_cluster_chute_starts_prints_no_token_notice(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CHUTES_OWN_CLUSTER)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="ray") as ray_dir:  # a short socket path
        env["RAY_TMPDIR"] = ray_dir  # a cluster of its own, not this process's
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=110, env=env
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(list(range(8)))
    assert "Token authentication" not in done.stderr, done.stderr


def test_without_restarts_a_killed_actor_raises_worker_died(tmp_path: Path) -> None:
    fn = functools.partial(_killed_once_at, str(tmp_path / "killed"), 2)
    ds = grain.MapDataset.range(10).to_iter_dataset().map(fn)
    executor = RayExecutor(restart_workers=False)
    got: list[int] = []
    with iter(ds.mp_prefetch(MultiprocessingOptions(1), executor=executor)) as it:
        with pytest.raises(WorkerDiedError, match="Restore the last state"):
            got.extend(it)  # what the dead call made is lost, and made again below
        state = it.get_state()
    with iter(ds.mp_prefetch(MultiprocessingOptions(1), executor=executor)) as it:
        it.set_state(state)
        assert got + list(it) == list(range(10))


def _lose_the_first_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray may fail the calls of an actor that died even where they had finished (their
    replies lost): the first reply of every worker now goes that way."""
    from chute._execution.ray_iterator import RayWorkerIterator

    def lost(self: RayWorkerIterator) -> None:
        if self._started is not None:
            raise self._died("ActorDiedError: lost reply")

    monkeypatch.setattr(RayWorkerIterator, "_wait_started", lost)


def test_a_worker_whose_first_reply_was_lost_still_has_its_start_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chute._execution.ray_iterator import RayWorkerIterator

    ds = grain.MapDataset.range(10).to_iter_dataset().map(_times_ten)
    executor = RayExecutor(restart_workers=False)
    worker = functools.partial(RayWorkerIterator, ds, executor=executor, index=0, count=1, seed=0)
    with worker() as it:
        fresh = it.get_state()
        assert [next(it) for _ in range(3)] == [0, 10, 20]
        saved = it.get_state()
    assert saved != fresh
    _lose_the_first_reply(monkeypatch)
    with worker() as it:
        assert it.get_state() == fresh  # the start of the share, made in this process
    with worker(state=saved) as it:
        assert it.get_state() == saved  # where it was launched


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("cannot pickle a connection")


def test_a_pipeline_that_cannot_reach_its_actor_says_what_cannot_be_pickled() -> None:
    lock = _Unpicklable()
    ds = grain.MapDataset.range(4).to_iter_dataset().map(lambda x: (x, lock))
    with pytest.raises(TypeError, match="cannot pickle") as raised:
        iter(ds.mp_prefetch(MultiprocessingOptions(1), executor=RayExecutor()))
    assert "Ray worker 0" in "\n".join(raised.value.__notes__)


def _fails_to_start(index: int, count: int) -> None:
    raise RuntimeError(f"no GPU on worker {index}")


def test_a_worker_that_cannot_start_raises_worker_died_with_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ds = grain.MapDataset.range(4).to_iter_dataset()
    prefetched = ds.mp_prefetch(
        MultiprocessingOptions(1), worker_init_fn=_fails_to_start, executor=RayExecutor()
    )
    with (
        caplog.at_level(logging.WARNING, logger="chute"),
        pytest.raises(WorkerDiedError, match="could not start: RuntimeError: no GPU on worker 0"),
    ):
        list(prefetched)
    assert not [r for r in caplog.records if "restarting" in r.getMessage()]  # it would fail again


def test_close_and_garbage_collection_leave_no_actor_running() -> None:
    ds = grain.MapDataset.range(100).to_iter_dataset().map(_times_ten)
    prefetched = ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor())
    it = iter(prefetched)
    next(it)
    it.get_state()  # both workers have started
    assert len(_chute_actors_alive()) == 2
    it.close()
    assert _none_alive_soon() == []
    it = iter(prefetched)
    next(it)
    del it
    gc.collect()
    assert _none_alive_soon() == []


def test_a_restore_the_actor_refuses_raises_and_leaves_the_position_alone() -> None:
    ds = grain.MapDataset.range(20).to_iter_dataset().map(_times_ten)
    with iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor())) as it:
        assert [next(it) for _ in range(5)] == [0, 10, 20, 30, 40]
        bad = it.get_state()
        bad = {**bad, "workers": [bad["workers"][0], {**bad["workers"][1], "stage": "filter"}]}
        with pytest.raises(grain.CheckpointError, match="filter"):
            it.set_state(bad)
        assert list(it) == [x * 10 for x in range(5, 20)]


def test_execution_summary_shows_the_ray_workers_stages() -> None:
    ds = grain.MapDataset.range(30).to_iter_dataset().map(_times_ten)
    before = grain.config.py_debug_mode
    grain.config.update("py_debug_mode", True)
    try:
        it = iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor()))
        list(it)
        summary = grain.experimental.execution_summary(it)
    finally:
        grain.config.update("py_debug_mode", before)
    it.close()
    print(summary)
    assert "map" in str(summary) and "ray" in str(summary).lower()


def _counted(x: int) -> int:
    from chute._core import metrics

    metrics.count("cache_bytes_read", x)  # as a source read through the cache counts
    return x


def test_the_actors_metrics_reach_the_driver_summed_once_each() -> None:
    from chute._core import metrics

    before = metrics.snapshot()["cache_bytes_read"]
    ds = grain.MapDataset.range(100).to_iter_dataset().map(_counted)
    got = list(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor()))
    assert sorted(got) == list(range(100))
    assert metrics.snapshot()["cache_bytes_read"] - before == sum(range(100))


def test_bad_executors_are_refused_clearly() -> None:
    ds = grain.MapDataset.range(4).to_iter_dataset()
    with pytest.raises(TypeError, match="executor must be None .* or a chute.RayExecutor"):
        ds.mp_prefetch(MultiprocessingOptions(1), executor="ray")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="resources_per_worker"):
        RayExecutor(resources_per_worker={"CPU": -1})
    with pytest.raises(TypeError, match="address"):
        RayExecutor(address=6379)  # type: ignore[arg-type]


def test_auto_worker_count_on_ray_fits_the_clusters_cpus() -> None:
    ds = grain.MapDataset.range(10).to_iter_dataset()
    prefetched = ds.mp_prefetch(MultiprocessingOptions("auto"), executor=RayExecutor())
    with iter(prefetched) as it:
        assert list(it) == list(range(10))
        assert len(it.get_state()["workers"]) == 2  # the local cluster has two CPUs


def test_ray_shut_down_mid_epoch_raises_worker_died_at_once_and_starts_nothing() -> None:
    import ray

    ds = grain.MapDataset.range(1000).to_iter_dataset().map(_times_ten)
    it = iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=RayExecutor()))
    next(it)
    ray.shutdown()
    try:
        with pytest.raises(WorkerDiedError, match="connection to the Ray cluster was closed"):
            for _ in range(1000):
                next(it)
        assert not ray.is_initialized()  # no new local cluster was started behind your back
    finally:
        it.close()
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)


def test_more_workers_than_the_cluster_holds_wait_and_the_log_says_why(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from chute._execution import ray_iterator

    monkeypatch.setattr(ray_iterator, "_WAIT_SLICE_S", 0.5)
    ds = grain.MapDataset.range(12).to_iter_dataset().map(_times_ten)
    executor = RayExecutor(resources_per_worker={"CPU": 2})  # the cluster has 2 CPUs: one at once
    with caplog.at_level(logging.WARNING, logger="chute"):
        it = iter(ds.mp_prefetch(MultiprocessingOptions(2), executor=executor))
        got: list[int] = []
        raised: list[BaseException] = []

        def read_two() -> None:  # whichever worker Ray placed second never gets its turn
            try:
                for _ in range(2):
                    got.append(next(it))
            except Exception as exc:
                raised.append(exc)

        waiting = threading.Thread(target=read_two)
        waiting.start()
        for _ in range(300):
            if any("has waited" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.1)
        it.close()  # stops the waiting worker too
        waiting.join(timeout=30)
    assert not waiting.is_alive()
    assert [type(e) for e in raised] == [grain.IteratorClosedError]
    # Ray may place either actor first; worker 0 placed gives element 0, then worker 1 waits.
    (message,) = [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]
    waited = 1 if got == [0] else 0
    assert got in ([0], [])
    assert f"Ray worker {waited} of 2" in message and "'CPU': 2" in message


def test_a_worker_that_cannot_read_its_source_names_the_node_and_the_path(
    tmp_path: Path,
) -> None:
    from chute.experimental import write_array_record

    paths = write_array_record([b"%d" % i for i in range(20)], tmp_path / "data", num_shards=2)
    source = grain.ArrayRecordDataSource([str(p) for p in paths])
    ds = grain.MapDataset.source(source).to_iter_dataset()
    os.remove(paths[1])  # gone from this node after the pipeline was built
    with iter(ds.mp_prefetch(MultiprocessingOptions(1), executor=RayExecutor())) as it:
        got = [next(it) for _ in range(10)]
        with pytest.raises(grain.SourceChangedError) as raised:  # it was there when opened
            next(it)
    assert sorted(got, key=int) == [b"%d" % i for i in range(0, 20, 2)]  # the first shard
    text = str(raised.value) + "\n".join(getattr(raised.value, "__notes__", []))
    assert str(paths[1]) in text and "Ray worker 0 of 1 on " in text


def test_arrays_arrive_without_a_copy_from_the_object_store() -> None:
    ds = grain.MapDataset.range(8).to_iter_dataset().map(_image).batch(4)
    with iter(ds.mp_prefetch(MultiprocessingOptions(1), executor=RayExecutor())) as it:
        batch = next(it)
    # 4 x 768 B is small: Ray inlines it. A large array is a read-only view of the store.
    big = grain.MapDataset.range(2).to_iter_dataset().map(lambda x: np.full((512, 1024), x))
    with iter(big.mp_prefetch(MultiprocessingOptions(1), executor=RayExecutor())) as it:
        array = next(it)
    assert batch["pixels"].shape == (4, 16, 16, 3)
    assert not array.flags.owndata and not array.flags.writeable
    assert array[0, 0] == 0


_STOPPED_BY_SIGTERM = """
import sys, time
import ray
import chute as grain
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
ds = grain.MapDataset.range(10**6).to_iter_dataset().map(lambda x: x)
it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(2), executor=grain.RayExecutor()))
next(it)
it.get_state()
print("running", flush=True)
time.sleep(600)
"""


def test_sigterm_stops_the_actors_and_leaves_a_joined_cluster_running(tmp_path: Path) -> None:
    import subprocess
    import sys

    import ray

    script = tmp_path / "job.py"
    script.write_text(_STOPPED_BY_SIGTERM)
    address = ray.get_runtime_context().gcs_address
    job = subprocess.Popen(
        [sys.executable, str(script), address], stdout=subprocess.PIPE, text=True
    )
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "running"
        assert len(_chute_actors_alive()) == 2
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=60)  # ended by the signal, whoever handles it
    finally:
        job.kill()
        job.wait()
        job.stdout.close()  # type: ignore[union-attr]
    for _ in range(100):
        if not _chute_actors_alive():
            break
        time.sleep(0.1)
    assert _chute_actors_alive() == []
    assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2.0  # still running


_PROFILED = """
import chute as grain


def build():
    ds = grain.MapDataset.range(400).to_iter_dataset().map(lambda x: x * 2).batch(8)
    return ds.mp_prefetch(grain.MultiprocessingOptions(2), executor=grain.RayExecutor())
"""


def test_chute_profile_shows_the_ray_workers_and_their_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chute.cli import main

    (tmp_path / "ray_pipeline.py").write_text(_PROFILED)
    status = main(["profile", f"{tmp_path / 'ray_pipeline.py'}:build", "--elements", "20",
                   "--no-suggest"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0
    assert "mp_prefetch(2 Ray workers)" in out and "map(<lambda>)" in out
    assert "Ray workers on " in out and "object store" in out


def _mebibyte(x: int) -> np.ndarray:
    return np.full((1024, 1024), x % 256, np.uint8)  # not inlined: it goes to the store


def test_a_worker_holds_at_most_its_buffer_plus_two_calls_in_the_object_store() -> None:
    # The README's bound: per_worker_buffer_size + 1 calls in flight, and the call whose
    # elements are being handed out (its arrays are read in place, so it stays pinned).
    readme = (Path(__file__).parent.parent.parent / "README.md").read_text()
    assert "`per_worker_buffer_size + 2` calls a worker in the store" in readme
    ds = grain.MapDataset.range(48).to_iter_dataset().map(_mebibyte)
    options = MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    most = [0, 0]
    with iter(ds.mp_prefetch(options, executor=RayExecutor())) as it:
        workers = it._parents
        for n, element in enumerate(it):
            assert int(element[0, 0]) == n
            for w, worker in enumerate(workers):
                requested, reading = len(worker._in_flight), 1 if worker._received else 0
                assert requested <= options.per_worker_buffer_size + 1
                most[w] = max(most[w], requested + reading)
    assert most == [options.per_worker_buffer_size + 2] * 2
