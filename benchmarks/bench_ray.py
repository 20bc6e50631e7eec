"""chute's workers on Ray against chute's local workers, Ray Data, and the limit.

    bash benchmarks/run ray

On one local Ray cluster of 2 CPUs (this machine's cores), side by side in one run:

* ``cpu``: ``range(N).map(work).to_iter_dataset().batch(32)``, ``work`` about 1 ms of
  pure Python (``bench_workers``' calibrated function);
* ``images``: ``range(N).map(image).to_iter_dataset().batch(32)``, ``image(i)`` a seeded
  random 224x224x3 uint8 image (``bench_workers``' images workload).

Each with chute's local workers (``mp_prefetch``, 2 workers), chute on Ray
(``executor=RayExecutor()``, 2 workers), Ray Data written as its docs show
(``ray.data.range(N).map(fn).iter_batches(batch_size=32)``, 2 CPUs), and the limit
(2 bare forked processes doing only the work), and the limit of Ray actors (2 bare actors
that make the same batches and return them, the consumer taking them in turn).  Then:

* the time to the first batch, chute on Ray against Ray Data, and what Ray alone takes to
  start an empty actor and answer a call (the least a Ray worker's first element costs);
* what each guarantees, tested here: the same order in two runs, an exact mid-epoch
  resume, a resume into another worker count, a killed worker losing nothing;
* the consumer's cost: CPU seconds this process spends per batch received from Ray
  workers (tiny batches and image batches) over an epoch, and the wall and CPU seconds
  per batch when the batches are ready (the workers filled their room first); from the
  latter, the most batches per second one training process can take in, i.e. how many
  workers it can absorb.  (Over an epoch, Ray's own threads in this process use CPU while
  the loop waits, so that figure overstates the cost of a batch.)
"""

# bench-requires: ray[data]>=2.40 pandas

from __future__ import annotations

import functools
import os
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

import common
import runners
from common import Impl, Ratio
from workers.cpu import calibrate, work
from workers.harness import BATCH, WORKERS, image_hashes
from workers.images import image

TARGETS = {
    "cpu chute on ray/chute local": 0.7,
    "images chute on ray/chute local": 0.7,
    "cpu chute on ray/ray data": 2.0,
    "images chute on ray/ray data": 2.0,
}
CPU_N = 8192  # 256 batches: about 4 s with 2 local workers
IMAGES_N = 8192  # 256 batches of 32 x 224x224x3 uint8 (1.2 GB an epoch)
FIRST_BATCH_TARGET = 0.2  # chute on Ray's time to the first batch / Ray Data's, at most


def _chute_pipeline(chute: Any, fn: Any, n: int, executor: Any) -> Any:
    ds = chute.MapDataset.range(n).map(fn).to_iter_dataset().batch(BATCH)
    return ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=WORKERS), executor=executor)


def _ray_data(ray: Any, fn: Any, n: int) -> Any:
    """Ray Data as its docs show a per-row transform: read, map, iterate batches."""
    ds = ray.data.range(n).map(lambda row: {"x": fn(row["id"])})
    return (b["x"] for b in ds.iter_batches(batch_size=BATCH, batch_format="numpy"))


def _bare_ray_actors(ray: Any, fn: Any, n: int) -> Any:
    """The limit of Ray actors: 2 actors that each make and stack their batches (the same
    share and batches as chute's workers) and return them, 2 calls in flight each; the
    consumer takes them in turn.  No pipeline, no states, no checks."""

    @ray.remote(num_cpus=1)
    class Bare:
        def batch(self, indices: list[int]) -> Any:
            return np.stack([np.asarray(fn(i)) for i in indices])

    actors = [Bare.remote() for _ in range(WORKERS)]  # type: ignore[attr-defined]
    shares = [list(range(w, n, WORKERS)) for w in range(WORKERS)]
    batches = [[s[k : k + BATCH] for k in range(0, len(s), BATCH)] for s in shares]
    try:
        pending = [[a.batch.remote(b) for b in batches[w][:2]] for w, a in enumerate(actors)]
        nxt = [2] * WORKERS
        while any(pending):
            for w, actor in enumerate(actors):
                if pending[w]:
                    yield ray.get(pending[w].pop(0))
                    if nxt[w] < len(batches[w]):
                        pending[w].append(actor.batch.remote(batches[w][nxt[w]]))
                        nxt[w] += 1
    finally:
        for actor in actors:
            ray.kill(actor)


