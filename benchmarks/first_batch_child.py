"""One trial of ``bench_first_batch``: a fresh interpreter, one loader, its first batch.

    python benchmarks/first_batch_child.py '{"pipeline": ..., "loader": ..., ...}'

The spec (JSON): ``pipeline`` (``tokens``: Parquet text documents tokenised in the
pipeline; ``pretokenised``: Parquet token documents; ``images``: JPEG files),
``loader`` (``chute``: the Grain API; ``chute.torch``; ``torch``; ``torchdata``),
``workers`` (0 or 2), ``mode`` (``cold``; ``restore``: load the state in ``state``, then
the first batch; ``save``: read 90% of an epoch and write the state to ``state``),
``folder`` (the data), ``spawned`` (the parent's ``time.time()`` just before it started
this process) and ``marks`` (a file to which every process appends the time its first
element's work began).  It prints one line ``RESULT {json}``: ``time.time()`` stamps of
each step, so the parent can break the trial down.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before any other import: the interpreter's start is behind this

import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

ROW = 2048  # tokens per packed row
TOKEN_BATCH = 8  # rows per batch
IMAGE_BATCH = 64
SEED = 0
RESULT = "RESULT "
SAVE_AT = 0.9  # of an epoch's batches


# -- marks: when each process began its first element's work -----------------------------

_MARKED: set[int] = set()


def mark_first_element() -> None:
    """Appends ``pid time`` to the marks file on this process's first call."""
    pid = os.getpid()
    if pid in _MARKED:
        return
    _MARKED.add(pid)
    path = os.environ.get("FIRST_BATCH_MARKS")
    if path:
        with open(path, "a") as f:
            f.write(f"{pid} {time.time()!r}\n")


# -- the token pipelines -------------------------------------------------------------------


def tokenise(row: dict[str, Any]) -> dict[str, Any]:
    """A text document's tokens (its words are decimal ids), cut to one row."""
    import numpy as np

    mark_first_element()
    return {"inputs": np.array(row["text"].split()[:ROW], dtype=np.int32)}


def pretokenised(row: dict[str, Any]) -> dict[str, Any]:
    """A token document's tokens, cut to one row."""
    import numpy as np

    mark_first_element()
    return {"inputs": np.asarray(row["tokens"], np.int32)[:ROW]}


def parquet_paths(folder: str, pipeline: str) -> list[str]:
    sub = os.path.join(folder, "text" if pipeline == "tokens" else "tokens")
    return sorted(os.path.join(sub, f) for f in os.listdir(sub) if f.endswith(".parquet"))


def chute_tokens(chute: Any, folder: str, pipeline: str, workers: int) -> Any:
    """``examples/packing.py``'s pipeline with rows of 2,048 and batches of 8."""
    paths = parquet_paths(folder, pipeline)
    files = chute.MapDataset.source(paths).map(chute.experimental.ParquetIterDataset)
    fn = tokenise if pipeline == "tokens" else pretokenised
    documents = chute.experimental.InterleaveIterDataset(files, cycle_length=2).map(fn)
    packed = chute.experimental.FirstFitPackIterDataset(
        documents, length_struct={"inputs": ROW}, num_packing_bins=TOKEN_BATCH, seed=SEED
    )
    ds = packed.batch(TOKEN_BATCH, drop_remainder=True)
    if workers:
        ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
    return ds


def torch_token_dataset(torch: Any, folder: str, pipeline: str) -> Any:
    """PyTorch's way: an ``IterableDataset`` whose workers share the files out, read them
    with pyarrow a row group at a time, tokenise, and pack concat-then-split into rows."""
    import numpy as np
    import pyarrow.parquet as pq

    paths = parquet_paths(folder, pipeline)
    fn = tokenise if pipeline == "tokens" else pretokenised

    class ParquetTokens(torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = torch.utils.data.get_worker_info()
            mine = paths[info.id :: info.num_workers] if info else paths
            buffer: list[Any] = []
            filled = 0
            for path in mine:
                reader = pq.ParquetFile(path)
                for g in range(reader.num_row_groups):
                    for row in reader.read_row_group(g).to_pylist():
                        tokens = fn(row)["inputs"]
                        buffer.append(tokens)
                        filled += len(tokens)
                        while filled >= ROW:
                            flat = np.concatenate(buffer)
                            yield {"inputs": flat[:ROW]}
                            buffer, filled = [flat[ROW:]], len(flat) - ROW

    return ParquetTokens()


# -- the image pipeline ----------------------------------------------------------------------


def image_files(folder: str) -> list[tuple[str, int]]:
    from jpegs import data

    n = int(os.path.basename(folder).rsplit("-", 1)[1])
    return data.labelled(folder, n)


def image_element(item: Any, rng: Any) -> dict[str, Any]:
    from jpegs.work import transform

    mark_first_element()
    path, label = item
    return transform(path, label, rng)


def chute_images(chute: Any, folder: str, workers: int) -> Any:
    """bench_images' work on the JPEG files: shuffled, decoded, cropped, flipped, normalised."""
    ds = (
        chute.MapDataset.source(image_files(folder))
        .seed(SEED)
        .shuffle()
        .random_map(image_element)
        .batch(IMAGE_BATCH)
        .to_iter_dataset()
    )
    if workers:
        ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
    return ds


_RNG: dict[str, Any] = {}


def worker_rng() -> Any:
    import numpy as np

    pid = os.getpid()
    if _RNG.get("pid") != pid:
        _RNG.update(pid=pid, rng=np.random.default_rng(pid))
    return _RNG["rng"]


def torch_image_dataset(torch: Any, folder: str) -> Any:
    files = image_files(folder)

    class JpegFiles(torch.utils.data.Dataset):  # type: ignore[misc,name-defined]
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, index: int) -> dict[str, Any]:
            return image_element(files[index], worker_rng())

    return JpegFiles()


