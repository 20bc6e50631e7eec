"""RingWriter/RingReader: exact trees across processes, zero-copy views, slot reuse, no leaks."""

from __future__ import annotations

import collections
import gc
import os
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from difflib import Match  # a namedtuple that a worker can pickle by reference
from pathlib import Path
from typing import Any, NamedTuple

import cloudpickle
import numpy as np
import pytest

from chute._execution import processes
from chute._execution._ring import open_existing
from chute._execution.transport import RING_MIN_BYTES, RingReader, RingSlot, RingWriter

# Workers import functions by module name; this test module is not importable there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

_DEV_SHM = Path("/dev/shm")


class Point(NamedTuple):
    x: Any
    y: Any


def _leftovers(prefix: str) -> list[str]:
    """The ring's segments still in shared memory (looked up without the tracker)."""
    if _DEV_SHM.is_dir():
        return sorted(p.name for p in _DEV_SHM.iterdir() if p.name.startswith(prefix + "-"))
    found = []
    for generation in range(64):
        try:
            open_existing(f"{prefix}-{generation}")
        except FileNotFoundError:
            continue
        found.append(f"{prefix}-{generation}")
    return found


def _slots(message: bytes) -> list[int]:
    """The slot ids a message names."""
    (count,) = struct.unpack_from("=Q", message)
    return list(struct.unpack_from(f"={2 * count}Q", message, 8)[::2])


