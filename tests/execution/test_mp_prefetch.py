"""mp_prefetch: Grain's order, lambdas, errors, killed workers, lifecycle, checkpoints."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import chute as grain
from chute import MultiprocessingOptions
from chute._execution.worker_process import WorkerDiedError
from chute.experimental import assert_equal_output_after_checkpoint, skip_errors

pytestmark = pytest.mark.usefixtures("start_method")


def pipeline() -> grain.IterDataset[Any]:
    return (
        grain.MapDataset.range(20)
        .seed(3)
        .shuffle()
        .map(lambda x: x * 2)
        .filter(lambda x: x % 3)
        .to_iter_dataset()
        .batch(3)
    )


def batches(ds: Any) -> list[list[int]]:
    return [b.tolist() for b in ds]


# Grain 0.2.18's outputs for the same pipelines.
GRAIN_ORDER = {
    1: [[8, 34, 32], [14, 10, 38], [4, 26, 28], [16, 22, 20], [2]],
    2: [[8, 32, 10], [34, 14, 38], [4, 28, 22], [26, 16, 20], [2]],
    3: [[8, 14, 28], [34, 10, 38], [32, 26, 22], [20, 2], [4, 16]],
}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_order_equals_grains(workers: int) -> None:
    assert (
        batches(pipeline().mp_prefetch(MultiprocessingOptions(num_workers=workers)))
        == GRAIN_ORDER[workers]
    )


def test_sequential_slices_give_contiguous_blocks() -> None:
    ds = (
        grain.MapDataset.range(20)
        .map(lambda x: x * 2)
        .filter(lambda x: x % 3)
        .to_iter_dataset()
        .batch(3)
    )
    two = ds.mp_prefetch(MultiprocessingOptions(num_workers=2), sequential_slice=True)
    assert batches(two) == [[2, 4, 8], [20, 22, 26], [10, 14, 16], [28, 32, 34], [38]]  # as Grain


def test_sequential_slices_read_blocks_of_the_source_shuffled_within() -> None:
    two = pipeline().mp_prefetch(MultiprocessingOptions(num_workers=2), sequential_slice=True)
    assert batches(two) == [[8, 14, 10], [28, 32, 38], [2, 16, 4], [34, 26, 22], [20]]  # as Grain


def test_no_workers_is_a_no_op_and_prefetch_is_deprecated() -> None:
    ds = pipeline()
    assert ds.mp_prefetch(MultiprocessingOptions()) is ds
    with pytest.warns(DeprecationWarning, match="use IterDataset.mp_prefetch"):
        assert ds.prefetch(MultiprocessingOptions()) is ds


def test_worker_init_fn_runs_in_each_worker() -> None:
    def init(index: int, count: int) -> None:
        os.environ["CHUTE_TEST_WORKER"] = f"{index}/{count}"

    ds = (
        grain.MapDataset.range(4)
        .to_iter_dataset()
        .map(lambda x: (x, os.environ["CHUTE_TEST_WORKER"]))
    )
    out = list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2), worker_init_fn=init))
    assert out == [(0, "0/2"), (1, "1/2"), (2, "0/2"), (3, "1/2")]


def test_bad_arguments_fail_when_building() -> None:
    with pytest.raises(TypeError, match="takes a chute.MultiprocessingOptions"):
        pipeline().mp_prefetch({"num_workers": 2})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        MultiprocessingOptions(num_workers=-1)
    with pytest.raises(TypeError, match="worker_init_fn must be callable"):
        pipeline().mp_prefetch(MultiprocessingOptions(num_workers=2), worker_init_fn=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not read a MapDataset"):
        grain.experimental.RepeatIterDataset(_Endless()).mp_prefetch(
            MultiprocessingOptions(num_workers=2)
        )


class _Endless(grain.IterDataset[int]):
    def __iter__(self) -> Any:
        return iter(grain.MapDataset.range(3).to_iter_dataset())


def test_checkpoints_restore_exactly() -> None:
    ds = grain.MapDataset.range(12).seed(1).shuffle().to_iter_dataset().batch(2)
    assert_equal_output_after_checkpoint(
        ds.mp_prefetch(MultiprocessingOptions(num_workers=2)), epochs=1
    )


def fragile(x: int) -> int:
    if x in (5, 8):
        raise KeyError(f"record {x} is missing")
    return x


def test_worker_errors_reach_the_parent_and_nothing_else_is_lost() -> None:
    ds = grain.MapDataset.range(12).map(fragile).to_iter_dataset()
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    values, errors = [], []
    while True:
        try:
            values.append(next(it))
        except StopIteration:
            break
        except KeyError as exc:
            errors.append(exc)
    assert sorted(values) == [x for x in range(12) if x not in (5, 8)]
    assert len(errors) == 2
    notes = "\n".join(errors[0].__notes__)
    assert "map(fragile)" in notes and "element index" in notes
    assert "worker process" in notes and "Traceback" in notes and "fragile" in notes


def test_error_budget_works_across_workers() -> None:
    ds = grain.MapDataset.range(12).map(fragile).to_iter_dataset()
    it = iter(skip_errors(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)), max_errors=2))
    assert sorted(it) == [x for x in range(12) if x not in (5, 8)]
    assert len(it.skipped) == 2


def test_a_killed_worker_raises_instead_of_hanging() -> None:
    ds = grain.MapDataset.range(1000).to_iter_dataset()
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    next(it)
    victim = it._parents[1]._process
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(timeout=10)
    with pytest.raises(WorkerDiedError, match=r"worker 1 of 2 .* died with exit code -9"):
        for _ in range(10):
            next(it)
    it.close()


def test_a_worker_stopped_from_outside_raises_instead_of_ending_its_share() -> None:
    ds = grain.MapDataset.range(1000).to_iter_dataset()
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    next(it), next(it)  # worker 1 has delivered: its SIGTERM handler is in place
    victim = it._parents[1]._process
    os.kill(victim.pid, signal.SIGTERM)  # a cluster stopping the process group, say
    victim.join(timeout=10)
    with pytest.raises(WorkerDiedError, match=r"worker 1 of 2 .* stopped before its share"):
        for _ in range(1000):
            next(it)
    it.close()


def _worker_processes(it: Any) -> list[Any]:
    return [w._process for w in it._parents]


def test_close_and_garbage_collection_stop_the_workers() -> None:
    ds = pipeline().mp_prefetch(MultiprocessingOptions(num_workers=2))
    it = iter(ds)
    next(it)
    processes = _worker_processes(it)
    it.close()
    assert all(not p.is_alive() for p in processes)
    with pytest.raises(grain.IteratorClosedError):
        next(it)
    it = iter(ds)
    next(it)
    processes = _worker_processes(it)
    del it
    gc.collect()
    for p in processes:
        p.join(timeout=10)
    assert all(not p.is_alive() for p in processes)


SCRIPT = """
import chute as grain
ds = grain.MapDataset.range(100).map(lambda x: x + 1).to_iter_dataset().batch(10)
for i, batch in enumerate(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))):
    if i == 2:
        print("broke out at", batch.tolist()[:2])
        break
