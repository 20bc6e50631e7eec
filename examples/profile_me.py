"""A pipeline with a slow stage, to try ``chute profile`` on.

``make_dataset()`` "decodes" 100,000 generated 96x96 images, augments them
with a slow pure-Python brightness jitter, and batches them.  Profile it:

    chute profile examples/profile_me.py:make_dataset --seconds 5
    chute profile examples/profile_me.py:make_dataset --seconds 5 --arg workers=2

The first run reads it in this process: the table shows ``map(jitter)``
taking most of the time, and the verdict says to run it in worker
processes.  The second runs it in two workers (``where`` is ``workers``).

Run:  python examples/profile_me.py   (prints the summary of a short read)
"""

from __future__ import annotations

import numpy as np

import chute as grain


def decode(index: int) -> dict[str, np.ndarray]:
    """Stands for reading and decoding a record: a 96x96 RGB image and its label."""
    rng = np.random.default_rng(index)
    return {
        "image": rng.integers(0, 256, size=(96, 96, 3), dtype=np.uint8),
        "label": np.int32(index % 10),
    }


def jitter(record: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A deliberately slow augmentation: per-row brightness in a Python loop."""
    image = record["image"].astype(np.float32)
    for row in range(image.shape[0]):
        for channel in range(image.shape[2]):
            image[row, :, channel] *= 1.0 + 0.01 * ((row + channel) % 7 - 3)
    return {"image": image / 255.0, "label": record["label"]}


def make_dataset(workers: int = 0, batch_size: int = 32) -> grain.IterDataset:
    """The pipeline ``chute profile`` reads; ``--arg workers=2`` adds worker processes."""
    ds = (
        grain.MapDataset.range(100_000)
        .seed(0)
        .shuffle()
        .map(decode)
        .map(jitter)
        .batch(batch_size, drop_remainder=True)
        .to_iter_dataset()
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return ds


if __name__ == "__main__":
    from chute.cli import main

    raise SystemExit(main(["profile", f"{__file__}:make_dataset", "--elements", "20"]))
