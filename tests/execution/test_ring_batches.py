"""Batches that workers stack straight into shared memory are the batches made without workers."""

from __future__ import annotations

from typing import Any

import numpy as np

import chute as grain

SIDE = 48  # an element of 9 KiB: a batch of 8 goes into shared memory (32 KiB and more)
OPTIONS = grain.MultiprocessingOptions(num_workers=2)


def _image(i: int) -> np.ndarray:
    return np.full((SIDE, SIDE), i, np.float32)


def _outcomes(it: Any) -> list[Any]:
    """Every batch as a list of its images' values, or the error's type where one raised."""
    out: list[Any] = []
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return out
        except ValueError as exc:
            out.append(type(exc).__name__)
            continue
        out.append([float(image[0, 0]) for image in batch["image"]] + batch["label"].tolist())


def test_map_batches_from_workers_equal_those_made_without_workers(start_method: str) -> None:
    ds = (
        grain.MapDataset.range(400)
        .map(lambda i: {"image": _image(i), "label": i})
        .batch(8)
        .to_iter_dataset()
    )
    expected = _outcomes(iter(ds))
    assert _outcomes(iter(ds.mp_prefetch(OPTIONS))) == expected
    assert expected[1] == [*map(float, range(8, 16)), *range(8, 16)]


def _fails_at_37(i: int) -> dict[str, Any]:
    if i == 37:
        raise ValueError("element 37")
    return {"image": _image(i), "label": i}


def test_a_failing_map_batch_leaves_the_batches_around_it_as_without_workers(
    start_method: str,
) -> None:
    # The read holding the failing batch is read again one batch at a time, each
    # stacked into shared memory before the first is sent.
    ds = grain.MapDataset.range(400).map(_fails_at_37).batch(8).to_iter_dataset()
    expected = _outcomes(iter(ds))
    assert expected[4] == "ValueError" and len(expected) == 50
    assert _outcomes(iter(ds.mp_prefetch(OPTIONS))) == expected


class _Image(grain.transforms.RandomMap):
    def random_map(self, i: int, rng: np.random.Generator) -> dict[str, Any]:
        return {"image": _image(i + int(rng.integers(1))), "label": i}  # rng.integers(1): 0


def test_loader_batches_of_records_from_workers_hold_their_records(start_method: str) -> None:
    loader = grain.DataLoader(
        data_source=list(range(64)),
        sampler=grain.IndexSampler(num_records=64, shuffle=False, seed=0, num_epochs=1),
        operations=[_Image(), grain.transforms.Batch(8)],
        worker_count=2,
    )
    # Worker w batches positions w, w + 2, ...; the loader takes the workers in turn.
    expected = []
    for k in range(4):
        for w in range(2):
            ids = list(range(w + 16 * k, w + 16 * (k + 1), 2))
            expected.append([*map(float, ids), *ids])
    assert _outcomes(iter(loader)) == expected