# -- one trial ---------------------------------------------------------------------------------


def build(spec: dict[str, Any], lib: Any) -> Any:
    """The loader of ``spec`` (an iterable)."""
    pipeline, loader, workers, folder = (
        spec["pipeline"],
        spec["loader"],
        spec["workers"],
        spec["folder"],
    )
    if loader == "chute":
        if pipeline == "images":
            return chute_images(lib, folder, workers)
        return chute_tokens(lib, folder, pipeline, workers)
    torch = sys.modules["torch"]
    if pipeline == "images":
        dataset = torch_image_dataset(torch, folder)
        kwargs: dict[str, Any] = {"batch_size": IMAGE_BATCH, "shuffle": True}
        torch.manual_seed(SEED)
    else:
        dataset = torch_token_dataset(torch, folder, pipeline)
        kwargs = {"batch_size": TOKEN_BATCH}
    cls = {
        "torch": lambda: torch.utils.data.DataLoader,
        "torchdata": lambda: lib.StatefulDataLoader,
        "chute.torch": lambda: lib.DataLoader,
    }[loader]()
    return cls(dataset, num_workers=workers, **kwargs)


def import_lib(loader: str) -> Any:
    import numpy  # noqa: F401

    if loader == "chute":
        import chute

        return chute
    import torch
    import torch.utils.data

    if loader == "torchdata":
        import torchdata.stateful_dataloader

        return torchdata.stateful_dataloader
    if loader == "chute.torch":
        import chute.torch

        return chute.torch
    return torch


def get_state(loader: str, made: Any, it: Any) -> Any:
    return it.get_state() if loader == "chute" else made.state_dict()


def set_state(loader: str, made: Any, it: Any, state: Any) -> Any:
    """Restores ``state``; returns the iterator to read (torch: ``iter()`` after it)."""
    if loader == "chute":
        it.set_state(state)
        return it
    made.load_state_dict(state)
    return iter(made)


def close(loader: str, it: Any) -> None:
    if loader == "chute":
        it.close()
    else:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def batch_summary(batch: Any) -> dict[str, Any]:
    """Shapes of the first batch (a check that it is the batch it should be)."""
    import numpy as np

    if isinstance(batch, dict):
        return {k: list(np.shape(v)) for k, v in sorted(batch.items())}
    return {"batch": list(np.shape(batch))}


def save(spec: dict[str, Any], lib: Any) -> dict[str, Any]:
    """Reads an epoch to count its batches, then 90% of a second one; writes the state."""
    made = build(spec, lib)
    it = iter(made)
    total = sum(1 for _ in it)
    close(spec["loader"], it)
    made = build(spec, lib)
    it = iter(made)
    at = int(total * SAVE_AT)
    for _ in range(at):
        next(it)
    state = get_state(spec["loader"], made, it)
    close(spec["loader"], it)
    with open(spec["state"], "wb") as f:
        pickle.dump(state, f)
    return {"batches": total, "saved_at": at}


def trial(spec: dict[str, Any]) -> dict[str, Any]:
    stamps: dict[str, float] = {"spawned": spec["spawned"], "started": STARTED}
    lib = import_lib(spec["loader"])
    stamps["imported"] = time.time()
    if spec["mode"] == "save":
        return {"stamps": stamps, **save(spec, lib)}
    state = None
    if spec["mode"] == "restore":
        with open(spec["state"], "rb") as f:
            state = pickle.load(f)
    stamps["state_read"] = time.time()
    made = build(spec, lib)
    stamps["built"] = time.time()
    loader = spec["loader"]
    if loader == "chute":
        it = iter(made)
        stamps["iter"] = time.time()
        if state is not None:
            it = set_state(loader, made, it, state)
        stamps["restored"] = time.time()
    else:  # torch's loaders restore before iter(), which starts the workers
        if state is not None:
            made.load_state_dict(state)
        stamps["restored"] = time.time()
        it = iter(made)
        stamps["iter"] = time.time()
    batch = next(it)
    stamps["first_batch"] = time.time()
    summary = batch_summary(batch)
    close(loader, it)
    return {"stamps": stamps, "batch": summary}


def main() -> int:
    spec = json.loads(sys.argv[1])
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ["FIRST_BATCH_MARKS"] = spec["marks"]
    result = trial(spec)
    print(RESULT + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    import first_batch_child  # its functions then pickle by this module's name, not __main__

    first_batch_child.STARTED = STARTED
    sys.exit(first_batch_child.main())
