"""Each loader of ``bench_images``, used as its documentation shows, 2 workers each.

``LOADERS[name](folder, n)`` runs in the loader's own fresh interpreter (``jpegs.child``):
it imports the library and returns a ``Loader``, whose ``epoch()`` builds the pipeline
and returns an iterator over one epoch's batches as ``(images, labels)`` numpy arrays.
Every dataset calls the functions of ``jpegs.work``; each peer's own collate and
hand-over make its batches (tensors, seen here as numpy arrays without a copy).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import runners
from jpegs import data
from jpegs.work import (
    BATCH,
    WORKERS,
    augment,
    decode_row,
    digest,
    limit_job,
    normalise_element,
    transform,
)

SEED = 0
CHECKED_BATCHES = 2  # the first batches each chute API is checked by, against a run without workers

Batches = Iterator[tuple[np.ndarray, np.ndarray]]


@dataclass
class Loader:
    """``epoch()``: one epoch's batches (closed with their ``close()``, if any);
    ``reference()``: the digest of the first batches, computed without workers, that the
    epoch's must equal (``None``: nothing to compare); ``hands_back``: false for the
    limit, whose processes hand nothing back (an epoch that ends has done every image)."""

    epoch: Callable[[], Batches]
    reference: Callable[[], str | None] = lambda: None
    hands_back: bool = True


def _pairs(batches: Any) -> Batches:
    """``(images, labels)`` of a loader's batches: dicts or pairs, tensors or arrays."""
    for b in batches:
        images, labels = (b["image"], b["label"]) if isinstance(b, dict) else b
        yield runners.as_numpy(images), runners.as_numpy(labels)


class _Closing:
    """An iterator of ``(images, labels)`` over ``it``, whose ``close()`` ends ``it``."""

    def __init__(self, it: Any, close: Callable[[Any], None]) -> None:
        self.it, self._pairs, self._close = it, _pairs(it), close

    def __iter__(self) -> _Closing:
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        return next(self._pairs)

    def close(self) -> None:
        self._close(self.it)


# -- chute -------------------------------------------------------------------------------------


def chute_dataset(chute: Any, folder: str) -> Any:
    """The user's pipeline: the converted records, shuffled, decoded, augmented, normalised."""
    source = chute.ArrayRecordDataSource(os.path.join(folder, "arrayrecord", "train"))
    return (
        chute.MapDataset.source(source)
        .seed(SEED)
        .shuffle()
        .map(decode_row)
        .random_map(augment)
        .map(normalise_element)
        .batch(BATCH)
    )


def chute_mp_prefetch(folder: str, n: int) -> Loader:
    import chute

    def epoch() -> Batches:
        ds = chute_dataset(chute, folder).to_iter_dataset()
        options = chute.MultiprocessingOptions(num_workers=WORKERS)
        return _Closing(iter(ds.mp_prefetch(options)), lambda it: it.close())

    def reference() -> str:  # the same batches without workers
        ds = chute_dataset(chute, folder)
        return digest(_pairs(ds[i] for i in range(CHECKED_BATCHES)))

    return Loader(epoch, reference)


def chute_data_loader(folder: str, n: int, workers: int = WORKERS) -> Loader:
    import chute

    class Decode(chute.transforms.Map):
        def map(self, element: Any) -> Any:
            return decode_row(element)

    class Augment(chute.transforms.RandomMap):
        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return augment(element, rng)

    class Normalise(chute.transforms.Map):
        def map(self, element: Any) -> Any:
            return normalise_element(element)

    def loader(workers: int) -> Any:
        return chute.DataLoader(
            data_source=chute.ArrayRecordDataSource(os.path.join(folder, "arrayrecord", "train")),
            sampler=chute.IndexSampler(num_records=n, shuffle=True, seed=SEED, num_epochs=1),
            operations=[Decode(), Augment(), Normalise(), chute.Batch(BATCH)],
            worker_count=workers,
        )

    def epoch() -> Batches:
        return _Closing(iter(loader(workers)), lambda it: it.close())

    def reference() -> str:
        """Without workers the loader batches positions 0-63, 64-127, ...; worker ``w`` of 2
        batches its own positions ``w, w + 2, ...``, and the parent takes the workers' batches
        in turn: batch ``k < 2`` holds positions ``k, k + 2, ..., k + 126``."""
        it = iter(loader(0))
        head = [next(it) for _ in range(CHECKED_BATCHES)]
        it.close()
        images = np.concatenate([b["image"] for b in head])
        labels = np.concatenate([b["label"] for b in head])
        return digest((images[k::WORKERS], labels[k::WORKERS]) for k in range(CHECKED_BATCHES))

    return Loader(epoch, reference)


# -- PyTorch, over the files -------------------------------------------------------------------


