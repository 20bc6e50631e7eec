"""chute.torch.DataLoader: PyTorch's batches, StatefulDataLoader's states, PyTorch's
conventions in workers, and PyTorch's errors for bad input."""

from __future__ import annotations

import pickle
import random
import threading
from typing import Any

import numpy as np
import pytest

import chute
from chute.torch import DataLoader, GlobalShuffleSampler

torch = pytest.importorskip("torch")
from torch.utils import data as tdata  # noqa: E402

# PyTorch's own DataLoader, run beside chute's as the reference, forks its workers even
# when an earlier test started JAX in this process, and JAX warns at every fork.
pytestmark = pytest.mark.filterwarnings(r"ignore:os.fork\(\) was called:RuntimeWarning")


class Squares(tdata.Dataset):  # type: ignore[misc]
    """Element i: its index, its square and a draw from each global generator."""

    def __init__(self, n: int = 37) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "i": i,
            "sq": torch.tensor([i * i], dtype=torch.float32),
            "torch": torch.rand(()),
            "np": np.random.rand(),
            "py": random.random(),
        }


def _ids(batches: list[Any]) -> list[list[int]]:
    return [b["i"].tolist() for b in batches]


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def _same(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for key in x:
            if not torch.equal(torch.as_tensor(x[key]), torch.as_tensor(y[key])):
                return False
    return True


def _gen(seed: int = 5) -> Any:
    return torch.Generator().manual_seed(seed)


# -- the same batches as PyTorch's loader ------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 4},
        {"batch_size": 4, "drop_last": True},
        {"batch_size": None},
        {"batch_size": 3, "sampler": "random"},
        {"batch_sampler": "random"},
    ],
    ids=["sequential", "drop_last", "unbatched", "sampler", "batch_sampler"],
)
def test_same_batches_as_torch_dataloader(workers: int, kwargs: dict[str, Any]) -> None:
    def loader(kind: Any) -> Any:
        args = dict(kwargs)
        if args.get("sampler") == "random":
            args["sampler"] = tdata.RandomSampler(range(37), generator=_gen(1))
        if args.get("batch_sampler") == "random":
            sampler = tdata.RandomSampler(range(37), generator=_gen(2))
            args["batch_sampler"] = tdata.BatchSampler(sampler, 5, drop_last=False)
        return kind(Squares(), num_workers=workers, generator=_gen(), **args)

    def run(kind: Any) -> list[Any]:
        torch.manual_seed(0), np.random.seed(0), random.seed(0)  # the same start for both
        return list(loader(kind))

    ours, theirs = run(DataLoader), run(tdata.DataLoader)
    # Random draws in __getitem__ match too: each worker is seeded as PyTorch seeds it and
    # fetches the batches PyTorch's worker of that number fetches.
    assert _same(ours, theirs)
    assert len(loader(DataLoader)) == len(loader(tdata.DataLoader)) == len(ours)


def test_batches_are_tensors_made_by_default_collate_and_custom_collate_runs() -> None:
    (first, *_) = DataLoader(Squares(8), batch_size=4, num_workers=2)
    assert isinstance(first["sq"], torch.Tensor) and first["sq"].shape == (4, 1)
    assert first["i"].dtype == torch.int64
    sums = list(DataLoader(Squares(8), batch_size=4, collate_fn=lambda b: sum(x["i"] for x in b)))
    assert sums == [6, 22]


def test_shuffle_is_a_seeded_global_shuffle_new_each_epoch() -> None:
    loader = DataLoader(Squares(), batch_size=5, shuffle=True, generator=_gen(3))
    first, second = _ids(list(loader)), _ids(list(loader))
    assert sorted(_flat(first)) == list(range(37)) == sorted(_flat(second))
    assert first != second  # a new order each epoch
    again = DataLoader(Squares(), batch_size=5, shuffle=True, num_workers=2, generator=_gen(3))
    assert _ids(list(again)) == first  # the same generator seed: the same order
    other = DataLoader(Squares(), batch_size=5, shuffle=True, generator=_gen(4))
    assert _ids(list(other)) != first
    assert isinstance(loader.sampler, GlobalShuffleSampler)