def _lent(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a slot (its memory is shared), not a copy."""
    return isinstance(array.base, np.ndarray) and isinstance(array.base.base, memoryview)


def _assert_same(got: Any, expected: Any) -> None:
    assert type(got) is type(expected)
    if isinstance(expected, dict):
        assert got.keys() == expected.keys()
        for key in expected:
            _assert_same(got[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_same(g, e)
    elif isinstance(expected, np.ndarray):
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
        if expected.dtype == object:
            assert got.tolist() == expected.tolist()
        else:
            np.testing.assert_array_equal(got, expected, strict=True)
    else:
        assert got == expected


def _tree(rng: np.random.Generator, i: int) -> dict[str, Any]:
    """A varied tree; every seventh one holds an array twice as large as the last (to 4 MiB)."""
    size = int(rng.integers(0, 20_000)) + (1 << (15 + i // 7) if i % 7 == 0 else 0)
    return {
        "image": rng.integers(0, 255, size, dtype=np.uint8),
        "floats": rng.standard_normal((int(rng.integers(1, 5000)), 3)).astype(np.float32),
        "fortran": np.asfortranarray(rng.standard_normal((40 + i, 100))),
        "strided": np.arange(3000)[::3],
        "text": f"element {i}",
        "strings": np.array(["a", "bc", str(i)] * 50),
        "objects": np.array([i, "x", None], dtype=object),
        "scalar": np.float64(i / 3),
        "zero_d": np.array(i),
        "empty": np.zeros((0, 4), np.int16),
        "nested": (i, [b"raw", Match(i, np.arange(i % 5 * 300), None)], {"deep": (None,)}),
        "flags": np.ones(2000, bool),
    }


def _start(fn: Any, *args: Any) -> tuple[Any, Any, Any]:
    """Runs ``fn(results, credits, *args)`` in a worker process; returns it and our ends."""
    ctx = processes.context()
    results, results_end = ctx.Pipe(duplex=False)
    credits_end, credits = ctx.Pipe(duplex=False)
    code = (
        "import cloudpickle\nfn, args = cloudpickle.loads(payload)\nfn(results, credits, *args)\n"
    )
    namespace = {"payload": cloudpickle.dumps((fn, args)), "results": results_end}
    namespace["credits"] = credits_end
    process = processes.start(exec, (code, namespace), name="ring-writer")
    results_end.close()
    credits_end.close()
    return process, results, credits


@pytest.fixture
def ring() -> Iterator[tuple[RingReader, RingWriter]]:
    reader = RingReader()
    writer = RingWriter(reader.prefix)
    yield reader, writer
    writer.close()
    reader.close()
    assert _leftovers(reader.prefix) == []


def test_round_trips_every_kind_of_leaf_exactly(ring: tuple[RingReader, RingWriter]) -> None:
    reader, writer = ring
    rng = np.random.default_rng(0)
    for i in range(15):
        tree = _tree(rng, i)
        _assert_same(reader.decode(writer.encode(tree)), tree)
    tree = [Point(np.arange(5000), "y"), (), {}, None, 3, "s", b"b", np.int8(3)]
    _assert_same(reader.decode(writer.encode(tree)), tree)


def test_large_arrays_go_through_the_ring_small_ones_inline(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    big, small = np.ones(1 << 18, np.uint8), np.ones(RING_MIN_BYTES - 1, np.uint8)
    through_ring, inline = writer.encode({"big": big}), writer.encode({"small": small})
    assert len(through_ring) < 300 and len(inline) > small.nbytes
    _assert_same(reader.decode(through_ring), {"big": big})
    _assert_same(reader.decode(inline), {"small": small})


def test_held_arrays_keep_their_slots_and_their_writability(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    frozen = np.arange(1 << 14, dtype=np.int32)
    frozen.flags.writeable = False
    kept = reader.decode(writer.encode({"live": np.arange(1 << 14), "frozen": frozen}))
    for i in range(100):  # many messages while those arrays are held
        reader.decode(writer.encode(np.full(20_000, i, np.int64)))
    assert kept["live"].flags.writeable and not kept["frozen"].flags.writeable
    np.testing.assert_array_equal(kept["live"], np.arange(1 << 14))
    np.testing.assert_array_equal(kept["frozen"], frozen)


def test_decoded_arrays_are_views_of_shared_memory_not_copies(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    got = reader.decode(writer.encode(np.ones(1 << 16)))
    assert _lent(got) and reader.lent_bytes == 8 << 16
    del got
    gc.collect()
    assert reader.lent_bytes == 0


def test_a_slot_is_reused_once_every_array_over_it_is_gone(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    first = writer.encode(np.arange(10_000))
    tail = reader.decode(first)[-10:]  # a slice keeps the whole slot
    second = writer.encode(np.arange(10_000))
    assert _slots(second) != _slots(first)
    reader.decode(second)  # dropped at once: its slot is free again
    assert _slots(writer.encode(np.arange(10_000))) == _slots(second)
    assert tail.tolist() == list(range(9_990, 10_000))
    del tail
    gc.collect()
    assert _slots(writer.encode(np.arange(10_000))) in (_slots(first), _slots(second))


def test_slots_are_reused_when_consumed_and_their_names_go_at_once(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    in_flight: collections.deque[tuple[int, bytes]] = collections.deque()
    used: set[int] = set()
    for i in range(300):  # four messages behind, each array kept until the next one
        message = writer.encode({"x": np.full(40_000 + i, i % 251, np.uint8), "i": i})
        used.update(_slots(message))
        in_flight.append((i, message))
        while in_flight and (len(in_flight) > 4 or i == 299):
            j, message = in_flight.popleft()
            got = reader.decode(message)
            assert got["i"] == j
            np.testing.assert_array_equal(got["x"], np.full(40_000 + j, j % 251, np.uint8))
    assert len(used) <= 7
    assert _leftovers(reader.prefix) == [f"{reader.prefix}-0"]  # only the control segment


def test_a_slot_that_no_claim_needs_any_more_is_retired(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    held = [reader.decode(writer.encode(np.full(10_000, i))) for i in range(3)]  # 3 slots at once
    assert len(writer._open().slots) == 3
    del held
    gc.collect()
    for i in range(200):  # one array at a time from now on: one slot serves them all
        assert int(reader.decode(writer.encode(np.full(10_000, i)))[0]) == i
    assert len(writer._open().slots) == 1  # the two idle ones left the worker's memory


def _resident_shared_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssShmem:"):
                return int(line.split()[1]) / 1024
    pytest.skip("this kernel does not report RssShmem")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_a_returned_slot_stops_counting_in_the_readers_resident_memory(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    message = writer.encode(np.ones(32 << 20, np.uint8))  # the writer's pages stay resident
    got = reader.decode(message)
    assert int(got[::4096].sum()) == 8192  # every page read, so mapped in the reader
    held = _resident_shared_mib()
    del got
    gc.collect()
    assert held - _resident_shared_mib() >= 30  # gone from the reader, not from the writer
    again = reader.decode(writer.encode(np.full(32 << 20, 7, np.uint8)))  # the same slot
    assert int(again[::4096].sum()) == 7 * 8192


def test_past_the_lend_limit_arrays_are_copied_and_their_slots_freed() -> None:
    with RingReader(lend_limit=100_000) as reader:
        writer = RingWriter(reader.prefix)
        held = [reader.decode(writer.encode(np.full(5_000, i))) for i in range(5)]  # 40 kB each
        assert [_lent(a) for a in held] == [True, True, False, False, False]
        assert reader.lent_bytes == 80_000
        assert [int(a[0]) for a in held] == [0, 1, 2, 3, 4]
        assert len(writer._slots.slots) == 3  # the copied ones went back at once
    with RingReader(lend_limit=0) as reader:
        writer = RingWriter(reader.prefix)
        assert not _lent(reader.decode(writer.encode(np.ones(50_000))))


def test_bad_lend_limits_raise_value_error() -> None:
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="lend_limit"):
            RingReader(lend_limit=bad)  # type: ignore[arg-type]


def test_reserve_builds_a_batch_in_place(ring: tuple[RingReader, RingWriter]) -> None:
    reader, writer = ring
    rows = [np.full((64, 64), i, np.float32) for i in range(8)]
    slot, view = writer.reserve((8, 64, 64), np.float32)
    np.stack(rows, out=view)
    message = writer.encode({"batch": slot, "tiny": writer.reserve(3, np.int8)[0]})
    assert len(message) < 300  # the reserved arrays travel without a copy
    got = reader.decode(message)
    np.testing.assert_array_equal(got["batch"], np.stack(rows), strict=True)
    assert got["tiny"].shape == (3,) and got["batch"].flags.writeable
    with pytest.raises(ValueError, match="already sent"):
        writer.encode(slot)


def test_a_reserved_view_in_the_tree_is_copied(ring: tuple[RingReader, RingWriter]) -> None:
    reader, writer = ring
    _, view = writer.reserve((1000, 10), np.int64)
    expected = np.arange(10_000).reshape(1000, 10)
    view[...] = expected
    _assert_same(reader.decode(writer.encode([view[::2], view])), [expected[::2], expected])


def test_reserve_rejects_object_dtypes_and_negative_shapes(
    ring: tuple[RingReader, RingWriter],
) -> None:
    _, writer = ring
    with pytest.raises(TypeError, match="holds objects"):
        writer.reserve(3, object)
    with pytest.raises(ValueError, match="negative"):
        writer.reserve((2, -1), np.uint8)
    assert isinstance(writer.reserve(np.int64(2), np.uint8)[0], RingSlot)


def test_messages_decode_in_any_order(ring: tuple[RingReader, RingWriter]) -> None:
    reader, writer = ring
    first, second = (writer.encode(np.full(5000, i)) for i in range(2))
    assert int(reader.decode(second)[0]) == 1 and int(reader.decode(first)[0]) == 0


def test_dropped_messages_keep_only_their_own_slots(ring: tuple[RingReader, RingWriter]) -> None:
    reader, writer = ring
    dropped = []
    for i in range(60):
        message = writer.encode(np.full(5000, i))
        if i % 3:
            dropped.append(message)
        else:
            np.testing.assert_array_equal(reader.decode(message), np.full(5000, i))
    assert len(writer._slots.slots) == len(dropped)  # a decoded message's slot went to the next
    assert len(_leftovers(reader.prefix)) <= len(dropped) + 1  # theirs, and the control segment


def test_failed_encode_leaves_the_ring_usable(ring: tuple[RingReader, RingWriter]) -> None:
    reader, writer = ring
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        writer.encode({"big": np.ones(50_000), "fn": lambda: 0})
    _assert_same(reader.decode(writer.encode({"big": np.ones(50_000)})), {"big": np.ones(50_000)})


def _states(writer: RingWriter) -> list[int]:
    """The state word of each slot the writer holds (0: free)."""
    return [int(segment.head[0]) for segment in writer._slots.slots.values()]


def test_failed_encodes_give_back_the_slots_they_claimed(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    for i in range(20):
        with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
            writer.encode({"big": np.full(1 << 17, i), "fn": lambda: 0})  # 1 MiB
    assert _states(writer) == [0]  # one slot, reused each time, free again
    assert len(_leftovers(reader.prefix)) == 2  # it and the control segment


def test_reserved_slots_of_a_failed_encode_become_copies_another_pickler_sends(
    ring: tuple[RingReader, RingWriter],
) -> None:
    _, writer = ring
    slot, view = writer.reserve((4, 10_000), np.int64)
    view[:] = np.arange(10_000)
    tree = {"batch": slot, "fn": lambda: 7}
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        writer.encode(tree)
    assert _states(writer) == [0]
    writer.encode(np.ones(40_000))  # the freed slot is reused and overwritten
    again = cloudpickle.loads(cloudpickle.dumps(tree))
    np.testing.assert_array_equal(again["batch"], np.tile(np.arange(10_000), (4, 1)))
    assert again["fn"]() == 7


def test_a_reserved_slot_left_out_of_the_message_goes_back(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    writer.reserve(50_000, np.uint8)
    assert reader.decode(writer.encode({"small": 1})) == {"small": 1}
    assert _states(writer) == [0]


def test_a_reserved_slot_sent_after_another_message_arrives_as_a_copy(
    ring: tuple[RingReader, RingWriter],
) -> None:
    reader, writer = ring
    batches = [np.full((4, 10_000), i, np.int64) for i in range(3)]
    slots = []
    for batch in batches:  # several batches made before the first is sent
        slot, view = writer.reserve(batch.shape, batch.dtype)
        view[...] = batch
        slots.append(slot)
    first = writer.encode({"batch": slots[0]})
    assert _states(writer).count(0) == 2  # the two slots not sent went back at once
    writer.encode(np.full(40_000, -1))  # and are reused: their arrays were copied before
    rest = [reader.decode(writer.encode({"batch": slot})) for slot in slots[1:]]
    _assert_same([reader.decode(first), *rest], [{"batch": b} for b in batches])


def test_closed_reader_stops_the_writer_and_leaves_nothing() -> None:
    reader = RingReader()
    writer = RingWriter(reader.prefix)
    message = writer.encode(np.ones(10_000))
    reader.close()
    reader.close()
    assert _leftovers(reader.prefix) == []
    with pytest.raises(BrokenPipeError):
        writer.encode(np.ones(10))
    with pytest.raises(ValueError, match="closed"):
        reader.decode(message)
    with pytest.raises(FileNotFoundError, match="no RingReader"):
        RingWriter(reader.prefix)
    assert _leftovers(reader.prefix) == []


def test_garbage_collected_reader_unlinks_its_ring() -> None:
    reader = RingReader()
    prefix = reader.prefix
    RingWriter(prefix).encode(np.ones(10_000))
    assert len(_leftovers(prefix)) == 2
    del reader
    gc.collect()
    assert _leftovers(prefix) == []


@pytest.mark.parametrize("prefix", ["", "a/b", 3])
def test_bad_writer_arguments_raise_value_error(prefix: Any) -> None:
    with pytest.raises(ValueError, match="prefix"):
        RingWriter(prefix)


def _send_trees(results: Any, credits: Any, prefix: str, count: int) -> None:
    writer = RingWriter(prefix)
    rng = np.random.default_rng(7)
    for i in range(count):
        results.send_bytes(writer.encode(_tree(rng, i)))


def test_trees_from_a_worker_process_arrive_exactly() -> None:
    with RingReader() as reader:
        count = 50
        process, results, _ = _start(_send_trees, reader.prefix, count)
        rng = np.random.default_rng(7)
        in_flight: collections.deque[bytes] = collections.deque()
        for i in range(count + 3):
            if i < count:
                in_flight.append(results.recv_bytes())
            if i >= 3:  # decode three messages behind
                message = in_flight.popleft()
                _assert_same(reader.decode(message), _tree(rng, i - 3))
        process.join(timeout=30)
        assert process.exitcode == 0
    assert _leftovers(reader.prefix) == []


def _send_until_killed(results: Any, credits: Any, prefix: str) -> None:
    writer = RingWriter(prefix)
    for size in (1 << 15, 1 << 16, 1 << 17, 1 << 19):
        results.send_bytes(writer.encode({"x": np.ones(size, np.uint8)}))
    results.send_bytes(b"ready")
    credits.recv_bytes()  # wait to be killed


def test_killed_writer_then_close_leaves_no_segments() -> None:
    reader = RingReader()
    process, results, _ = _start(_send_until_killed, reader.prefix)
    try:
        messages = [results.recv_bytes() for _ in range(5)]
        assert messages[-1] == b"ready"
        assert [reader.decode(m)["x"].sum() for m in messages[:2]] == [1 << 15, 1 << 16]
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=30)
    assert process.exitcode == -signal.SIGKILL
    assert len(_leftovers(reader.prefix)) >= 3
    reader.close()
    assert _leftovers(reader.prefix) == []


def test_interpreter_exit_without_close_leaves_nothing_and_no_warnings() -> None:
    code = """
        import multiprocessing, numpy as np
        from chute._execution.transport import RingReader
        CHILD = '''
        import numpy as np
        from chute._execution.transport import RingWriter
        writer = RingWriter(prefix)
        for size in (1 << 15, 1 << 16, 1 << 18):
            conn.send_bytes(writer.encode({"x": np.ones(size, np.uint8)}))
        '''
        if __name__ == "__main__":
            ctx = multiprocessing.get_context("forkserver")
            reader = RingReader()
            receive, send = ctx.Pipe(duplex=False)
            args = (CHILD.replace("\\n        ", "\\n"), {"conn": send, "prefix": reader.prefix})
            process = ctx.Process(target=exec, args=args)
            process.start()
            send.close()
            assert reader.decode(receive.recv_bytes())["x"].sum() == 1 << 15
            receive.recv_bytes()
            process.join()
            print(reader.prefix)
        """
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no resource_tracker warnings or tracebacks
    assert result.stdout.strip().startswith("chute-")
    assert _leftovers(result.stdout.strip()) == []


def _batch(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 255, (32, 150, 1000), dtype=np.uint8)


def _send_batches(results: Any, credits: Any, prefix: str, count: int) -> None:
    with RingWriter(prefix) as writer:
        for i in range(count):
            credits.recv_bytes()
            results.send_bytes(writer.encode({"image": _batch(i), "label": np.arange(i, i + 32)}))


def test_batches_streamed_from_a_worker_arrive_exactly_in_a_few_reused_slots() -> None:
    count, window, held = 40, 4, 3
    with RingReader() as reader:
        process, results, credits = _start(_send_batches, reader.prefix, count)
        for _ in range(window):
            credits.send_bytes(b"1")
        used: set[int] = set()
        kept: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(maxlen=held)
        for i in range(count):
            message = results.recv_bytes()
            used.update(_slots(message))
            tree = reader.decode(message)
            np.testing.assert_array_equal(tree["image"], _batch(i), strict=True)
            np.testing.assert_array_equal(tree["label"], np.arange(i, i + 32))
            kept.append((i, tree))
            if i + window < count:
                credits.send_bytes(b"1")
        process.join(timeout=30)
        assert process.exitcode == 0
        # slots are reused, never overwritten while a batch over them is alive
        assert len(used) <= window + held
        for i, tree in kept:
            np.testing.assert_array_equal(tree["image"], _batch(i), strict=True)
    assert _leftovers(reader.prefix) == []
