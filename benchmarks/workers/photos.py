"""The data and the code of the ``arrayrecord`` workload: JPEG photos in one ArrayRecord file.

Each photo is a 256x256 window, at offsets drawn from ``default_rng(i)``, of one of 8
generated 1024x1024 scenes (colour gradients, soft-edged discs, noise), so that the JPEGs
decode like photos.  Every reader decodes a record with Pillow and crops it at random to
224x224 (``decode_and_crop``): chute's and Grain's pipeline (``photos_pipeline``),
PyTorch's dataset (``photo_dataset_class``) and the limit's bare processes (``bare_photos``).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

import runners
from workers.harness import BATCH, IMAGE_SHAPE, WORKERS

PHOTOS_N = 5000  # JPEG records of the arrayrecord workload
PHOTO_SIDE = 256  # stored photos are 256x256x3; the crop is IMAGE_SHAPE
CANVAS_SIDE = 1024  # photos are windows of a few large generated scenes
CANVASES = 8
JPEG_QUALITY = 90
SEED = 7  # the shuffle and torch.manual_seed


def decode_and_crop(record: bytes, rng: np.random.Generator) -> np.ndarray:
    """Decodes a JPEG record with Pillow; a 224x224 crop at offsets drawn from ``rng``."""
    from PIL import Image  # here, not at the top: the other workloads' workers never need it

    with Image.open(io.BytesIO(record)) as img:
        pixels = np.asarray(img)
    top, left = rng.integers(0, PHOTO_SIDE - IMAGE_SHAPE[0] + 1, size=2)
    return np.ascontiguousarray(pixels[top : top + IMAGE_SHAPE[0], left : left + IMAGE_SHAPE[1]])


def photos_map(lib: Any, path: str) -> Any:
    """The same code for both libraries: shuffled records, decoded and cropped."""
    return (
        lib.MapDataset.source(lib.sources.ArrayRecordDataSource(path))
        .seed(SEED)
        .shuffle()
        .random_map(decode_and_crop)
    )


def photos_pipeline(lib: Any, path: str, workers: int = WORKERS) -> Any:
    """The same code for both libraries: ``lib`` is the ``chute`` or ``grain`` module."""
    return runners.with_workers(lib, photos_map(lib, path).to_iter_dataset().batch(BATCH), workers)


def photo_dataset_class(torch: Any, path: str, n: int) -> type:
    """PyTorch's dataset: the file's photos, decoded and cropped; array_record's own
    ``ArrayRecordDataSource`` opens on the first ``__getitem__`` in each worker."""

    class PhotoDataset(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.source: Any = None

        def __len__(self) -> int:
            return n

        def __getitem__(self, index: int) -> np.ndarray:
            if self.source is None:
                from array_record.python.array_record_data_source import ArrayRecordDataSource

                self.source = ArrayRecordDataSource(path)
            return decode_and_crop(self.source[index], np.random.default_rng(index))

    return PhotoDataset


def bare_photos(path: str, order: np.ndarray) -> Callable[[int], None]:
    """The job of bare process w: its half of the shuffled records, read 32 at a time with
    array_record's reader, each decoded and cropped."""

    def job(w: int) -> None:
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(path, "readahead_buffer_size:0")
        mine = order[w::WORKERS].tolist()
        for start in range(0, len(mine), BATCH):
            keys = mine[start : start + BATCH]
            for key, record in zip(keys, reader.read(keys)):
                decode_and_crop(record, np.random.default_rng(key))
        reader.close()

    return job


# -- writing the photos -------------------------------------------------------------------------


def canvas(k: int) -> np.ndarray:
    """A 1024x1024 uint8 scene: colour gradients, 60 soft-edged discs, sensor-like noise."""
    rng = np.random.default_rng(1000 + k)
    side = CANVAS_SIDE
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    slope = rng.uniform(-1, 1, size=(3, 3, 1, 1)).astype(np.float32)
    img = rng.uniform(60, 200, size=(3, 1, 1)).astype(np.float32) + 60 * (
        slope[:, 0] * xx + slope[:, 1] * yy + slope[:, 2] * np.sin(9 * xx * yy + k)
    )
    img = np.ascontiguousarray(np.moveaxis(img, 0, -1))
    for _ in range(60):
        cy, cx = rng.uniform(0, 1, size=2)
        r = rng.uniform(0.01, 0.08)
        y0, y1 = max(0, int((cy - r) * side)), min(side, int((cy + r) * side) + 1)
        x0, x1 = max(0, int((cx - r) * side)), min(side, int((cx + r) * side) + 1)
        d2 = ((yy[y0:y1, x0:x1] - cy) ** 2 + (xx[y0:y1, x0:x1] - cx) ** 2) / (r * r)
        disc = np.clip(4 * (1 - d2), 0, 1)
        img[y0:y1, x0:x1] += disc[..., None] * rng.uniform(-90, 90, size=3).astype(np.float32)
    img += rng.normal(0, 10, size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def photo(canvases: list[np.ndarray], index: int) -> np.ndarray:
    """Photo ``index``: a 256x256 window of one of the scenes, chosen by ``default_rng(index)``."""
    rng = np.random.default_rng(index)
    scene = canvases[rng.integers(len(canvases))]
    y, x = rng.integers(0, CANVAS_SIDE - PHOTO_SIDE + 1, size=2)
    return scene[y : y + PHOTO_SIDE, x : x + PHOTO_SIDE]


def jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def write_photos(directory: str, n: int = PHOTOS_N) -> tuple[str, list[bytes]]:
    """Writes ``n`` JPEG photos to one ArrayRecord file; (its path, the records)."""
    from chute.experimental import write_array_record

    canvases = [canvas(k) for k in range(CANVASES)]
    records = [jpeg(photo(canvases, i)) for i in range(n)]
    return write_array_record(records, f"{directory}/photos")[0], records