def _impls(chute: Any, ray: Any, name: str, fn: Any, n: int) -> list[Impl]:
    executor = chute.RayExecutor()
    return [
        Impl("chute local", lambda: iter(_chute_pipeline(chute, fn, n, None)), n),
        Impl("chute on ray", lambda: iter(_chute_pipeline(chute, fn, n, executor)), n),
        Impl("ray data", lambda: _ray_data(ray, fn, n), n),
        Impl(
            "bare ray actors",
            lambda: _bare_ray_actors(ray, fn, n),
            n,
            note="2 Ray actors making the batches, no pipeline",
        ),
        Impl(
            "limit",
            lambda: runners.bare_processes(runners.bare_map(fn, n, WORKERS), WORKERS),
            n,
            note="2 bare forked processes, the work only",
        ),
    ]


def _digest(batch: Any) -> Any:
    return image_hashes(batch) if getattr(batch, "ndim", 0) == 4 else np.asarray(batch)


def _check(impls: list[Impl], name: str) -> None:
    outputs = {
        i.name: common.collect(i, _digest)
        for i in impls
        if i.name not in ("limit", "bare ray actors")
    }
    ref = outputs["chute local"]
    impls[0].check = "reference"
    for impl in impls[1:]:
        if impl.name in ("limit", "bare ray actors"):
            impl.check = "ok"
            continue
        out = outputs[impl.name]
        if out is None or ref is None:
            continue
        in_order = len(out) == len(ref) and all(np.array_equal(a, b) for a, b in zip(out, ref))
        same_set = sorted(map(bytes, map(np.ascontiguousarray, _rows(out)))) == sorted(
            map(bytes, map(np.ascontiguousarray, _rows(ref)))
        )
        impl.check = "ok" if in_order or (impl.name == "ray data" and same_set) else "DIFFERENT"
        if impl.name == "ray data" and same_set and not in_order:
            impl.note = "same elements, another order"
    common.report_check(impls, "chute local", f"{name}: every batch (Ray Data: every element)")


def _rows(batches: list[Any]) -> list[Any]:
    return [row for b in batches for row in np.asarray(b)]


# -- the guarantees, tested ----------------------------------------------------------------


def _killed_once(marker: str, victim: int, fn: Any, x: int) -> Any:
    if x == victim and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return fn(x)


def _flat(batches: Any) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b).ravel()]


def guarantees(chute: Any, ray: Any) -> list[tuple[str, str, str]]:
    """(guarantee, chute on Ray, Ray Data): each tried here, on a 600-element pipeline."""
    n = 600
    fn = functools.partial(int.__mul__, 3)
    expected = [3 * i for i in range(n)]
    executor = chute.RayExecutor()

    def chute_run(workers: int = WORKERS, map_fn: Any = fn) -> Any:
        ds = chute.MapDataset.range(n).seed(0).shuffle().to_iter_dataset().map(map_fn)
        options = chute.MultiprocessingOptions(num_workers=workers)
        return ds.mp_prefetch(options, executor=executor)

    def ray_run(map_fn: Any = fn) -> list[int]:
        ds = ray.data.range(n).random_shuffle(seed=0).map(lambda r: {"x": map_fn(r["id"])})
        return _flat(b["x"] for b in ds.iter_batches(batch_size=BATCH, batch_format="numpy"))

    rows = []
    first, second = list(chute_run()), list(chute_run())
    ray_first, ray_second = ray_run(), ray_run()
    rows.append((
        "same order in two runs",
        _yes(first == second),
        _yes(ray_first == ray_second),
    ))  # fmt: skip
    with iter(chute_run()) as it:
        head = [next(it) for _ in range(250)]
        state = it.get_state()
    with iter(chute_run()) as it:
        it.set_state(state)
        exact = head + list(it) == first
    rows.append(("exact mid-epoch resume", _yes(exact), "no: no iterator state in its API"))
    with iter(chute_run(workers=1)) as it:  # the cluster has room for 2 one-CPU workers
        it.set_state(state)
        other_count = head + list(it) == first
    rows.append(("resume into another worker count", _yes(other_count), "no: nothing to resume"))
    marker = os.path.join(tempfile.mkdtemp(), "killed")
    killed = list(chute_run(map_fn=functools.partial(_killed_once, marker, 123, fn)))
    os.remove(marker)
    ray_killed = ray_run(functools.partial(_killed_once, marker, 123, fn))
    rows.append((
        "a killed worker loses nothing (SIGKILL mid-epoch)",
        _yes(killed == first, "every element once, in order"),
        _yes(sorted(ray_killed) == expected, "every element once (task retried)"),
    ))  # fmt: skip
    return rows


