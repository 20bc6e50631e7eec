"""Checks users run on their own pipelines: does a checkpoint resume exactly?

``assert_resumes_exactly`` runs a pipeline once without a break, then again
stopped and resumed several times at random points, each part on a topology
drawn at random (hosts, workers, local or Ray), and raises naming the first
element that differs.  Resume bugs show up most at the second resume or with
workers, so one save-and-restore is not enough.

Each host of a part runs in a process of its own (forked when that is safe,
else from chute's fork server), as the hosts of a training job do; the
hosts' states are merged (``chute.experimental.merge_states``) and the next
part's hosts restore from the merge.  Hosts whose workers are Ray actors run
in this process, one after another, since a Ray driver does not survive a
fork; their workers are real Ray actors.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import random
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from chute._core.dataset import IterDataset, MapDataset
from chute._core.options import MultiprocessingOptions, RayExecutor
from chute._core.pipeline_walk import pipeline_nodes
from chute._core.sharding import ShardOptions
from chute._execution import processes
from chute._stages.virtual_shards import (
    find_virtual_shards,
    merge_states,
    with_shards_changed,
)
from chute._stages.virtual_shards_iter import ShardTurns

__all__ = ["ResumeReport", "Topology", "assert_resumes_exactly"]


@dataclasses.dataclass(frozen=True)
class Topology:
    """Where a pipeline runs: ``hosts`` processes, each with ``workers`` workers
    (0: in the host itself), local processes or, with ``executor``, Ray actors."""

    hosts: int = 1
    workers: int = 0
    executor: RayExecutor | None = None

    def __post_init__(self) -> None:
        for name, low in (("hosts", 1), ("workers", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Topology: {name} must be an int >= {low} (got {value!r}).")

    def __str__(self) -> str:
        where = " on Ray" if self.executor is not None else ""
        return f"{self.hosts} host(s) x {self.workers} worker(s){where}"


@dataclasses.dataclass(frozen=True)
class ResumeReport:
    """What ``assert_resumes_exactly`` ran: the elements compared, each part's
    topology and length (``(str(topology), elements)``), and how many elements
    each host of each part yielded (``host_counts[part][host]``)."""

    elements: int
    parts: tuple[tuple[str, int], ...]
    host_counts: tuple[tuple[int, ...], ...] = ()


def assert_resumes_exactly(
    make_pipeline: Callable[[], Any],
    *,
    topologies: list[Topology] | None = None,
    resumes: int = 5,
    elements: int | None = None,
    seed: int = 0,
) -> ResumeReport:
    """Checks that ``make_pipeline()`` resumes exactly, ``resumes`` times, on ``topologies``.

    The pipeline runs once in this process without a break (on one host,
    without workers), then in ``resumes + 1`` parts: each part runs on a
    topology drawn from ``topologies`` for a random number of steps, saves
    every host's state, and the next part restores from their merge.  All the
    parts' elements together must be the uninterrupted run, element for
    element in its order (a virtual-shards pipeline's hosts are put back in
    the global order by where each element came from).

    Args:
      make_pipeline: Builds the pipeline (an ``IterDataset`` or ``MapDataset``).
        To move between topologies it must hold ``virtual_shards``; without
        it, ``topologies`` must be None and every part runs the pipeline as built.
      topologies: Where the parts may run (None: one host, no workers).
      resumes: How many times the run stops and resumes (at least 1).
      elements: How many elements to compare; required for an endless pipeline.
      seed: Seeds the draw of the stopping points and topologies.

    Returns:
      A ``ResumeReport`` of what was compared.

    Raises:
      AssertionError: an element differs, is lost or repeated; the message
        names the first, the part and topology it came from.
      ValueError: a topology the pipeline cannot take.
    """
    if isinstance(resumes, bool) or not isinstance(resumes, int) or resumes < 1:
        raise ValueError(f"assert_resumes_exactly: resumes must be an int >= 1 (got {resumes!r}).")
    built = _iter_dataset(make_pipeline())
    sharded = find_virtual_shards(built) is not None
    if topologies is None:
        topologies = [Topology()]
    if not sharded and any(t != Topology() for t in topologies):
        raise ValueError(
            "assert_resumes_exactly: only a pipeline with chute.experimental.virtual_shards "
            "moves to other topologies; without it pass topologies=None."
        )
    expected = _uninterrupted(built, elements)
    total, rng = len(expected), random.Random(seed)
    check = _ShardedCheck(expected, elements is not None) if sharded else None
    got: list[Any] = []
    parts: list[tuple[str, int]] = []
    counts: list[tuple[int, ...]] = []
    state: Any = None
    for part in range(resumes + 1):
        topology = rng.choice(topologies)
        left = total - len(got)
        if part < resumes:
            steps = _steps(rng, left, resumes - part, topology)
        elif elements is None:
            steps = sys.maxsize  # to the end, however the hosts' shares came out
        else:  # endless: enough for every host, however uneven their shares
            steps = -(-left // topology.hosts) + _most_shards(built)
        outputs, states = _run_part(make_pipeline, topology, state, steps)
        last = part == resumes  # its state is not restored: the hosts may end unevenly
        state = states[0] if not sharded else None if last else merge_states(states)
        start = len(got)
        if check is None:
            merged = outputs[0][: total - start] if elements is not None else outputs[0]
            got.extend(merged)
            _compare(expected, got, start, part, topology)
        else:
            running = not last and _all_running(state)
            merged = check.part(_in_order(outputs), part, topology, running)
            got.extend(merged)
        parts.append((str(topology), len(merged)))
        counts.append(tuple(len(host) for host in outputs))
        if len(got) >= total:
            break
    if check is not None:
        check.finish()
    elif len(got) < total:
        raise AssertionError(
            f"the resumed run ended after {len(got)} elements; the uninterrupted run has {total}."
        )
    return ResumeReport(total, tuple(parts), tuple(counts))


class _ShardedCheck:
    """The rest of a virtual-shards run against the uninterrupted one, part by part.

    Every element is known by its origin ``(shard, n)``: each must come once,
    equal to the uninterrupted run's.  While every shard runs, the hosts of a
    part together yield the next elements of the global stream, so a part's
    elements must also be the next ones in order; once a shard ran dry, hosts
    stepping together reach later rounds at different paces (see
    ``virtual_shards``) and only the first holds.
    """

    def __init__(self, expected: list[tuple[Any, Any]], cut: bool) -> None:
        self.expected, self.cut = expected, cut
        self.place = {origin: i for i, (origin, _) in enumerate(expected)}
        self.seen: set[Any] = set()

    def part(
        self, merged: list[tuple[Any, Any]], part: int, topology: Topology, running: bool
    ) -> list[tuple[Any, Any]]:
        kept = []
        for origin, element in merged:
            i = self.place.get(origin)
            if i is None:
                if self.cut and _key(origin) > _key(self.expected[-1][0]):
                    continue  # past the elements compared
                raise AssertionError(
                    f"after resume {part} on {topology}, virtual shard {origin[0]} yielded an "
                    f"element {origin[1]} that the uninterrupted run never made: {element!r}."
                )
            if origin in self.seen:
                raise AssertionError(
                    f"element {i} came twice: again after resume {part} on {topology} "
                    f"(virtual shard {origin[0]}, its element {origin[1]}): repeated data."
                )
            want = self.expected[i][1]
            if not _same(want, element):
                raise AssertionError(
                    f"element {i} differs after resume {part} on {topology}: got {element!r} "
                    f"(virtual shard {origin[0]}, its element {origin[1]}), the uninterrupted "
                    f"run has {want!r} (virtual shard {origin[0]}, its element {origin[1]})."
                )
            kept.append((origin, element))
        start = len(self.seen)
        self.seen.update(origin for origin, _ in kept)
        if running:
            for j, (origin, element) in enumerate(kept):
                want_at, want = self.expected[start + j]
                if origin != want_at:
                    raise AssertionError(
                        f"element {start + j} is out of order after resume {part} on "
                        f"{topology}: got {element!r} (virtual shard {origin[0]}, its element "
                        f"{origin[1]}), the uninterrupted run has {want!r} (virtual shard "
                        f"{want_at[0]}, its element {want_at[1]}) there."
                    )
        return kept

    def finish(self) -> None:
        lost = [i for i, (origin, _) in enumerate(self.expected) if origin not in self.seen]
        if lost:
            origin, element = self.expected[lost[0]]
            raise AssertionError(
                f"the resumed run lost {len(lost)} element(s); the first is element {lost[0]} "
                f"(virtual shard {origin[0]}, its element {origin[1]}): {element!r}."
            )


def _key(origin: tuple[int, int]) -> tuple[int, int]:
    """Where an element stands in the global stream: round ``n``, then shard."""
    return (origin[1], origin[0])


def _all_running(state: Any) -> bool:
    """Whether no shard of a merged state ran dry."""
    return not any(_dry_parts(state))


def _dry_parts(state: Any) -> Any:
    if isinstance(state, dict):
        if state.get("stage") == "virtual_shards":
            yield from (e["dry"] for e in state["shards"] if e is not None)
        else:
            for value in state.values():
                yield from _dry_parts(value)
    elif isinstance(state, list):
        for value in state:
            yield from _dry_parts(value)


def _most_shards(ds: IterDataset[Any]) -> int:
    vs = find_virtual_shards(ds)
    return 0 if vs is None else vs.num_shards


def _iter_dataset(ds: Any) -> IterDataset[Any]:
    if isinstance(ds, MapDataset):
        return ds.to_iter_dataset()
    if not isinstance(ds, IterDataset):
        raise TypeError(
            "assert_resumes_exactly: make_pipeline() must return a chute IterDataset or "
            f"MapDataset (got {type(ds).__name__})."
        )
    return ds


def _uninterrupted(ds: IterDataset[Any], elements: int | None) -> list[tuple[Any, Any]]:
    """``(origin, element)`` of the run on one host without workers."""
    ds = _placed(ds, Topology(), 0)
    out: list[tuple[Any, Any]] = []
    with iter(ds) as it:
        turns = _turns_of(it)
        for element in it:
            out.append((None if turns is None else turns.last_origin, element))
            if elements is not None and len(out) >= elements:
                break
    return out


def _steps(rng: random.Random, left: int, parts_left: int, topology: Topology) -> int:
    """A random part length in steps: around an even share of what is left."""
    share = max(1, 2 * left // ((parts_left + 1) * topology.hosts))
    return rng.randint(1, share)


def _placed(ds: IterDataset[Any], topology: Topology, host: int) -> IterDataset[Any]:
    """``ds`` on host ``host`` of ``topology``."""
    if find_virtual_shards(ds) is None:
        return ds
    options = MultiprocessingOptions(num_workers=topology.workers)
    shard = ShardOptions(host, topology.hosts)
    return with_shards_changed(
        ds, lambda vs: vs.on_host(shard).with_workers(options, None, topology.executor)
    )


def _turns_of(it: Any) -> ShardTurns | None:
    return next((n for n in pipeline_nodes(it) if isinstance(n, ShardTurns)), None)


def _host_part(make_pipeline: Any, topology: Topology, host: int, state: Any, steps: int) -> Any:
    """One host's part: ``(origin, element)`` pairs and its state at the end."""
    ds = _placed(_iter_dataset(make_pipeline()), topology, host)
    out: list[tuple[Any, Any]] = []
    with iter(ds) as it:
        if state is not None:
            it.set_state(state)
        turns = _turns_of(it)
        for _ in range(steps):
            try:
                element = next(it)
            except StopIteration:
                break
            out.append((None if turns is None else turns.last_origin, element))
        return out, it.get_state()