# -- state_dict() and load_state_dict() ---------------------------------------------------------


def _run(loader: Any, epochs: int) -> list[list[int]]:
    return [b["i"].tolist() for _ in range(epochs) for b in loader]


@pytest.mark.parametrize(("before", "after"), [(2, 1), (0, 2), (2, 0), (1, 2)])
@pytest.mark.parametrize("stop_at", [0, 3, 9, 10])
def test_resume_is_exact_into_another_worker_count(before: int, after: int, stop_at: int) -> None:
    def make(workers: int) -> DataLoader:
        return DataLoader(Squares(), batch_size=4, shuffle=True, num_workers=workers)

    full = _run(DataLoader(Squares(), batch_size=4, shuffle=True, generator=_gen()), 3)
    first = DataLoader(Squares(), batch_size=4, shuffle=True, num_workers=before, generator=_gen())
    it = iter(first)
    seen = [next(it)["i"].tolist() for _ in range(stop_at)]  # stop_at 10: the epoch's last
    state = pickle.loads(pickle.dumps(first.state_dict()))
    resumed = make(after)
    resumed.load_state_dict(state)
    rest = _run(resumed, 3)  # the rest of epoch 0, then epochs 1 and 2
    assert seen + rest == full


def test_state_after_stop_iteration_starts_the_next_epoch() -> None:
    full = _run(DataLoader(Squares(), batch_size=8, shuffle=True, generator=_gen()), 2)
    loader = DataLoader(Squares(), batch_size=8, shuffle=True, num_workers=2, generator=_gen())
    first = _run(loader, 1)
    resumed = DataLoader(Squares(), batch_size=8, shuffle=True)
    resumed.load_state_dict(loader.state_dict())
    assert first + _run(resumed, 1) == full


def test_state_before_iter_and_after_load_and_state_of_a_fresh_loader() -> None:
    loader = DataLoader(Squares(), batch_size=4, shuffle=True, generator=_gen())
    fresh = loader.state_dict()
    assert fresh["epoch"] == -1 or fresh["yielded"] == 0
    other = DataLoader(Squares(), batch_size=4, shuffle=True, generator=_gen(9))
    other.load_state_dict(fresh)
    assert other.state_dict() == fresh  # loaded, not yet iterated: the loaded state
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert state["yielded"] == 1 and state["epoch"] == 0
    assert loader.state_dict() == state  # taking it changes nothing


def test_resume_twice_in_one_epoch_stays_aligned() -> None:
    full = _run(DataLoader(Squares(), batch_size=3, shuffle=True, generator=_gen()), 1)
    got: list[list[int]] = []
    state = None
    for workers, steps in [(2, 4), (1, 3), (0, 2), (2, 100)]:
        loader = DataLoader(
            Squares(), batch_size=3, shuffle=True, num_workers=workers, generator=_gen()
        )
        if state is not None:
            loader.load_state_dict(state)
        for _, batch in zip(range(steps), loader):  # zip asks range first: no batch lost
            got.append(batch["i"].tolist())
        state = loader.state_dict()
    assert got == full


def test_seed_each_batch_makes_random_draws_exact_after_a_resume_into_other_workers() -> None:
    def make(workers: int) -> DataLoader:
        return DataLoader(
            Squares(), batch_size=4, num_workers=workers, seed_each_batch=True, generator=_gen()
        )

    full = list(make(2))
    loader = make(2)
    it = iter(loader)
    head = [next(it) for _ in range(4)]
    resumed = make(1)
    resumed.load_state_dict(loader.state_dict())
    assert _same(head + list(resumed), full)
    assert _same(full, list(make(0)))