def actor_start(ray: Any, trials: int = 3, imports: bool = False) -> float:
    """Median seconds for Ray to start an empty actor and answer one call: the least any
    Ray worker's first element can take; with ``imports``, the actor's call also imports
    numpy and chute, as any actor running a chute pipeline must."""

    @ray.remote(num_cpus=1)
    class Empty:
        def ping(self, imports: bool) -> int:
            if imports:
                import numpy  # noqa: F401

                import chute  # noqa: F401
            return 1

    times = []
    for _ in range(trials):
        common.wait_quiet()
        start = time.perf_counter()
        actor = Empty.remote()  # type: ignore[attr-defined]
        ray.get(actor.ping.remote(imports))
        times.append(time.perf_counter() - start)
        ray.kill(actor)
    return statistics.median(times)


def _yes(ok: bool, how: str = "") -> str:
    return ("yes" + (f": {how}" if how else "")) if ok else "NO"


# -- where the time goes -------------------------------------------------------------------


def _cpu_by_process() -> dict[int, tuple[str, float]]:
    """The role and CPU seconds so far of this process, its workers and Ray's processes."""
    import psutil

    me = os.getpid()
    mine = {p.pid for p in psutil.Process(me).children(recursive=True)}
    out: dict[int, tuple[str, float]] = {}
    for proc in psutil.process_iter(["pid", "name", "cmdline", "cpu_times"]):
        info = proc.info
        command, times = " ".join(info["cmdline"] or []), info["cpu_times"]
        if times is None:
            continue
        if info["pid"] == me:
            role = "consumer"
        elif command.startswith("ray::RayWorker"):  # chute's actors (Ray sets the title)
            role = "workers"
        elif command.startswith("ray::") or info["name"] in ("raylet", "gcs_server"):
            role = "ray"
        elif "multiprocessing" in command and info["pid"] in mine:  # local workers
            role = "workers"
        elif "/ray/" in command or "ray." in command:
            role = "ray"
        elif info["pid"] in mine:
            role = "workers"
        else:
            continue
        out[info["pid"]] = (role, times.user + times.system)
    return out


def where_time_goes(chute: Any, fn: Any, n: int) -> list[list[str]]:
    """One epoch with local workers and one on Ray: the CPU seconds of each role, read
    before the workers stop (a process's CPU time goes with it)."""
    rows = []
    for label, executor in (("local", None), ("ray", chute.RayExecutor())):
        common.wait_quiet()
        before, start = _cpu_by_process(), time.perf_counter()
        it = iter(_chute_pipeline(chute, fn, n, executor))
        for _ in it:
            pass
        wall = time.perf_counter() - start
        after = _cpu_by_process()
        common.close(it)
        used: dict[str, float] = {}
        for pid, (role, cpu) in after.items():
            used[role] = used.get(role, 0.0) + cpu - before.get(pid, (role, 0.0))[1]
        rows.append([label, f"{wall:.2f}"] + [
            f"{used.get(k, 0.0):.2f}" for k in ("workers", "consumer", "ray")
        ])  # fmt: skip
    return rows


# -- the consumer's cost -------------------------------------------------------------------


DRAINED = 40  # ready batches taken back to back, for the consumer's ceiling