"""


def test_a_script_without_main_guard_just_works_and_exits_cleanly(tmp_path: Any) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    child = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 0, stderr
    assert stdout.strip() == "broke out at [21, 23]"
    assert "leaked" not in stderr and "Traceback" not in stderr
    assert not [name for name in os.listdir("/dev/shm") if f"-{child.pid}-" in name]


def test_a_worker_that_cannot_start_says_why() -> None:
    def init(index: int, count: int) -> None:
        raise RuntimeError(f"no GPU for worker {index}")

    ds = grain.MapDataset.range(4).to_iter_dataset()
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2), worker_init_fn=init))
    with pytest.raises(
        WorkerDiedError, match=r"worker 0 of 2 could not start: RuntimeError: no GPU"
    ):
        next(it)
    it.close()


def test_repeat_keeps_the_workers_alive_across_epochs() -> None:
    ds = (
        grain.MapDataset.range(6)
        .to_iter_dataset()
        .batch(2)
        .mp_prefetch(MultiprocessingOptions(num_workers=2))
    )
    it = iter(grain.experimental.RepeatIterDataset(ds, num_epochs=3))
    first = [next(it).tolist() for _ in range(4)]
    pids = [w._process.pid for w in it._parent._parents]
    rest = [b.tolist() for b in it]
    assert first + rest == [[0, 2], [1, 3], [4], [5]] * 3
    assert [w._process.pid for w in it._parent._parents] == pids
    assert_equal_output_after_checkpoint(
        grain.experimental.RepeatIterDataset(ds, num_epochs=2), epochs=1
    )
    it.close()


def test_map_dataset_parents_of_iter_stages_are_shared_out_too() -> None:
    zipped = grain.experimental.ZipIterDataset(
        [
            grain.MapDataset.range(6),
            grain.MapDataset.range(6).map(lambda x: x * 10).to_iter_dataset(),
        ]
    )
    out = list(zipped.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    assert sorted(out) == [(i, i * 10) for i in range(6)]


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (2, 2)])
def test_element_wise_pipelines_restore_into_another_worker_count(before: int, after: int) -> None:
    def ds(workers: int) -> Any:
        base = grain.MapDataset.range(30).seed(5).shuffle().to_iter_dataset().map(lambda x: x + 100)
        return base.mp_prefetch(MultiprocessingOptions(num_workers=workers))

    it = iter(ds(before))
    seen = [next(it) for _ in range(7)]
    resumed = iter(ds(after))
    resumed.set_state(it.get_state())
    it.close()
    more = [next(resumed) for _ in range(5)]
    again = iter(ds(before))  # and once more, back to the first layout
    again.set_state(resumed.get_state())
    resumed.close()
    rest = list(again)
    assert sorted(seen + more + rest) == list(range(100, 130))  # nothing lost or repeated


def test_a_worker_count_change_is_refused_with_the_reason_when_workers_batch() -> None:
    def ds(workers: int) -> Any:
        return (
            grain.MapDataset.range(30)
            .to_iter_dataset()
            .batch(2)
            .mp_prefetch(MultiprocessingOptions(num_workers=workers))
        )

    it = iter(ds(2))
    next(it)
    with pytest.raises(
        grain.CheckpointError, match=r"saved with 2 worker\(s\).*run BatchIterDataset.*saved count"
    ):
        iter(ds(3)).set_state(it.get_state())
    it.close()


def test_strings_object_arrays_and_big_arrays_cross_the_process_boundary() -> None:
    import numpy as np

    def element(i: int) -> dict[str, Any]:
        return {
            "text": f"record {i}",
            "tags": np.array([f"t{i}", None, {"k": i}], dtype=object),
            "image": np.full((64, 64, 3), i, np.uint8),
            "ids": np.arange(i, i + 5000, dtype=np.int64),
        }

    ds = grain.MapDataset.range(6).map(element).to_iter_dataset()
    out = list(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    assert [o["text"] for o in out] == [f"record {i}" for i in range(6)]
    assert out[3]["tags"][2] == {"k": 3} and out[3]["tags"][1] is None
    assert all(int(o["image"][0, 0, 0]) == i and o["ids"][0] == i for i, o in enumerate(out))


INTERRUPTED = """
import os, signal, sys, time
# As in a terminal: a runner started in the background (nohup, &) ignores SIGINT, and so
# would this script, which inherits that.
signal.signal(signal.SIGINT, signal.default_int_handler)
import chute as grain