@pytest.mark.parametrize("kind", ["unseeded", "seeded", "distributed"])
def test_an_explicit_sampler_repeats_its_epoch_on_resume(kind: str) -> None:
    def sampler() -> Any:
        if kind == "unseeded":
            return tdata.RandomSampler(range(37))
        if kind == "seeded":
            return tdata.RandomSampler(range(37), generator=_gen(11))
        s = tdata.DistributedSampler(range(37), num_replicas=2, rank=1, seed=4)
        s.set_epoch(3)
        return s

    loader = DataLoader(Squares(), batch_size=4, sampler=sampler(), num_workers=2)
    it = iter(loader)
    head = [next(it)["i"].tolist() for _ in range(3)]
    state = loader.state_dict()
    tail = [b["i"].tolist() for b in it]
    resumed = DataLoader(Squares(), batch_size=4, sampler=sampler(), num_workers=1)
    resumed.load_state_dict(state)
    assert head + _run(resumed, 1) == head + tail
    if kind == "distributed":
        assert sorted(_flat(head + tail)) == sorted(sampler())  # rank 1's half, epoch 3


def test_state_dict_is_plain_and_small() -> None:
    loader = DataLoader(Squares(), batch_size=4, shuffle=True, num_workers=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert len(pickle.dumps(state)) < 1000
    torch.save(state, __import__("io").BytesIO())  # what users checkpoint with


# -- PyTorch's conventions in workers --------------------------------------------------------


class WhoAmI(tdata.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict[str, Any]:
        info = tdata.get_worker_info()
        return {
            "id": -1 if info is None else info.id,
            "count": -1 if info is None else info.num_workers,
            "seed": -1 if info is None else info.seed,
            "torch_seed": torch.initial_seed(),
            "mine": info is not None and info.dataset is not self,
            "tagged": getattr(self, "tag", None) or "none",
            "threads": torch.get_num_threads(),
        }


def _tag(worker_id: int) -> None:
    tdata.get_worker_info().dataset.tag = f"w{worker_id}"


@pytest.mark.parametrize("kind", [DataLoader, tdata.DataLoader])
def test_worker_info_seeds_and_worker_init_fn_as_in_pytorch(kind: Any) -> None:
    loader = kind(WhoAmI(), batch_size=None, num_workers=2, worker_init_fn=_tag, generator=_gen(8))
    got = list(loader)
    assert [x["id"] for x in got] == [0, 1] * 4
    assert {x["count"] for x in got} == {2}
    assert [x["tagged"] for x in got] == ["w0", "w1"] * 4
    assert all(x["seed"] == x["torch_seed"] for x in got)
    assert got[1]["seed"] == got[0]["seed"] + 1
    assert {x["threads"] for x in got} == {1}
    # What PyTorch's own loader gives, chute's gives (the suite runs both).
    reference = list(
        tdata.DataLoader(
            WhoAmI(), batch_size=None, num_workers=2, worker_init_fn=_tag, generator=_gen(8)
        )
    )
    assert [x["seed"] for x in got] == [x["seed"] for x in reference]


def test_no_worker_info_in_process() -> None:
    (first, *_) = DataLoader(WhoAmI(), batch_size=None)
    assert first["id"] == -1


class Failing(tdata.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> int:
        if i == 5:
            raise KeyError(f"no record {i}")
        return i


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_in_getitem_keeps_its_type_and_traceback_and_the_loop_can_go_on(
    workers: int,
) -> None:
    loader = DataLoader(Failing(), batch_size=2, num_workers=workers)
    it = iter(loader)
    assert [next(it).tolist() for _ in range(2)] == [[0, 1], [2, 3]]
    with pytest.raises(KeyError, match="no record 5") as raised:
        next(it)
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "Failing.__getitem__" in notes and "indices [4, 5]" in notes
    if workers:
        assert "raise KeyError" in notes  # the worker's traceback
    assert loader.state_dict()["yielded"] == 3  # the failed batch is used up
    assert [b.tolist() for b in it] == [[6, 7], [8, 9]]


def test_len_of_the_loader() -> None:
    assert len(DataLoader(Squares(10), batch_size=3)) == 4
    assert len(DataLoader(Squares(10), batch_size=3, drop_last=True)) == 3
    assert len(DataLoader(Squares(10), batch_size=None)) == 10


def test_shard_options_split_the_dataset_between_ranks() -> None:
    ranks = [
        DataLoader(
            Squares(10),
            batch_size=2,
            shuffle=True,
            generator=_gen(),
            shard_options=chute.ShardOptions(r, 2),
        )
        for r in range(2)
    ]
    got = [sorted(_flat(_ids(list(loader)))) for loader in ranks]
    assert got == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


# -- iterable-style datasets ----------------------------------------------------------------


class Stream(tdata.IterableDataset):  # type: ignore[misc]
    """0..n-1, split between workers by get_worker_info() as PyTorch's docs do."""

    def __init__(self, n: int = 23) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        info = tdata.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_gives_pytorchs_batches_and_resumes(workers: int) -> None:
    ours = [b.tolist() for b in DataLoader(Stream(), batch_size=4, num_workers=workers)]
    theirs = [b.tolist() for b in tdata.DataLoader(Stream(), batch_size=4, num_workers=workers)]
    assert ours == theirs
    loader = DataLoader(Stream(), batch_size=4, num_workers=workers)
    it = iter(loader)
    head = [next(it).tolist() for _ in range(3)]
    resumed = DataLoader(Stream(), batch_size=4, num_workers=workers)
    resumed.load_state_dict(loader.state_dict())
    assert head + [b.tolist() for b in resumed] == ours


def test_an_iterable_state_refuses_another_worker_count() -> None:
    loader = DataLoader(Stream(), batch_size=4, num_workers=2)
    it = iter(loader)
    next(it)
    other = DataLoader(Stream(), batch_size=4, num_workers=1)
    with pytest.raises(ValueError, match="same num_workers|num_workers that saved it"):
        other.load_state_dict(loader.state_dict())


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 2, "batch_sampler": [[0, 1]]}, "batch_sampler option is mutually"),
        ({"shuffle": True, "sampler": range(3)}, "sampler option is mutually exclusive"),
        ({"num_workers": -1}, "num_workers"),
        ({"timeout": -1}, "timeout option should be non-negative"),
        ({"prefetch_factor": 2}, "prefetch_factor option could only be specified"),
        ({"persistent_workers": True}, "persistent_workers option needs num_workers > 0"),
        ({"batch_size": None, "drop_last": True}, "mutually exclusive with drop_last"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_conflicting_arguments_raise_pytorchs_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataLoader(Squares(), **kwargs)


def test_a_non_dataset_is_refused() -> None:
    with pytest.raises(TypeError, match="map-style dataset"):
        DataLoader(42)


def test_iterable_dataset_refuses_shuffle_and_samplers() -> None:
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        DataLoader(Stream(), shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified sampler"):
        DataLoader(Stream(), sampler=range(3))


def test_a_state_from_another_loader_is_refused_and_nothing_changes() -> None:
    loader = DataLoader(Squares(), batch_size=4, num_workers=2)
    torch_state = {"_sampler_iter_yielded": 3, "_num_yielded": 3}
    with pytest.raises(ValueError, match="not a state of chute.torch.DataLoader"):
        loader.load_state_dict(torch_state)
    other = DataLoader(Squares(50), batch_size=4)
    it = iter(other)
    next(it)
    with pytest.raises(ValueError, match="13 batches"):
        loader.load_state_dict(other.state_dict())
    assert _ids(list(loader))[0] == [0, 1, 2, 3]  # still at the start


class Unpicklable(Squares):
    def __init__(self) -> None:
        super().__init__(8)
        self.lock = threading.Lock()


_LOCK_SCRIPT = """
import threading
import torch
from chute.torch import DataLoader


class Locked(torch.utils.data.Dataset):
    def __init__(self):
        self.lock = threading.Lock()  # cannot be pickled: only forked workers can have it

    def __len__(self):
        return 8

    def __getitem__(self, i):
        with self.lock:
            return i


stop = threading.Event()
beside = threading.Thread(target=stop.wait)
beside.start()
try:
    print([b.tolist() for b in DataLoader(Locked(), batch_size=4, num_workers=2)])
finally:
    stop.set()
    beside.join()
"""


def test_a_dataset_holding_a_lock_works_with_forked_workers_beside_a_thread(
    tmp_path: Any,
) -> None:
    # PyTorch forks its workers on Linux, also beside other threads, so datasets holding
    # locks or open files work; chute.torch.DataLoader forks them too, unless the child
    # would break (JAX's runtime initialised in the process, say: so this runs in a fresh
    # interpreter, whatever this test process has started).
    import subprocess
    import sys

    script = tmp_path / "locked.py"
    script.write_text(_LOCK_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[0, 1, 2, 3], [4, 5, 6, 7]]"


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_an_unpicklable_dataset_with_spawned_workers_says_what_cannot_be_pickled(
    context: str,
) -> None:
    loader = DataLoader(Unpicklable(), batch_size=4, num_workers=2, multiprocessing_context=context)
    with pytest.raises(TypeError, match="pickle") as raised:
        iter(loader)
    notes = "\n".join(raised.value.__notes__)
    assert "Unpicklable" in notes and "cannot be pickled" in notes


def test_multiprocessing_context_is_checked() -> None:
    with pytest.raises(ValueError, match="multiprocessing_context"):
        DataLoader(Squares(), num_workers=2, multiprocessing_context="thread")
    with pytest.raises(ValueError, match="num_workers=0"):
        DataLoader(Squares(), multiprocessing_context="spawn")


class Blocking(tdata.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        if i == 2:
            threading.Event().wait()  # never set: the worker hangs here
        return i


def test_timeout_raises_when_a_worker_hangs() -> None:
    loader = DataLoader(Blocking(), batch_size=1, num_workers=1, timeout=10)
    it = iter(loader)
    got: list[int] = []
    with pytest.raises(RuntimeError, match="timed out after 10 seconds"):
        for _ in range(4):  # the batches before the hang may come, or wait in its chunk
            got.append(next(it).item())
    assert got == [0, 1][: len(got)]
    it.close()


def test_pin_memory_without_an_accelerator_warns_as_pytorch_does() -> None:
    if torch.cuda.is_available():
        pytest.skip("an accelerator is present")
    loader = DataLoader(Squares(4), batch_size=2, pin_memory=True)
    with pytest.warns(UserWarning, match="pin_memory"):
        got = list(loader)
    assert len(got) == 2


_RANK_SCRIPT = """
import json, sys
import torch
import torch.distributed as dist
from chute.torch import DataLoader, ShardByRank

rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world)
try:
    loader = DataLoader(list(range(30)), batch_size=4, shuffle=True, num_workers=1,
                        shard_options=ShardByRank(),
                        generator=torch.Generator().manual_seed(rank))
    print(json.dumps([b.tolist() for b in loader]))
finally:
    dist.destroy_process_group()
"""


def test_ranks_of_a_real_process_group_read_disjoint_shards(tmp_path: Any) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), "2", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=100) for p in ranks]
    assert all(p.returncode == 0 for p in ranks), [err for _, err in outs]
    got = [_flat(__import__("json").loads(out)) for out, _ in outs]
    assert sorted(got[0]) == list(range(15)) and sorted(got[1]) == list(range(15, 30))


def test_shard_by_rank_reads_torchrun_s_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from chute.torch import ShardByRank

    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    shard = ShardByRank(drop_remainder=True)
    assert (shard.shard_index, shard.shard_count, shard.drop_remainder) == (2, 4, True)
    loader = DataLoader(Squares(10), batch_size=None, shard_options=shard)
    assert [int(x["i"]) for x in loader] == [4, 5]


class Endless(tdata.Sampler):  # type: ignore[misc]
    def __iter__(self) -> Any:
        return iter(int, 1)


def test_an_endless_sampler_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match="has no len"):
        DataLoader(Squares(), sampler=Endless(), batch_size=2)