def _drain(chute: Any, fn: Any, executor: Any) -> tuple[float, float]:
    """Wall and CPU seconds this process takes per batch when the batches are ready: 2
    workers with room for 24 calls (or elements) each fill it first, then ``DRAINED``
    batches are taken back to back.  Ray's own threads in this process use CPU while the
    loop waits, which the per-batch CPU of a whole epoch counts too; here nothing waits."""
    ds = chute.MapDataset.range(4096).map(fn).to_iter_dataset().batch(BATCH)
    options = chute.MultiprocessingOptions(num_workers=WORKERS, per_worker_buffer_size=24)
    it = iter(ds.mp_prefetch(options, executor=executor))
    try:
        next(it)
        time.sleep(4.0)  # the workers fill their room
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(DRAINED):
            next(it)
        return (time.perf_counter() - wall) / DRAINED, (time.process_time() - cpu) / DRAINED
    finally:
        common.close(it)


def consumer_cost(chute: Any, executor: Any) -> list[dict[str, Any]]:
    """CPU seconds this process spends per batch taken from 2 workers, local and on Ray,
    over an epoch and when the batches are ready (``_drain``: the ceiling)."""
    out = []
    cases = {
        "tiny (32 ints)": (lambda i: i, 20_000),
        "images (32 x 150 KB)": (image, 1024),
    }
    for label, (fn, n) in cases.items():
        for where, ex in (("local", None), ("ray", executor)):
            common.wait_quiet()
            it = iter(_chute_pipeline(chute, fn, n, ex))
            next(it)  # started
            cpu, wall, batches = time.process_time(), time.perf_counter(), 0
            for _ in it:
                batches += 1
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            common.close(it)
            common.wait_quiet()
            ready_wall, ready_cpu = _drain(chute, fn, ex)
            out.append({
                "ready_wall_ms_per_batch": 1e3 * ready_wall,
                "ready_cpu_ms_per_batch": 1e3 * ready_cpu,
                "ceiling_ready_batches_per_s": 1 / ready_wall,
                "batches": label,
                "workers": where,
                "consumer_cpu_ms_per_batch": 1e3 * cpu / batches,
                "batches_per_s": batches / wall,
                "ceiling_batches_per_s": batches / cpu if cpu else None,
            })  # fmt: skip
    return out


def _after_first_batch(impls: list[Impl], first: list[float | None], n: int) -> dict[str, float]:
    """Each implementation's rate once its first batch is there: the elements after it over
    the median epoch less the median first batch (the start, Ray's actor start above all,
    left out; an estimate from two medians)."""
    out = {}
    for impl, start in zip(impls, first):
        if impl.median and start and impl.median > start:
            out[impl.name] = (n - BATCH) / (impl.median - start)
    return out


def _ratio(name: str, label: str, a: Impl, b: Impl) -> Ratio:
    return Ratio(f"{name} {label}", a, b, TARGETS.get(f"{name} {label}"))