def _worker_rng() -> np.random.Generator:
    """A generator of this process's own (a peer's dataset draws its crops from it)."""
    pid = os.getpid()
    if _RNG.get("pid") != pid:
        _RNG.update(pid=pid, rng=np.random.default_rng(pid))
    return _RNG["rng"]


_RNG: dict[str, Any] = {}


def torch_files(folder: str, n: int) -> Loader:
    import torch
    import torch.utils.data

    files = data.labelled(folder, n)

    class JpegFiles(torch.utils.data.Dataset):  # what an ImageFolder-style dataset does
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, index: int) -> dict[str, Any]:
            path, label = files[index]
            return transform(path, label, _worker_rng())

    def epoch() -> Batches:
        loader = runners.torch_loader(torch, JpegFiles(), WORKERS, BATCH, seed=SEED)
        return _Closing(iter(loader), runners.shutdown_torch)

    return Loader(epoch)


# -- LitData, WebDataset, MosaicML Streaming ---------------------------------------------------


def _lit_transform(row: dict[str, Any]) -> dict[str, Any]:
    return transform(row["image"], row["label"], _worker_rng())


def litdata_loader(folder: str, n: int) -> Loader:
    import litdata

    def epoch() -> Batches:
        dataset = litdata.StreamingDataset(
            os.path.join(folder, "litdata"), shuffle=True, seed=SEED, transform=_lit_transform
        )
        loader = litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=WORKERS)
        return _Closing(iter(loader), runners.shutdown_torch)

    return Loader(epoch)


def _wds_sample(sample: tuple[bytes, bytes]) -> tuple[np.ndarray, int]:
    jpeg, cls = sample
    out = transform(jpeg, int(cls), _worker_rng())
    return out["image"], out["label"]


def webdataset_loader(folder: str, n: int) -> Loader:
    import webdataset as wds

    shards = data.wds_shards(folder)

    def epoch() -> Batches:
        dataset = (
            wds.WebDataset(shards, shardshuffle=len(shards), seed=SEED)
            .shuffle(1000)
            .to_tuple("jpg", "cls")
            .map(_wds_sample)
            .batched(BATCH)
        )
        loader = wds.WebLoader(dataset, batch_size=None, num_workers=WORKERS)
        return _Closing(iter(loader), runners.shutdown_torch)

    return Loader(epoch)


def streaming_loader(folder: str, n: int) -> Loader:
    """Streaming's dataset is made once: a second ``StreamingDataset`` over the same local
    folder in one process clashes with the first's shared memory."""
    import torch.utils.data

    StreamingDataset = runners.import_streaming().StreamingDataset

    class MdsImages(StreamingDataset):  # type: ignore[misc,valid-type]
        def __getitem__(self, index: int) -> dict[str, Any]:
            row = super().__getitem__(index)
            return transform(row["image"], row["label"], _worker_rng())

    dataset = MdsImages(
        local=os.path.join(folder, "mds"), shuffle=True, shuffle_seed=SEED, batch_size=BATCH
    )

    def epoch() -> Batches:
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=WORKERS)
        return _Closing(iter(loader), runners.shutdown_torch)

    return Loader(epoch)


# -- the limit ---------------------------------------------------------------------------------


def limit(folder: str, n: int, keep_memory: bool = True) -> Loader:
    """Two bare forked processes over the JPEGs already in memory; nothing handed back."""
    jpegs = data.read_jpegs(folder, n)
    labels = [label for _, label in data.labelled(folder, n)]
    order = np.random.default_rng(SEED).permutation(n)

    def epoch() -> Batches:
        job = limit_job(jpegs, labels, order, keep_memory)
        return runners.bare_processes(job, WORKERS)

    return Loader(epoch, hands_back=False)


def limit_malloc_defaults(folder: str, n: int) -> Loader:
    """The limit with glibc's defaults, which return freed memory to the system."""
    return limit(folder, n, keep_memory=False)


FORMATS = {
    "chute mp_prefetch": "arrayrecord",
    "chute DataLoader": "arrayrecord",
    "LitData": "litdata",
    "WebDataset": "wds",
    "MosaicML Streaming": "mds",
}
"""The copy of the JPEGs each loader reads (``jpegs.data.WRITERS``); the others read the files."""

LOADERS: dict[str, Callable[[str, int], Loader]] = {
    "chute mp_prefetch": chute_mp_prefetch,
    "chute DataLoader": chute_data_loader,
    "PyTorch DataLoader (files)": torch_files,
    "LitData": litdata_loader,
    "WebDataset": webdataset_loader,
    "MosaicML Streaming": streaming_loader,
    "limit": limit,
    "limit (malloc defaults)": limit_malloc_defaults,
}