def slow(x):
    time.sleep(0.01)
    return x

ds = grain.MapDataset.range(10_000).map(slow).to_iter_dataset().mp_prefetch(
    grain.MultiprocessingOptions(num_workers=2))
it = iter(ds)
next(it)
print(" ".join(str(w._process.pid) for w in it._parents), flush=True)
os.kill(os.getpid(), signal.SIGINT)
for _ in it:
    pass
"""


def test_ctrl_c_stops_the_workers_and_exits(tmp_path: Any) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent(INTERRUPTED))
    child = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode != 0 and "KeyboardInterrupt" in stderr
    assert "leaked" not in stderr
    for pid in map(int, stdout.split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the worker is gone
    assert not [name for name in os.listdir("/dev/shm") if f"-{child.pid}-" in name]


def test_batches_built_in_shared_memory_equal_inline_batches() -> None:
    import numpy as np

    def element(i: int) -> dict[str, Any]:
        return {
            "img": np.full((40, 40, 3), i, np.uint8),
            "label": i,
            "name": f"n{i}",
            "f": np.float32(i),
        }

    ds = grain.MapDataset.range(20).map(element).to_iter_dataset().batch(4)
    inline = list(ds)
    remote = list(ds.mp_prefetch(MultiprocessingOptions(num_workers=1)))
    assert len(inline) == len(remote) == 5
    for a, b in zip(inline, remote):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key])


def test_uneven_arrays_in_a_worker_batch_raise_the_usual_error() -> None:
    import numpy as np

    ds = (
        grain.MapDataset.range(4).map(lambda i: np.zeros((100 + i, 100))).to_iter_dataset().batch(2)
    )
    it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=1)))
    with pytest.raises(ValueError, match="arrays of different shapes"):
        next(it)
    it.close()


def test_a_process_that_read_a_bucket_does_not_fork_its_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chute._execution import processes

    monkeypatch.setitem(sys.modules, "obstore", sys.modules.get("obstore") or object())
    assert "obstore" in (processes.fork_unsafe_reason() or "")