# -- main -----------------------------------------------------------------------------------


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    import chute
    import ray

    started = time.perf_counter()
    env = common.environment()
    env["ray"] = common.version_of("ray")
    print(f"ray benchmarks: chute {chute.__version__} vs ray {env['ray']} | 2 CPUs, one cluster")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    iterations, per_call = calibrate()
    print(f"  work() calibrated: {per_call * 1e3:.2f} ms per call")
    workloads = {
        "cpu": (functools.partial(work, iterations=iterations), CPU_N),
        "images": (image, IMAGES_N),
    }
    results: list[dict[str, Any]] = []
    for name, (fn, n) in workloads.items():
        print(f"\n[{name}]")
        impls = _impls(chute, ray, name, fn, n)
        _check(impls, name)
        common.time_runs(impls, args.repeats)
        common.time_first_batch([i for i in impls if i.name not in ("limit", "bare ray actors")])
        local, on_ray, data, bare, limit = impls

        ratios = [
            _ratio(name, "chute on ray/chute local", on_ray, local),
            _ratio(name, "chute on ray/ray data", on_ray, data),
            _ratio(name, "chute on ray/bare ray actors", on_ray, bare),
            _ratio(name, "bare ray actors/chute local", bare, local),
            _ratio(name, "chute on ray/limit", on_ray, limit),
            _ratio(name, "chute local/limit", local, limit),
        ]
        common.mark_invalid(ratios)
        rows = [
            [
                name,
                i.name,
                common.fmt_num(i.rate()),
                f"{i.median:.2f}" if i.median else "-",
                f"{i.spread():.0%}" if i.spread() is not None else "-",
                f"{1e3 * statistics.median(i.first_batch):.0f}" if i.first_batch else "-",
                i.check,
                i.note,
            ]
            for i in impls
        ]
        common.print_table(
            ["bench", "impl", "elements/s", "run s", "spread", "1st batch ms", "output", "note"],
            rows,
            {2, 3, 4, 5},
        )
        print(f"  where the time goes: CPU seconds of one epoch ({n:,} elements), by process")
        common.print_table(
            ["  workers at", "wall s", "workers", "consumer", "Ray's processes"],
            where_time_goes(chute, fn, n),
            {1, 2, 3, 4},
        )
        first = [statistics.median(i.first_batch) if i.first_batch else None for i in impls]
        after = _after_first_batch(impls[:3], first[:3], n)
        if after:
            print(
                "  after the first batch (epoch minus first batch, medians; elements/s): "
                + ", ".join(f"{name} {rate:,.0f}" for name, rate in after.items())
                + (
                    f"; chute on Ray / chute local {ray_rate / local_rate:.2f}"
                    if (ray_rate := after.get("chute on ray"))
                    and (local_rate := after.get("chute local"))
                    else ""
                )
            )
        empty = actor_start(ray)
        importing = actor_start(ray, imports=True)
        if first[1] and first[2]:
            print(
                f"  first batch: chute on Ray {first[1]:.2f} s, Ray Data {first[2]:.2f} s "
                f"({first[1] / first[2]:.2f} of it; target <= {FIRST_BATCH_TARGET}); "
                f"Ray alone starts an empty actor and answers a call in {empty:.2f} s "
                f"({empty / first[2]:.2f} of Ray Data's), {importing:.2f} s when the call "
                f"imports numpy and chute ({importing / first[2]:.2f} of Ray Data's)"
            )
        results.append({
            "name": name, "description": f"{name}, 2 workers, batch {BATCH}", "unit": "elements",
            "seconds": time.perf_counter() - started, "impls": impls, "ratios": ratios,
            "first_batch_ratio": first[1] / first[2] if first[1] and first[2] else None,
            "after_first_batch_per_s": after,
            "empty_actor_start_s": empty, "importing_actor_start_s": importing,
        })  # fmt: skip

    print("\n[guarantees] tried on a 600-element shuffled pipeline, 2 workers")
    table = guarantees(chute, ray)
    common.print_table(["guarantee", "chute on Ray", "Ray Data"], [list(r) for r in table], set())

    print(
        "\n[consumer] this process's cost per batch taken from 2 workers: over an epoch, "
        "and when the batches are ready (the ceiling)"
    )
    cost = consumer_cost(chute, chute.RayExecutor())
    common.print_table(
        [
            "batches",
            "workers",
            "epoch: CPU ms/batch",
            "batches/s",
            "CPU ceiling/s",
            "ready: wall ms/batch",
            "CPU ms/batch",
            "ceiling/s",
        ],
        [
            [
                c["batches"],
                c["workers"],
                f"{c['consumer_cpu_ms_per_batch']:.3f}",
                f"{c['batches_per_s']:,.0f}",
                f"{c['ceiling_batches_per_s']:,.0f}" if c["ceiling_batches_per_s"] else "-",
                f"{c['ready_wall_ms_per_batch']:.3f}",
                f"{c['ready_cpu_ms_per_batch']:.3f}",
                f"{c['ceiling_ready_batches_per_s']:,.0f}",
            ]
            for c in cost
        ],
        {2, 3, 4, 5, 6, 7},
    )
    results.append({
        "name": "guarantees", "description": "tested guarantees", "unit": "-", "seconds": 0.0,
        "impls": [], "ratios": [], "table": table, "consumer": cost,
    })  # fmt: skip
    status = common.finish("ray", args, env, started, results)
    ray.shutdown()
    return status


if __name__ == "__main__":
    sys.exit(main())
