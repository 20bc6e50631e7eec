"""CacheIterDataset: one read of the parent, replayed from memory, exact checkpoints.

The behaviours marked "Grain" were observed from Grain 0.2.18's
``grain.experimental.CacheIterDataset`` on the same pipelines.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from chute import CheckpointError, IteratorClosedError, MapDataset, ReadOptions
from chute._stages.cache import CacheIterDataset
from chute.experimental import (
    RepeatIterDataset,
    ThreadPrefetchIterDataset,
    assert_equal_output_after_checkpoint,
)

INLINE = ReadOptions(num_threads=0, prefetch_buffer_size=0)  # reads exactly what is asked


class BadRecord(Exception):
    pass


class Counted:
    """A map function that records which elements the parent read."""

    def __init__(self, fail_on: tuple[int, ...] = ()) -> None:
        self.calls: list[int] = []
        self.fail_on = fail_on

    def __call__(self, x: int) -> int:
        self.calls.append(x)
        if x in self.fail_on:
            raise BadRecord(f"bad {x}")
        return x * 10


def _cached(n: int, fn: Counted) -> CacheIterDataset:
    return CacheIterDataset(MapDataset.range(n).to_iter_dataset(INLINE).map(fn))


def _drain(it: Any) -> list[Any]:
    out: list[Any] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except BadRecord as exc:
            out.append(str(exc))


# -- the cache ------------------------------------------------------------------------------


def test_later_epochs_come_from_memory_and_the_parent_is_read_once() -> None:
    fn = Counted()
    ds = RepeatIterDataset(_cached(5, fn), num_epochs=4)
    assert list(ds) == [0, 10, 20, 30, 40] * 4  # Grain
    assert fn.calls == [0, 1, 2, 3, 4]


def test_a_cache_under_a_batch_replays_whole_epochs() -> None:
    ds = RepeatIterDataset(CacheIterDataset(MapDataset.range(4).to_iter_dataset()).batch(3), 2)
    assert [b.tolist() for b in ds] == [[0, 1, 2], [3], [0, 1, 2], [3]]  # Grain


def test_each_new_iterator_has_its_own_cache_and_reads_the_parent_again() -> None:
    fn = Counted()
    ds = _cached(3, fn)
    assert list(ds) == list(ds) == [0, 10, 20]
    assert fn.calls == [0, 1, 2, 0, 1, 2]  # Grain: the cache lives in the iterator


def test_the_state_is_the_position_and_whether_the_parent_has_ended() -> None:
    it = iter(_cached(3, Counted()))
    states = [it.get_state()]
    for _ in range(3):
        next(it)
        states.append(it.get_state())
    with pytest.raises(StopIteration):
        next(it)
    states.append(it.get_state())
    # Grain: the cache is complete only once the parent has raised StopIteration.
    assert [(s["position"], s["pulls"], s["complete"]) for s in states] == [
        (0, 0, False),
        (1, 1, False),
        (2, 2, False),
        (3, 3, False),
        (3, 3, True),
    ]
    assert states[0]["stage"] == "cache"


def test_moving_back_within_the_cache_reads_nothing_from_the_parent() -> None:
    fn = Counted()
    it = iter(_cached(6, fn))
    start = it.get_state()
    assert [next(it) for _ in range(4)] == [0, 10, 20, 30]
    at_two = None
    it.set_state(start)
    assert [next(it), next(it)] == [0, 10]
    at_two = it.get_state()
    assert fn.calls == [0, 1, 2, 3]
    assert list(it) == [20, 30, 40, 50]  # the cache, then the parent goes on where it was
    it.set_state(at_two)
    assert list(it) == [20, 30, 40, 50]
    assert fn.calls == [0, 1, 2, 3, 4, 5]


def test_elements_are_kept_as_they_are_not_copied() -> None:
    def touch(d: dict[str, int]) -> dict[str, int]:
        d["n"] = d.get("n", 0) + 1
        return d

    ds = CacheIterDataset(MapDataset.range(2).to_iter_dataset().map(lambda x: {"x": x}))
    out = list(RepeatIterDataset(ds, 3).map(touch))
    # Grain: the same dict objects come back each epoch, so each was touched 3 times.
    assert out == [{"x": 0, "n": 3}, {"x": 1, "n": 3}] * 3


def test_an_empty_parent_gives_empty_epochs() -> None:
    assert list(RepeatIterDataset(CacheIterDataset(MapDataset.range(0).to_iter_dataset()), 3)) == []


def test_a_map_dataset_parent_is_read_in_order() -> None:
    assert list(CacheIterDataset(MapDataset.range(3).map(lambda x: x + 1))) == [1, 2, 3]  # Grain


# -- checkpoints ------------------------------------------------------------------------


def test_checkpoints_restore_exactly() -> None:
    parent = MapDataset.range(23).seed(3).shuffle().to_iter_dataset().filter(lambda x: x % 4)
    assert_equal_output_after_checkpoint(CacheIterDataset(parent), epochs=3)
    assert_equal_output_after_checkpoint(RepeatIterDataset(CacheIterDataset(parent), 3))


def test_a_fresh_restore_reads_the_parent_as_far_as_the_saving_run_had() -> None:
    fn = Counted()
    ds = _cached(5, fn)
    it = iter(ds)
    assert [next(it), next(it)] == [0, 10]
    state = json.loads(json.dumps(it.get_state()))
    fn.calls.clear()
    fresh = iter(ds)
    fresh.set_state(state)
    assert fn.calls == [0, 1]
    assert list(fresh) == [20, 30, 40]
    assert fn.calls == [0, 1, 2, 3, 4]


def test_a_fresh_restore_in_a_later_epoch_rebuilds_the_cache_once() -> None:
    fn = Counted()
    ds = RepeatIterDataset(_cached(5, fn), num_epochs=3)
    it = iter(ds)
    for _ in range(7):  # into the second epoch
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    fn.calls.clear()
    fresh = iter(ds)
    fresh.set_state(state)
    assert fn.calls == [0, 1, 2, 3, 4]
    assert list(fresh) == [20, 30, 40, 0, 10, 20, 30, 40]
    assert fn.calls == [0, 1, 2, 3, 4]  # the third epoch comes from memory


def test_a_restore_skips_errors_the_saving_run_already_reported() -> None:
    fn = Counted(fail_on=(1, 3))
    ds = _cached(6, fn)
    it = iter(ds)
    assert _drain_n(it, 4) == [0, "bad 1", 20, "bad 3"]
    state = it.get_state()
    assert (state["position"], state["pulls"]) == (2, 4)
    fresh = iter(ds)
    fresh.set_state(state)
    assert _drain(fresh) == _drain(it) == [40, 50]


def _drain_n(it: Any, count: int) -> list[Any]:
    out: list[Any] = []
    while len(out) < count:
        try:
            out.append(next(it))
        except BadRecord as exc:
            out.append(str(exc))
    return out


def test_a_position_past_the_parents_end_is_rejected() -> None:
    it = iter(_cached(3, Counted()))
    state = it.get_state() | {"position": 5, "pulls": 5, "complete": True}
    with pytest.raises(CheckpointError, match="only 3 elements in 5 reads"):
        it.set_state(state)


def _state(**fields: Any) -> dict[str, Any]:
    return {"version": 1, "stage": "cache", "position": 0, "pulls": 0, "complete": False} | fields


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"version": 1, "stage": "repeat", "position": 0}, "different pipeline"),
        ({"version": 1, "stage": "cache", "position": 0}, r"lacks \['pulls', 'complete'\]"),
        (_state(position=-1), "position must be an int >= 0"),
        (_state(position="1"), "position must be an int >= 0"),
        (_state(pulls=True), "pulls must be an int >= 0"),
        (_state(complete="no"), "must be a bool"),
    ],
)
def test_bad_states_are_rejected_clearly(state: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        iter(_cached(3, Counted())).set_state(state)


# -- errors and lifecycle ---------------------------------------------------------------


def test_a_parent_error_keeps_its_note_and_is_not_cached() -> None:
    fn = Counted(fail_on=(2,))
    it = iter(RepeatIterDataset(_cached(4, fn), 2))
    out: list[Any] = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            break
        except BadRecord as exc:
            out.append(exc)
    error = out[2]
    assert isinstance(error, BadRecord)
    assert any("while processing element index 2" in note for note in error.__notes__)
    # The failed element has no value to keep: the second epoch, read from memory, skips it.
    # (Grain 0.2.18 breaks down with an IndexError after such an error.)
    assert out[:2] + out[3:] == [0, 10, 30, 0, 10, 30]
    assert fn.calls == [0, 1, 2, 3]


def test_close_closes_the_parent_and_frees_the_cache() -> None:
    before = set(threading.enumerate())
    ds = CacheIterDataset(ThreadPrefetchIterDataset(MapDataset.range(100), prefetch_buffer_size=4))
    it = iter(ds)
    assert [next(it), next(it)] == [0, 1]
    it.close()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(IteratorClosedError):
        next(it)
    with pytest.raises(IteratorClosedError):
        it.set_state(it.get_state())


@pytest.mark.parametrize("parent", [[1, 2], 3, None])
def test_a_parent_that_is_not_a_dataset_is_rejected(parent: Any) -> None:
    with pytest.raises(TypeError, match="CacheIterDataset reads an IterDataset or a MapDataset"):
        CacheIterDataset(parent)


# -- failed reads on restore ------------------------------------------------------------


class Transient(Counted):
    """Raises ``ConnectionError`` once, at element ``armed``."""

    def __init__(self, fail_on: tuple[int, ...] = (), armed: int | None = None) -> None:
        super().__init__(fail_on)
        self.armed = armed

    def __call__(self, x: int) -> int:
        if x == self.armed:
            self.armed = None
            raise ConnectionError(f"the bucket did not answer for element {x}")
        return super().__call__(x)


def test_a_transient_error_while_catching_up_raises_and_loses_nothing() -> None:
    it = iter(RepeatIterDataset(_cached(6, Transient()), 2))
    assert [next(it) for _ in range(7)][-1] == 0  # the second epoch, from memory
    state = json.loads(json.dumps(it.get_state()))
    again = iter(RepeatIterDataset(_cached(6, Transient(armed=2)), 2))
    with pytest.raises(ConnectionError, match="did not answer") as info:
        again.set_state(state)
    assert "did not fail in the run that saved the checkpoint" in "".join(info.value.__notes__)
    again.set_state(state)  # the cause has gone: the restore completes
    assert list(again) == [10, 20, 30, 40, 50]


def test_a_read_that_failed_before_the_checkpoint_is_passed_over_on_restore() -> None:
    it = iter(_cached(6, Counted(fail_on=(1,))))
    assert _drain(it)[:3] == [0, "bad 1", 20]
    state = iter(_cached(6, Counted(fail_on=(1,))))
    head = [next(state)]
    with pytest.raises(BadRecord):
        next(state)
    head.append(next(state))
    saved = json.loads(json.dumps(state.get_state()))
    assert saved["failed"] == [1] and saved["pulls"] == 3 and head == [0, 20]
    for fn in (Counted(fail_on=(1,)), Counted()):  # it fails again, or it reads fine now
        again = iter(RepeatIterDataset(_cached(6, fn), 2))
        again.set_state({**again.get_state(), "parent": saved})
        assert _drain(again) == [30, 40, 50, 0, 20, 30, 40, 50]


def test_a_cache_state_without_failed_reads_restores_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    it = iter(_cached(4, Counted(fail_on=(1,))))
    next(it)
    with pytest.raises(BadRecord):
        next(it)
    state = it.get_state()
    del state["failed"]  # as chute wrote it before it recorded failed reads
    again = iter(_cached(4, Counted(fail_on=(1,))))
    with caplog.at_level("WARNING", logger="chute"):
        again.set_state(state)
    assert list(again) == [20, 30]
    assert "does not record which pulls failed" in caplog.text
