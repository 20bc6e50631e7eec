"""The ``arrayrecord`` workload: JPEG decoding from an ArrayRecord file, with a global shuffle.

5,000 JPEG photos (``photos``) in one ArrayRecord file, read in a global shuffle, decoded
with Pillow and cropped at random to 224x224 in the workers: chute and Grain with 2
workers, PyTorch's DataLoader and the limit (2 bare processes), which fork from a clean
parent process (``clean_parent``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

import common
from common import Impl, Ratio
from workers.clean_parent import CleanParent
from workers.harness import (
    BATCH,
    CHECK_FULL_BATCHES,
    IMAGE_BYTES,
    LIMIT,
    WORKERS,
    bench_group,
    check_bare,
    check_images,
    image_digest,
    image_hashes,
    timed_call,
)
from workers.photos import (
    JPEG_QUALITY,
    PHOTOS_N,
    SEED,
    decode_and_crop,
    photos_map,
    photos_pipeline,
    write_photos,
)
from workers.processes import checked

TARGETS = {"arrayrecord chute/torch": 1.2}


def decode_some(records: list[bytes]) -> None:
    """``decode_and_crop`` of the first 20 records, as the workers do it."""
    for i in range(20):
        decode_and_crop(records[i], np.random.default_rng(i))


def bench_arrayrecord(
    chute: Any, grain: Any, repeats: int, directory: str, n: int = PHOTOS_N
) -> dict[str, Any]:
    start = time.perf_counter()
    path, records = write_photos(directory, n)
    written_s = time.perf_counter() - start
    parent = CleanParent(directory, path, n)
    try:
        return arrayrecord_runs(chute, grain, repeats, path, records, written_s, parent)
    finally:
        parent.close()


def arrayrecord_runs(
    chute: Any,
    grain: Any,
    repeats: int,
    path: str,
    records: list[bytes],
    written_s: float,
    parent: CleanParent,
) -> dict[str, Any]:
    n = len(records)
    kb = np.array([len(r) for r in records]) / 1e3
    per_photo = statistics.median(timed_call(decode_some, records) / 20 for _ in range(5))
    description = photos_description(n, kb, written_s, per_photo)
    print(f"  {description}")
    logs: dict[str, list[dict[str, Any]]] = {}
    impls = photos_impls(chute, grain, path, n, parent, logs)
    check_photos(grain, impls, path, records, parent)
    del records
    memory = bench_group(impls, repeats, {impls[2].name: parent, impls[3].name: parent})
    return {
        "name": "arrayrecord",
        "description": description,
        "unit": "elements/s",
        "impls": impls,
        "ratios": photos_ratios(impls),
        "photo_seconds_in_parent": per_photo,
        "record_kb": {"mean": kb.mean(), "min": kb.min(), "max": kb.max()},
        "write_seconds": written_s,
        "bytes_per_element": IMAGE_BYTES,
        "n": n,
        "batch_size": BATCH,
        "memory": memory,
        "shutdown": logs,
        "diagnosis": photos_diagnosis(impls, per_photo),
    }


def photos_description(n: int, kb: np.ndarray, written_s: float, per_photo: float) -> str:
    """The workload's line: the records' sizes, the pipelines, what one decode costs here."""
    return (
        f"{n:,} JPEG photos of 256x256x3 (quality {JPEG_QUALITY}, {kb.mean():.1f} KB "
        f"on average, {kb.min():.1f}-{kb.max():.1f} KB) in one ArrayRecord file (written in "
        f"{written_s:.1f} s); MapDataset.source(ArrayRecordDataSource).seed({SEED}).shuffle()"
        f".random_map(decode_and_crop).to_iter_dataset().batch({BATCH}).mp_prefetch(2 workers); "
        f"torch: DataLoader(dataset, batch_size={BATCH}, shuffle=True, num_workers=2), "
        "__getitem__(i) = decode_and_crop(record i, default_rng(i)) through array_record's "
        "ArrayRecordDataSource opened in each worker; limit: 2 forked processes, each half of a "
        f"shuffled order through array_record's reader (torch and limit fork from a clean parent "
        f"process); decode_and_crop = Pillow decode + a random 224x224 crop, "
        f"{per_photo * 1e3:.2f} ms here; one run = one epoch"
    )


def photos_impls(
    chute: Any, grain: Any, path: str, n: int, parent: CleanParent, logs: dict[str, list[Any]]
) -> list[Impl]:
    """chute and Grain with 2 workers here; PyTorch and the limit in the clean parent."""

    def logged(name: str, make: Any) -> Impl:
        logs[name] = []
        return Impl(name, checked(make, logs[name]), n)

    return [
        logged("chute 2 workers", lambda: photos_pipeline(chute, path)),
        logged("grain 2 workers", lambda: photos_pipeline(grain, path)),
        logged("torch 2 workers", lambda: parent.iterate("torch")),
        logged(LIMIT, lambda: parent.iterate("limit")),
    ]


def check_photos(
    grain: Any, impls: list[Impl], path: str, records: list[bytes], parent: CleanParent
) -> None:
    """The output check, which is also every implementation's warm-up run."""
    chute2, grain2, torch2, limit = impls
    n = len(records)
    grain_out = common.collect(grain2, image_digest())
    chute_out = common.collect(chute2, image_digest())
    parent.mode = "digest"  # the clean parent digests PyTorch's batches
    torch_out = common.collect(torch2)
    parent.mode = None
    common.mark_reference(grain2, grain_out)
    common.check_against(chute2, chute_out, "grain", grain_out)
    if chute2.check == "ok":
        # Worker 0's first batch: elements 0, 2, ..., 62 of the same MapDataset, here.
        reference = photos_map(grain, path)
        first = np.stack([reference[i] for i in range(0, WORKERS * BATCH, WORKERS)])
        diff = common.tree_difference(chute_out[0]["pixels"], first)
        if diff:
            chute2.check = f"MISMATCH: first batch vs Grain's MapDataset[0, 2, ..., 62]: {diff}"
    if torch_out is None:
        torch2.check = common.CHECK_RAISED
    else:
        sizes = [BATCH] * (n // BATCH) + ([n % BATCH] if n % BATCH else [])
        torch2.check = check_images(torch_out, expected_hashes(records), sizes, any_order=True)
    check_bare(limit, common.collect(limit))
    del grain_out, chute_out, torch_out
    common.report_check(
        impls,
        "grain",
        "chute 2 workers = grain 2 workers, every batch in order (first "
        f"{CHECK_FULL_BATCHES} value by value, all by shape, dtype and a hash of every image), "
        "its first batch = Grain's MapDataset[0, 2, ..., 62] computed here; torch 2 workers: "
        f"{-(-n // BATCH)} batches of (32, 224, 224, 3) uint8 (the last of "
        f"{n % BATCH or BATCH}), and the epoch's images = decode_and_crop(record i, "
        "default_rng(i)) for every i, computed here (as a multiset: torch's shuffle order is its "
        "own); limit: both processes finished",
    )


def expected_hashes(records: list[bytes]) -> np.ndarray:
    """The hash of ``decode_and_crop(record i, default_rng(i))`` for every ``i``, computed here."""
    n = len(records)
    return np.concatenate(
        [
            image_hashes(
                np.stack(
                    [
                        decode_and_crop(records[i], np.random.default_rng(i))
                        for i in range(s, min(s + BATCH, n))
                    ]
                )
            )
            for s in range(0, n, BATCH)
        ]
    )


def photos_ratios(impls: list[Impl]) -> list[Ratio]:
    chute2, grain2, torch2, limit = impls
    ratios = [
        Ratio("arrayrecord chute/torch", chute2, torch2, TARGETS["arrayrecord chute/torch"]),
        Ratio("arrayrecord chute/grain", chute2, grain2, None),
        Ratio("arrayrecord chute/limit", chute2, limit, None),
        Ratio("arrayrecord torch/limit", torch2, limit, None),
    ]
    common.mark_invalid(ratios)
    return ratios


def photos_diagnosis(impls: list[Impl], per_photo: float) -> str | None:
    """The ceiling 2 workers could reach with ``decode_and_crop`` alone, each one's share."""
    if not impls[0].rate():
        return None
    ceiling = WORKERS / per_photo
    diagnosis = (
        f"decode_and_crop alone costs {per_photo * 1e3:.2f} ms a photo here, so 2 workers "
        f"could give at most {ceiling:,.0f} photos/s; "
        + ", ".join(f"{i.name} reached {i.rate() / ceiling:.0%} of that" for i in impls if i.rate())
    )
    print(f"  {diagnosis}")
    return diagnosis
