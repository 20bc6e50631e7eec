"""A DataLoader's random map draws each record's own numbers when chunks run on threads."""

from __future__ import annotations

import pickle
import threading

import numpy as np

import chute as grain
from chute._loader.pipeline import _OnData
from chute._loader.record import Record, RecordMetadata

SEED = 7


def _draws(rng: np.random.Generator) -> list[int]:
    return rng.integers(0, 1 << 30, size=4).tolist()


def _expected(position: int) -> list[int]:
    """The numbers record ``position`` draws: Philox keyed by the seed plus its position."""
    return _draws(np.random.Generator(np.random.Philox(key=SEED + position)))


def test_records_on_two_threads_draw_their_own_numbers() -> None:
    both_hold_a_generator = threading.Barrier(2, timeout=10)
    drawn: dict[int, list[int]] = {}

    def draw(data: int, rng: np.random.Generator) -> int:
        both_hold_a_generator.wait()  # the other thread has set up its record's generator
        drawn[data] = _draws(rng)
        return data

    on_data = _OnData(draw, "random_map", SEED)
    threads = [
        threading.Thread(target=on_data, args=(Record(RecordMetadata(p, p), p),)) for p in (3, 5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert drawn == {3: _expected(3), 5: _expected(5)}


def _draw_only(data: int, rng: np.random.Generator) -> list[int]:
    return _draws(rng)


def test_a_pickled_random_map_still_draws_per_record() -> None:
    on_data = pickle.loads(pickle.dumps(_OnData(_draw_only, "random_map", SEED)))
    assert on_data(Record(RecordMetadata(4, 4), 0)).data == _expected(4)


class Draw(grain.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> list[int]:
        return _draws(rng)


def test_loader_draws_do_not_depend_on_workers_or_threads() -> None:
    def run(workers: int) -> list[list[int]]:
        loader = grain.DataLoader(
            data_source=list(range(64)),
            sampler=grain.IndexSampler(num_records=64, shuffle=False, seed=SEED, num_epochs=1),
            operations=[Draw()],
            worker_count=workers,
            read_options=grain.ReadOptions(num_threads=4, prefetch_buffer_size=16),
        )
        return list(loader)

    expected = [_expected(p) for p in range(64)]
    assert run(0) == expected
    assert run(2) == expected