# -- datasets with a state of their own (torchdata's Stateful) --------------------------------


class RandomPicks(tdata.Dataset):  # type: ignore[misc]
    """Draws from torch's generator in __getitem__, and saves that generator as its state."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> list[int]:
        return [i, int(torch.randint(1000, ()))]

    def state_dict(self) -> dict[str, Any]:
        return {"rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["rng"])


def _plain_collate(batch: Any) -> Any:
    return batch


@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("stop_at", [0, 1, 7])
def test_a_stateful_dataset_resumes_its_own_state_too(workers: int, stop_at: int) -> None:
    def make() -> DataLoader:
        return DataLoader(
            RandomPicks(),
            batch_size=3,
            num_workers=workers,
            collate_fn=_plain_collate,
            generator=_gen(),
        )

    torch.manual_seed(1)  # in process, the draws come from this process's generator
    full = list(make())
    torch.manual_seed(1)
    loader = make()
    it = iter(loader)
    head = [next(it) for _ in range(stop_at)]
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    torch.manual_seed(99)  # the restore puts the dataset's generator back, whatever it was
    resumed = make()
    resumed.load_state_dict(state)
    assert head + list(resumed) == full


def test_a_stateful_dataset_s_state_needs_the_worker_count_that_saved_it() -> None:
    loader = DataLoader(RandomPicks(), batch_size=3, num_workers=2, collate_fn=_plain_collate)
    it = iter(loader)
    next(it)
    other = DataLoader(RandomPicks(), batch_size=3, num_workers=1, collate_fn=_plain_collate)
    with pytest.raises(ValueError, match="keeps a state of its own"):
        other.load_state_dict(loader.state_dict())


class Countdown(tdata.IterableDataset):  # type: ignore[misc]
    """Its own iterator (``__iter__`` returns itself without rewinding), with a state."""

    def __init__(self, n: int = 11) -> None:
        self.n, self.i, self.passes = n, 0, 0

    def __iter__(self) -> Any:
        self.passes += 1
        return self

    def __next__(self) -> int:
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i - 1

    def state_dict(self) -> dict[str, Any]:
        return {"i": self.i}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.i = state["i"]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_an_iterable_that_is_its_own_iterator_batches_and_resumes(
    workers: int, batch_size: int | None
) -> None:
    def make() -> DataLoader:
        return DataLoader(Countdown(), batch_size=batch_size, num_workers=workers)

    theirs = [
        torch.as_tensor(b).tolist()
        for b in tdata.DataLoader(Countdown(), batch_size=batch_size, num_workers=workers)
    ]
    full = [torch.as_tensor(b).tolist() for b in make()]
    assert full == theirs
    for stop_at in (0, 2, 3):
        loader = make()
        it = iter(loader)
        head = [torch.as_tensor(next(it)).tolist() for _ in range(stop_at)]
        resumed = make()
        resumed.load_state_dict(loader.state_dict())
        assert head + [torch.as_tensor(b).tolist() for b in resumed] == full


def test_a_state_taken_before_iter_pins_the_order() -> None:
    loader = DataLoader(Squares(), batch_size=4, shuffle=True)
    state = loader.state_dict()
    first = _ids(list(loader))
    other = DataLoader(Squares(), batch_size=4, shuffle=True)
    other.load_state_dict(state)
    assert _ids(list(other)) == first


def _failing_init(worker_id: int) -> None:
    raise ValueError(f"worker {worker_id} cannot set up")


def test_an_error_in_worker_init_fn_raises_itself_at_iter() -> None:
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, worker_init_fn=_failing_init)
    with pytest.raises(ValueError, match="cannot set up"):
        iter(loader)


def test_snapshot_every_n_steps_takes_zero_as_torchdata_does() -> None:
    assert len(list(DataLoader(Squares(8), batch_size=4, snapshot_every_n_steps=0))) == 2


# -- big lists reach the workers packed (pack_lists) ---------------------------------------


class Catalog(tdata.Dataset):  # type: ignore[misc]
    """A dataset holding a Python list of 60,000 small records, and a short one."""

    def __init__(self) -> None:
        self.records = [(i, f"r{i}", {"w": i * 0.5}) for i in range(60_000)]
        self.labels = ["a", "b"]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict[str, Any]:
        info = tdata.get_worker_info()
        seen = info.dataset if info is not None else self
        return {
            "record": self.records[i][0],
            "packed": type(seen.records).__name__ != "list",
            "short_list": type(seen.labels).__name__ == "list",
        }


@pytest.mark.parametrize("pack", [True, False])
def test_a_big_list_reaches_the_workers_packed_and_reads_the_same(pack: bool) -> None:
    dataset = Catalog()
    loader = DataLoader(
        dataset, batch_size=1000, shuffle=True, num_workers=2, pack_lists=pack, generator=_gen()
    )
    got = list(loader)
    assert sorted(i for b in got for i in b["record"].tolist()) == list(range(60_000))
    assert {bool(x) for b in got for x in b["packed"]} == {pack}
    assert all(bool(x) for b in got for x in b["short_list"])  # short lists go as they are
    assert type(dataset.records) is list  # the user's dataset is not changed


def test_a_packed_list_reads_elements_slices_and_negative_indices() -> None:
    from chute._accel.torch_loader import _PackedList

    items = [(i, {"k": [i]}) for i in range(5)]
    packed = _PackedList(items)
    assert [packed[i] for i in range(5)] == items and packed[-1] == items[-1]
    assert packed[1:4] == items[1:4] and len(packed) == 5
    with pytest.raises(IndexError):
        packed[5]
    assert packed.holds(items) and not packed.holds(list(items))


def test_a_list_replaced_between_epochs_is_packed_again() -> None:
    dataset = Catalog()
    loader = DataLoader(dataset, batch_size=5000, num_workers=1, generator=_gen())
    assert _flat([b["record"].tolist() for b in loader])[:2] == [0, 1]
    dataset.records = [(i + 7, "x", {}) for i in range(60_000)]
    assert _flat([b["record"].tolist() for b in loader])[:2] == [7, 8]


class Odd:
    pass


def test_a_list_of_other_objects_is_not_packed() -> None:
    from chute._accel.torch_loader import _packable

    assert not _packable([Odd()] * 60_000)
    assert not _packable(list(range(100)))
    assert _packable(list(range(60_000)))


class Images(tdata.Dataset):  # type: ignore[misc]
    """Large tensors and arrays (stacked straight into chute's shared memory in workers),
    with a bfloat16 tensor numpy cannot view and a short list."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "pixels": torch.full((3, 64, 64), i, dtype=torch.uint8),
            "depth": np.full((64, 64), i * 0.5, dtype=np.float32),
            "half": torch.full((4,), float(i), dtype=torch.bfloat16),
            "pair": (i, [i, -i]),
        }


def test_large_tensors_cross_from_workers_as_pytorch_collates_them() -> None:
    ours = list(DataLoader(Images(), batch_size=5, num_workers=2))
    theirs = list(tdata.DataLoader(Images(), batch_size=5, num_workers=2))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        for key in ("pixels", "depth", "half"):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key])
        assert torch.equal(a["pair"][0], b["pair"][0])
        assert all(torch.equal(x, y) for x, y in zip(a["pair"][1], b["pair"][1]))
    ours[0]["pixels"][0, 0, 0, 0] = 7  # the batch is the caller's to change


class Ragged(tdata.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return torch.zeros((100, 100 + i), dtype=torch.uint8)


def test_tensors_of_different_shapes_raise_pytorchs_error_from_the_worker() -> None:
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        list(DataLoader(Ragged(), batch_size=2, num_workers=2))
