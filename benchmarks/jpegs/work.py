"""The work every loader of ``bench_images`` does to a JPEG, written once.

Decode with Pillow, crop 112x112 at random and flip it left-right half of the time,
normalise to float32 with per-channel mean and deviation, stack 64 into a batch.
chute's stages (``decode_row``, ``augment``, ``normalise_element``), the peers'
datasets and the limit's processes all call the functions below, so every one of them
does the same work; only what surrounds it differs.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np

SIDE = 128  # the stored JPEGs are SIDE x SIDE x 3
CROP = 112
BATCH = 64
CLASSES = 10
WORKERS = 2
MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255
IMAGE_SHAPE = (CROP, CROP, 3)


def decode_jpeg(jpeg: Any) -> np.ndarray:
    """Pillow's decode of a JPEG (bytes, or a path), as a SIDE x SIDE x 3 uint8 array."""
    from PIL import Image

    with Image.open(jpeg if isinstance(jpeg, str) else io.BytesIO(jpeg)) as img:
        return np.asarray(img)


def crop_and_flip(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random CROP x CROP window, flipped left-right half of the time (a view)."""
    top, left = rng.integers(0, SIDE - CROP + 1, size=2)
    window = pixels[top : top + CROP, left : left + CROP]
    return window[:, ::-1] if rng.random() < 0.5 else window


def normalise(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels to float32, minus the channels' mean, over their deviation."""
    return (pixels.astype(np.float32) - MEAN) / STD


# -- chute's stages: a record of ``chute convert`` (a pickled row) to a normalised image ---------


def decode_row(record: bytes) -> dict[str, Any]:
    """``chute convert``'s record of an image file (a pickled row) to pixels and label."""
    row = pickle.loads(record)
    return {"image": decode_jpeg(row["image"]), "label": row["label_id"]}


def augment(element: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    return {"image": crop_and_flip(element["image"], rng), "label": element["label"]}


def normalise_element(element: dict[str, Any]) -> dict[str, Any]:
    return {"image": normalise(element["image"]), "label": element["label"]}


def transform(jpeg: Any, label: int, rng: np.random.Generator) -> dict[str, Any]:
    """All of it at once, as the peers' datasets call it on one image."""
    return {"image": normalise(crop_and_flip(decode_jpeg(jpeg), rng)), "label": label}


# -- the limit -------------------------------------------------------------------------------------


def keep_freed_memory() -> None:
    """glibc keeps freed memory for reuse instead of returning it to the system, as in
    chute's workers (``chute._execution.processes.keep_freed_memory``): by default the
    normalised images' temporaries (150 KB each) are faulted in afresh, image after image,
    about 50 page faults and 0.1 ms of system time per image here."""
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: arrays under 32 MiB come from the heap
    mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD: keep up to 256 MiB of freed heap


def limit_job(
    jpegs: list[bytes], labels: list[int], order: np.ndarray, keep_memory: bool = True
) -> Any:
    """The job of bare process ``w``: its share (``order[w::WORKERS]``) of the JPEGs, held in
    memory, decoded, cropped, flipped, normalised and stacked into one reused batch array;
    with ``keep_memory``, glibc keeps freed memory (``keep_freed_memory``)."""

    def job(w: int) -> None:
        if keep_memory:
            keep_freed_memory()
        rng = np.random.default_rng(w)
        images = np.empty((BATCH, *IMAGE_SHAPE), np.float32)
        mine = order[w::WORKERS].tolist()
        for start in range(0, len(mine), BATCH):
            keys = mine[start : start + BATCH]
            out = images[: len(keys)]
            np.stack([normalise(crop_and_flip(decode_jpeg(jpegs[k]), rng)) for k in keys], out=out)
            np.array([labels[k] for k in keys])

    return job


# -- checks ---------------------------------------------------------------------------------------


class EpochCheck:
    """Counts an epoch's images and labels and checks each batch's shapes and dtypes."""

    def __init__(self) -> None:
        self.images, self.batches = 0, 0
        self.labels = np.zeros(CLASSES, np.int64)
        self.problem: str | None = None

    def add(self, images: np.ndarray, labels: np.ndarray) -> None:
        n = len(images)
        if self.problem is None and (
            images.shape != (n, *IMAGE_SHAPE)
            or images.dtype != np.float32
            or labels.shape != (n,)
            or labels.dtype != np.int64
        ):
            self.problem = (
                f"batch {self.batches}: images {images.shape} {images.dtype}, labels "
                f"{labels.shape} {labels.dtype}; expected ({n}, {CROP}, {CROP}, 3) float32, "
                f"({n},) int64"
            )
        self.images += n
        self.batches += 1
        self.labels += np.bincount(labels, minlength=CLASSES)

    def verdict(self, expected: int) -> str | None:
        """Why the epoch is wrong, or ``None``."""
        if self.problem:
            return self.problem
        if self.images != expected:
            return f"{self.images} images, not {expected}"
        if self.labels.tolist() != [expected // CLASSES] * CLASSES:
            return f"labels {self.labels.tolist()}, not {expected // CLASSES} of each class"
        return None


def digest(batches: Iterator[tuple[np.ndarray, np.ndarray]]) -> str:
    """A hash of batches' images and labels (bytes, shapes and dtypes)."""
    h = hashlib.blake2b(digest_size=16)
    for images, labels in batches:
        for a in (images, labels):
            a = np.ascontiguousarray(a)
            h.update(f"{a.shape}{a.dtype}".encode())
            h.update(a.data)
    return h.hexdigest()


# -- what each step costs ---------------------------------------------------------------------


def step_costs(jpegs: list[bytes], rounds: int = 3) -> dict[str, float]:
    """Microseconds per image of each step of the work, in one thread (best of ``rounds``
    passes over ``jpegs``): what the limit's processes spend, step by step."""
    import time

    rows = [
        pickle.dumps({"image": j, "filename": "c0/000000.jpg", "label": "c0", "label_id": 0})
        for j in jpegs
    ]
    rng = np.random.default_rng(0)
    best: dict[str, float] = {}

    def timed(name: str, fn: Any, items: list[Any]) -> list[Any]:
        start = time.perf_counter()
        out = [fn(x) for x in items]
        per = (time.perf_counter() - start) / len(items) * 1e6
        best[name] = min(best.get(name, per), per)
        return out

    for _ in range(rounds):
        timed("unpickle row", pickle.loads, rows)
        pixels = timed("decode", decode_jpeg, jpegs)
        crops = timed("crop and flip", lambda p: crop_and_flip(p, rng), pixels)
        floats = timed("normalise", normalise, crops)
        out = np.empty((BATCH, *IMAGE_SHAPE), np.float32)
        batches = [floats[i : i + BATCH] for i in range(0, len(floats) - BATCH + 1, BATCH)]
        start = time.perf_counter()
        for b in batches:
            np.stack(b, out=out)
        per = (time.perf_counter() - start) / (len(batches) * BATCH) * 1e6
        best["stack"] = min(best.get("stack", per), per)
    return best
