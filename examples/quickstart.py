"""A real training-input pipeline with chute, end to end, on generated data.

Builds an MNIST-shaped in-memory dataset, shuffles it globally, normalises
and batches it, iterates like a training loop, saves the iterator's state
half-way and shows that a fresh iterator resumes at exactly the same batch.

Run:  python examples/quickstart.py
"""

from __future__ import annotations

import json
import time

import numpy as np

import chute as grain  # the same code runs with `import grain`


def make_records(n: int = 60_000) -> list[dict[str, object]]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n)
    return [{"image": images[i], "label": int(labels[i])} for i in range(n)]


def normalise(record: dict[str, object]) -> dict[str, object]:
    return {"image": np.asarray(record["image"], np.float32) / 255.0, "label": record["label"]}


def main() -> None:
    records = make_records()
    dataset = (
        grain.MapDataset.source(records)
        .seed(42)
        .shuffle()
        .map(normalise)
        .batch(batch_size=128, drop_remainder=True)
        .to_iter_dataset()
    )
    iterator = iter(dataset)
    start = time.perf_counter()
    checkpoint, expected = None, None
    for step, batch in enumerate(iterator):
        if step == 0:
            shapes = {k: (v.shape, str(v.dtype)) for k, v in batch.items()}
            print("first batch:", shapes)
        if step == 200:
            checkpoint = json.dumps(iterator.get_state())  # what a trainer would save
        if step == 201:
            expected = batch["label"]
    seconds = time.perf_counter() - start
    rate = (step + 1) * 128 / seconds
    print(f"one epoch: {step + 1} batches in {seconds:.2f} s ({rate:,.0f} images/s)")

    resumed = iter(dataset)
    resumed.set_state(json.loads(checkpoint))
    assert np.array_equal(next(resumed)["label"], expected)
    print(f"resumed from a {len(checkpoint)}-byte checkpoint at batch 201: identical batch")


if __name__ == "__main__":
    main()
