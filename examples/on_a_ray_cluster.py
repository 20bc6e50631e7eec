"""A pipeline's workers on a Ray cluster: same batches, a checkpoint, a lost worker, a resume.

Starts a local Ray cluster (or joins the one ``RAY_ADDRESS`` names), runs an
image-augmentation pipeline with two Ray workers, shows that it yields exactly
what two local worker processes yield, saves a checkpoint half-way, loses a
worker to SIGKILL (as a preempted node would) and goes on without losing or
repeating an element, then resumes the checkpoint in local workers.

Run:  pip install -e '.[ray]' && python examples/on_a_ray_cluster.py
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time

import numpy as np

import chute as grain

MARKER = os.path.join(tempfile.mkdtemp(), "killed-once")


def make_image(index: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(index)
    return {"image": rng.integers(0, 256, (64, 64, 3), np.uint8), "label": np.int64(index % 10)}


def augment(record: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    top, left = rng.integers(0, 9, size=2)
    image = record["image"][top : top + 56, left : left + 56]
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return {"image": image.astype(np.float32) / 255.0, "label": record["label"]}


def preempted_once(record: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Kills the worker's process the first time it reaches record 700, as a lost node would."""
    if record["index"] == 700 and not os.path.exists(MARKER):
        open(MARKER, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return record


def pipeline() -> grain.IterDataset:
    return (
        grain.MapDataset.range(2_000)
        .seed(7)
        .shuffle()
        .map(lambda i: {**make_image(i), "index": np.int64(i)})
        .to_iter_dataset()
        .map(preempted_once)
        .random_map(augment)
        .batch(32)
    )


def main() -> None:
    options = grain.MultiprocessingOptions(num_workers=2)
    on_ray = pipeline().mp_prefetch(options, executor=grain.RayExecutor())
    local = pipeline().mp_prefetch(options)

    start = time.perf_counter()
    it = iter(on_ray)
    first_half = [next(it) for _ in range(30)]
    checkpoint = json.dumps(it.get_state())  # what a training loop saves with its model
    second_half = list(it)  # a worker dies on the way: it restarts, nothing is lost
    took = time.perf_counter() - start
    it.close()
    print(f"Ray workers: {len(first_half) + len(second_half)} batches in {took:.1f} s")

    expected = list(local)
    ray_batches = first_half + second_half
    same = len(ray_batches) == len(expected) and all(
        np.array_equal(a["image"], b["image"]) for a, b in zip(ray_batches, expected)
    )
    print("Ray workers and local workers yield the same batches:", same)

    resumed = iter(local)  # the checkpoint of the Ray workers, resumed in local workers
    resumed.set_state(json.loads(checkpoint))
    again = next(resumed)
    print(
        "resumed from the checkpoint in local workers: identical batch",
        np.array_equal(again["image"], second_half[0]["image"]),
    )
    resumed.close()


if __name__ == "__main__":
    main()
