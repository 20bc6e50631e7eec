"""An image pipeline: a folder of JPEGs converted to ArrayRecord, decoded and augmented.

Writes 256 small JPEGs of two classes into a temporary folder (one sub-folder per
class), converts the folder with ``chute convert`` (the image bytes are stored as
they are, labels from the sub-folder names), then reads the shards with a global
shuffle, decodes each JPEG with Pillow, takes a random crop flipped half of the
time, normalises to float32 and batches, in two worker processes. It saves the
iterator's state half-way and shows that a fresh iterator resumes at the same batch.

Run:  pip install -e '.[array_record,images]' && python examples/images.py
"""

from __future__ import annotations

import io
import pickle
import tempfile
from pathlib import Path

import numpy as np

import chute as grain  # the pipeline code runs with `import grain` too
from chute.cli import main as chute_cli

try:
    from PIL import Image
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise SystemExit("this example decodes JPEGs with Pillow: pip install -e '.[images]'") from exc

SIDE, CROP = 48, 32


def write_jpegs(root: Path, n: int = 256) -> None:
    """Writes ``n`` JPEGs, half dark ("night") and half bright ("day")."""
    rng = np.random.default_rng(0)
    for i in range(n):
        label = ("night", "day")[i % 2]
        base = 40 if label == "night" else 200
        pixels = np.clip(rng.normal(base, 30, (SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
        (root / label).mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(root / label / f"{i:04d}.jpg", quality=90)


def decode_and_augment(record: bytes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Decodes one stored image, crops it at random, flips it half of the time."""
    row = pickle.loads(record)  # `chute convert` stores each row pickled
    with Image.open(io.BytesIO(row["image"])) as img:
        pixels = np.asarray(img.convert("RGB"))
    top, left = rng.integers(0, SIDE - CROP + 1, size=2)
    crop = pixels[top : top + CROP, left : left + CROP]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    image = (crop.astype(np.float32) - 127.5) / 127.5
    return {"image": image, "label": np.int64(row["label_id"])}


def pipeline(shards: str) -> grain.IterDataset:
    source = grain.sources.ArrayRecordDataSource(shards)
    return (
        grain.MapDataset.source(source)
        .seed(7)
        .shuffle()
        .random_map(decode_and_augment)  # the same crops and flips in every run
        .batch(32, drop_remainder=True)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder, shards = Path(tmp) / "photos", Path(tmp) / "data" / "photos"
        write_jpegs(folder)
        assert (
            chute_cli(["convert", str(folder), str(shards), "--num-shards", "4", "--no-progress"])
            == 0
        )
        it = iter(pipeline(str(shards)))
        for _ in range(3):
            batch = next(it)
        print(
            f"batch: image {batch['image'].shape} {batch['image'].dtype}, labels {batch['label']}"
        )
        state = it.get_state()
        expected = next(it)
        it.close()
        with iter(pipeline(str(shards))) as resumed:
            resumed.set_state(state)
            again = next(resumed)
        same = np.array_equal(again["image"], expected["image"])
        print("resumed: identical batch" if same else "resumed: DIFFERENT batch")


if __name__ == "__main__":
    main()
