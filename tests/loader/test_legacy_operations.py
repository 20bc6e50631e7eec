"""Grain's legacy operations are callables over iterators of records, in both directions."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import cloudpickle
import numpy as np
import pytest

import chute
from chute import Record, RecordMetadata
from chute.experimental import PackAndBatchOperation

# Worker processes import functions by module name; this test module is not importable there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _records(n: int, seed: int | None = None) -> Iterator[Record]:
    for i in range(n):
        rng = np.random.Generator(np.random.Philox(key=seed + i)) if seed is not None else None
        yield Record(RecordMetadata(index=i, record_key=i + 100, rng=rng), i)


def test_chute_operations_called_on_iterators_give_grains_records() -> None:
    ops = [
        chute.MapOperation(lambda x: x + 1),
        chute.FilterOperation(lambda x: x % 2 == 0),
        chute.BatchOperation(batch_size=2),
    ]
    it: Iterator[Record] = _records(7)
    for op in ops:
        it = op(it)
    got = [(r.metadata.index, r.metadata.record_key, r.data.tolist()) for r in it]
    # Grain 0.2.18: the batch keeps its last record's metadata, without the record key.
    assert got == [(3, None, [2, 4]), (5, None, [6])]


def test_random_map_operation_uses_each_records_rng() -> None:
    op = chute.RandomMapOperation(lambda x, rng: x * 1000 + int(rng.integers(0, 1000)))
    got = [r.data for r in op(_records(3, seed=5))]
    want = [i * 1000 + int(np.random.Generator(np.random.Philox(key=5 + i)).integers(0, 1000))
            for i in range(3)]  # fmt: skip
    assert got == want


def test_batch_operation_drops_the_remainder_when_asked() -> None:
    got = [r.data.tolist() for r in chute.BatchOperation(3, drop_remainder=True)(_records(7))]
    assert got == [[0, 1, 2], [3, 4, 5]]


def test_batch_operation_on_records_of_different_structures_raises_grains_type_error() -> None:
    from chute._core.tree import StructureMismatchError

    data = [{"a": 1}, {"b": 2}]
    records = [Record(RecordMetadata(index=i), d) for i, d in enumerate(data)]
    with pytest.raises(TypeError) as info:
        list(chute.BatchOperation(batch_size=2)(records))
    # Grain 0.2.18 raises TypeError; chute's error is still the StructureMismatchError
    # (a ValueError) it raised before.
    assert isinstance(info.value, StructureMismatchError)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert message.startswith(
        "Record structures do not match. Record at position 0 has structure {'a': int}, "
        "while records at positions [1] have structures [{'b': int}]. chute: "
    )
    loader = chute.DataLoader(
        data_source=data,
        sampler=chute.SequentialSampler(2, chute.NoSharding()),
        operations=[chute.BatchOperation(batch_size=2)],
    )
    with pytest.raises(TypeError):  # Grain's DataLoader raises TypeError too
        list(loader)


def test_pack_and_batch_operation_is_callable_on_records() -> None:
    records = (
        Record(RecordMetadata(index=i, record_key=i), np.arange(1, n + 1))
        for i, n in enumerate([3, 2, 4])
    )
    op = PackAndBatchOperation(length_struct=5, batch_size=2)
    (batch,) = [r.data for r in op(records)]
    data, segments, _ = batch
    assert data.tolist() == [[1, 2, 3, 1, 2], [1, 2, 3, 4, 0]]
    assert segments.tolist() == [[1, 1, 1, 2, 2], [1, 1, 1, 1, 0]]


def test_a_user_error_in_an_operation_call_keeps_its_type_and_gets_a_note() -> None:
    op = chute.MapOperation(lambda x: 1 // (x - 1))
    it = op(_records(3))
    next(it)
    with pytest.raises(ZeroDivisionError) as info:
        next(it)
    assert "position 1" in "".join(info.value.__notes__)


class PairUp:
    """A user's own operation, written the way Grain's legacy operations are."""

    def __call__(self, records: Iterator[Record]) -> Iterator[Record]:
        held = None
        for record in records:
            if held is None:
                held = record
            else:
                yield Record(record.metadata, held.data * 10 + record.data)
                held = None


def _loader(operations: list, workers: int) -> chute.DataLoader:
    return chute.DataLoader(
        data_source=chute.RangeDataSource(0, 8, 1),
        sampler=chute.SequentialSampler(8, chute.NoSharding()),
        operations=operations,
        worker_count=workers,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_a_users_callable_operation_runs_in_the_data_loader(workers: int) -> None:
    ops = [chute.MapOperation(lambda x: x + 1), PairUp(), chute.MapOperation(lambda x: -x)]
    got = list(_loader(ops, workers))
    if workers == 0:  # Grain 0.2.18 gives this with 0 workers
        assert got == [-12, -34, -56, -78]
    else:  # each worker pairs the records it reads: 0, 2, 4, 6 and 1, 3, 5, 7
        assert sorted(got) == sorted([-13, -57, -24, -68])


class Shift:
    def __call__(self, records: Iterator[Record]) -> Iterator[Record]:
        for record in records:
            yield Record(record.metadata, record.data + 100)


@pytest.mark.parametrize("workers", [0, 2])
def test_checkpoints_resume_through_an_element_wise_user_operation(workers: int) -> None:
    loader = _loader([Shift()], workers)
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = it.get_state()
    rest = list(it)
    again = iter(loader)
    again.set_state(state)
    assert list(again) == rest
    assert sorted(head + rest) == list(range(100, 108))


def test_things_that_are_not_operations_are_refused_when_the_loader_is_built() -> None:
    with pytest.raises(TypeError, match="iterator of Records"):
        _loader([42], 0)


def test_a_function_of_one_element_given_as_an_operation_says_how_to_wrap_it() -> None:
    loader = _loader([lambda x: x + 1], 0)
    with pytest.raises(TypeError) as info:
        list(loader)
    assert "chute.transforms.Map(fn)" in "".join(info.value.__notes__)