def _in_child(conn: Any, pickled: bytes, topology: Topology, host: int, state: Any, steps: int):
    import cloudpickle

    try:
        conn.send(("ok", _host_part(cloudpickle.loads(pickled), topology, host, state, steps)))
    except BaseException as exc:  # sent to the parent, which raises it
        import traceback

        conn.send(("error", f"{exc!r}\n{traceback.format_exc()}"))
    finally:
        conn.close()


def _run_part(make_pipeline: Any, topology: Topology, state: Any, steps: int) -> tuple[list, list]:
    """Every host's part: in processes of their own, or here when the workers are Ray's."""
    if topology.executor is not None:
        results = [
            _host_part(make_pipeline, topology, h, state, steps) for h in range(topology.hosts)
        ]
    else:
        results = _in_processes(make_pipeline, topology, state, steps)
    return [r[0] for r in results], [r[1] for r in results]


def _in_processes(make_pipeline: Any, topology: Topology, state: Any, steps: int) -> list[Any]:
    """Each host in a process of its own, started as chute starts its workers (forked when
    safe, else from the fork server, never re-running the user's ``__main__``), but not
    daemonic: a host starts worker processes of its own."""
    kind = (
        processes.ForkedWorkerProcess
        if processes.start_method() == "fork"
        else processes.WorkerProcess
    )
    pickled = processes.dumps(make_pipeline)
    started = []
    for host in range(topology.hosts):
        receive, send = multiprocessing.Pipe(duplex=False)
        process = kind(
            target=_in_child,
            args=(send, pickled, topology, host, state, steps),
            name=f"chute-host-{host}",
            daemon=False,
        )
        process.start()
        send.close()
        started.append((receive, process))
    results = []
    for host, (receive, process) in enumerate(started):
        try:
            kind_, value = receive.recv()
        except EOFError:
            kind_, value = "error", f"the host process died (exit code {process.exitcode})"
        process.join()
        if kind_ == "error":
            raise AssertionError(f"host {host} of {topology} failed: {value}")
        results.append(value)
    return results


def _in_order(outputs: list[list[tuple[Any, Any]]]) -> list[tuple[Any, Any]]:
    """The hosts' elements in the global order: by ``(n, shard)`` of their origins."""
    merged = [pair for host in outputs for pair in host]
    merged.sort(key=lambda pair: _key(pair[0]))
    return merged


def _compare(
    expected: list[tuple[Any, Any]],
    got: list[tuple[Any, Any]],
    start: int,
    part: int,
    topology: Topology,
) -> None:
    """A pipeline without virtual shards: its one host's elements, position by position."""
    for i in range(start, len(got)):
        if i >= len(expected):
            raise AssertionError(
                f"part {part} on {topology} yielded element {i}, past the end of the "
                f"uninterrupted run ({len(expected)} elements): repeated data."
            )
        want, have = expected[i][1], got[i][1]
        if not _same(want, have):
            raise AssertionError(
                f"element {i} differs after resume {part} on {topology}: got {have!r}, the "
                f"uninterrupted run has {want!r}."
            )


def _same(a: Any, b: Any) -> bool:
    """Whether two elements are equal, leaf by leaf (arrays by value, dtype and shape)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        return x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y))
    return bool(a == b)
