"""The data of ``bench_images``: a folder of JPEGs, and each loader's format of them.

``write_all(folder, n, formats)`` writes, once (a marker file says each is complete):

* ``jpegs/c<k>/<i>.jpg``: ``n`` JPEGs of 128x128x3, quality 90, image ``i`` in class
  ``i % 10``; each is a 256x256 window of one of 8 generated photo-like scenes
  (``workers.photos``), halved with Pillow, chosen by ``default_rng(i)``: deterministic;
* ``arrayrecord/train-*``: ``chute convert jpegs arrayrecord/train --num-shards 8``, as a
  user converts an image folder (each record a pickled row: the file's bytes, its name,
  its label and ``label_id``);
* ``litdata/``: ``litdata.optimize`` of ``{"image": bytes, "label": int}`` rows;
* ``wds/shard-*.tar``: WebDataset tar shards (``ShardWriter``), 8 of them, ``.jpg`` and
  ``.cls`` per sample;
* ``mds/``: MosaicML Streaming's ``MDSWriter``, columns ``image: bytes``, ``label: int``.

Every format holds the very same JPEG bytes.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np

import runners
from jpegs.work import CLASSES, SIDE

SHARDS = 8
SCENE_WINDOW = 2 * SIDE  # a scene's window, halved to SIDE


def jpeg_path(folder: str, i: int) -> str:
    return os.path.join(folder, "jpegs", f"c{i % CLASSES}", f"{i:06d}.jpg")


def labelled(folder: str, n: int) -> list[tuple[str, int]]:
    """Every image file and its class, in index order."""
    return [(jpeg_path(folder, i), i % CLASSES) for i in range(n)]


def write_all(folder: str, n: int, formats: set[str]) -> None:
    """Writes the JPEGs and the copies of them in ``formats`` (of ``WRITERS``) into
    ``folder``, each unless done before (a marker file says it is complete)."""
    steps = [("jpegs", write_jpegs)] + [(f, WRITERS[f]) for f in WRITERS if f in formats]
    for name, step in steps:
        marker = os.path.join(folder, f"COMPLETE-{name}")
        if os.path.exists(marker):
            continue
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        began = time.perf_counter()
        step(folder, n)
        print(f"  wrote {name} in {time.perf_counter() - began:.1f} s")
        with open(marker, "w") as f:
            f.write("ok\n")


def write_jpegs(folder: str, n: int) -> None:
    from PIL import Image

    from workers.photos import CANVAS_SIDE, CANVASES, JPEG_QUALITY, canvas

    scenes = [canvas(k) for k in range(CANVASES)]
    for k in range(CLASSES):
        os.makedirs(os.path.join(folder, "jpegs", f"c{k}"))
    for i in range(n):
        rng = np.random.default_rng(i)
        scene = scenes[rng.integers(len(scenes))]
        y, x = rng.integers(0, CANVAS_SIDE - SCENE_WINDOW + 1, size=2)
        window = Image.fromarray(scene[y : y + SCENE_WINDOW, x : x + SCENE_WINDOW])
        window.reduce(SCENE_WINDOW // SIDE).save(
            jpeg_path(folder, i), format="JPEG", quality=JPEG_QUALITY
        )


def read_jpegs(folder: str, n: int) -> list[bytes]:
    out = []
    for path, _ in labelled(folder, n):
        with open(path, "rb") as f:
            out.append(f.read())
    return out


def convert(folder: str, n: int) -> None:
    """``chute convert`` of the folder, as a user runs it."""
    chute_cli = [os.path.join(os.path.dirname(sys.executable), "chute")]
    if not os.path.exists(chute_cli[0]):  # chute on the path, not installed: the same command
        chute_cli = [
            sys.executable,
            "-c",
            "import sys; from chute.cli import main; sys.exit(main())",
        ]
    jpegs, prefix = os.path.join(folder, "jpegs"), os.path.join(folder, "arrayrecord", "train")
    os.makedirs(os.path.dirname(prefix))
    subprocess.run(
        [*chute_cli, "convert", jpegs, prefix, "--num-shards", str(SHARDS), "--no-progress"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _lit_row(item: tuple[str, int]) -> dict[str, Any]:
    path, label = item
    with open(path, "rb") as f:
        return {"image": f.read(), "label": label}


def write_litdata(folder: str, n: int) -> None:
    import litdata

    litdata.optimize(
        fn=_lit_row,
        inputs=labelled(folder, n),
        output_dir=os.path.join(folder, "litdata"),
        chunk_bytes="64MB",
        num_workers=1,
    )
    # optimize() sets the whole program's start method to spawn; put it back.
    multiprocessing.set_start_method("fork", force=True)


def write_wds(folder: str, n: int) -> None:
    import webdataset as wds

    out = os.path.join(folder, "wds")
    os.makedirs(out)
    jpegs = read_jpegs(folder, n)
    per_shard = -(-n // SHARDS)
    pattern = os.path.join(out, "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for i, jpeg in enumerate(jpegs):
            sink.write({"__key__": f"{i:06d}", "jpg": jpeg, "cls": i % CLASSES})


def wds_shards(folder: str) -> list[str]:
    out = os.path.join(folder, "wds")
    return sorted(os.path.join(out, name) for name in os.listdir(out))


def write_mds(folder: str, n: int) -> None:
    MDSWriter = runners.import_streaming().MDSWriter

    jpegs = read_jpegs(folder, n)
    columns = {"image": "bytes", "label": "int"}
    with MDSWriter(out=os.path.join(folder, "mds"), columns=columns) as writer:
        for i, jpeg in enumerate(jpegs):
            writer.write({"image": jpeg, "label": i % CLASSES})


WRITERS = {"arrayrecord": convert, "litdata": write_litdata, "wds": write_wds, "mds": write_mds}
"""Each loader's copy of the JPEGs: the folder it is written to, and what writes it."""


def jpeg_bytes_example(folder: str) -> int:
    """The mean size of the JPEGs in bytes (for the description line)."""
    names = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(folder, "jpegs")) for f in fs]
    return int(np.mean([os.path.getsize(p) for p in names]))
