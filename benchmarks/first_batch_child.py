"""One trial of ``bench_first_batch``: a fresh interpreter, one loader, its first batch.

    python benchmarks/first_batch_child.py '{"pipeline": ..., "loader": ..., ...}'

The spec (JSON): ``pipeline`` (``tokens``: Parquet text documents tokenised in the
pipeline; ``pretokenised``: Parquet token documents; ``images``: JPEG files),
``loader`` (``chute``: the Grain API; ``chute arrayrecord``: the Grain API over
ArrayRecord token documents, ``pretokenised`` only; ``chute vshards``: in 8 virtual
shards; ``chute ray``: workers on a local Ray cluster the trial starts; ``chute.torch``;
``torch``; ``torchdata``; ``litdata``; ``streaming``), ``workers`` (0 or 2), ``mode`` (``cold``;
``restore``: load the state in ``state``, then the first batch; ``save``: read 90% of
an epoch and write the state to ``state``), ``folder`` (the data), ``spawned`` (the
parent's ``time.time()`` just before it started this process) and ``marks`` (a file to
which every process appends ``kind pid time`` the first time it reaches each mark: see
``mark``).  It prints one line ``RESULT {json}``: ``time.time()`` stamps of each step
and the first batch's shapes (checked), so the parent can break the trial down.

``write_peer_formats`` writes LitData's and Streaming's copies of the token documents,
and ``write_array_records`` chute's ArrayRecord copy (the parent calls both once, before
any trial).
"""

from __future__ import annotations

import time

STARTED = time.time()  # before any other import: the interpreter's start is behind this

import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

ROW = 2048  # tokens per packed row
TOKEN_BATCH = 8  # rows per batch
IMAGE_BATCH = 64
SEED = 0
RESULT = "RESULT "
SAVE_AT = 0.9  # of an epoch's batches


# -- marks: when each process first reached each point of the pipeline ------------------

_MARKED: set[tuple[int, str]] = set()

ELEMENT, RECORD, PACKED, BATCH_MADE, WORKER = "element", "record", "packed", "batch", "worker"
"""The marks: the first element's work began (``element``), the first record was read from
a source (``record``), the first packed row left packing (``packed``), the first batch was
made in its producing process (``batch``), a worker process began (``worker``)."""


def mark(kind: str) -> None:
    """Appends ``kind pid time`` to the marks file on this process's first call for ``kind``."""
    pid = os.getpid()
    if (pid, kind) in _MARKED:
        return
    _MARKED.add((pid, kind))
    path = os.environ.get("FIRST_BATCH_MARKS")
    if path:
        with open(path, "a") as f:
            f.write(f"{kind} {pid} {time.time()!r}\n")


def mark_first_element() -> None:
    mark(ELEMENT)


def record_read(row: Any) -> Any:
    """A ``map`` on a source's rows (before any work): marks the first record read."""
    mark(RECORD)
    return row


def packed_row(row: Any) -> Any:
    """A ``map`` right after packing: marks the first packed row."""
    mark(PACKED)
    return row


def batch_made(batch: Any) -> Any:
    """A ``map`` right after ``batch``: marks the first batch made, in its process."""
    mark(BATCH_MADE)
    return batch


def worker_started(*args: Any) -> None:
    """``worker_init_fn``: marks a worker's first line of work."""
    mark(WORKER)


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


def open_parquet(path: str) -> Any:
    """One file's rows, each marked (``record_read``) before any work."""
    import chute

    return chute.experimental.ParquetIterDataset(path).map(record_read)


def mp_options(chute: Any, workers: int, executor: Any = None) -> dict[str, Any]:
    """``mp_prefetch``'s arguments: ``workers`` workers, each marking its start."""
    out: dict[str, Any] = {
        "options": chute.MultiprocessingOptions(num_workers=workers),
        "worker_init_fn": worker_started,
    }
    if executor is not None:
        out["executor"] = executor
    return out


def pack_and_batch(chute: Any, documents: Any) -> Any:
    """First-fit packing into rows of 2,048, batches of 8; each step marked."""
    packed = chute.experimental.FirstFitPackIterDataset(
        documents, length_struct={"inputs": ROW}, num_packing_bins=TOKEN_BATCH, seed=SEED
    )
    return packed.map(packed_row).batch(TOKEN_BATCH, drop_remainder=True).map(batch_made)


def chute_tokens(chute: Any, folder: str, pipeline: str, workers: int, executor: Any = None) -> Any:
    """``examples/packing.py``'s pipeline with rows of 2,048 and batches of 8."""
    paths = parquet_paths(folder, pipeline)
    files = chute.MapDataset.source(paths).map(open_parquet)
    fn = tokenise if pipeline == "tokens" else pretokenised
    documents = chute.experimental.InterleaveIterDataset(files, cycle_length=2).map(fn)
    ds = pack_and_batch(chute, documents)
    if workers:
        ds = ds.mp_prefetch(**mp_options(chute, workers, executor))
    return ds


ARRAY_RECORD_FOLDER = "arrayrecord"
"""Where the ArrayRecord copy of the token documents is (under the pipeline's folder)."""


def array_record_paths(folder: str) -> list[str]:
    sub = os.path.join(folder, ARRAY_RECORD_FOLDER)
    return sorted(os.path.join(sub, f) for f in os.listdir(sub) if f.endswith(".array_record"))


def write_array_records(tokens_folder: str) -> None:
    """The token documents (``tokens/*.parquet``) as ArrayRecord files, once: one file per
    Parquet file, one record per document holding its int32 tokens as raw bytes, written
    with ``chute.experimental.write_array_record``."""
    import chute

    out = os.path.join(tokens_folder, ARRAY_RECORD_FOLDER)
    marker = out + ".COMPLETE"
    if os.path.exists(marker):
        return
    shutil.rmtree(out, ignore_errors=True)
    for f, path in enumerate(parquet_paths(tokens_folder, "pretokenised")):
        documents = (tokens.tobytes() for tokens in document_tokens(path))
        chute.experimental.write_array_record(documents, os.path.join(out, f"documents-{f}"))
    with open(marker, "w") as fh:
        fh.write("ok\n")


def decode_tokens(record: bytes) -> dict[str, Any]:
    """An ArrayRecord document's tokens (int32 raw bytes), cut to one row."""
    import numpy as np

    mark_first_element()
    return {"inputs": np.frombuffer(record, np.int32)[:ROW]}


def chute_array_record(chute: Any, folder: str, workers: int) -> Any:
    """The ``pretokenised`` pipeline on chute's own format's side: the documents from
    ArrayRecord files, as a Grain user reads them (``ArrayRecordDataSource``,
    ``MapDataset.source``, ``map``, ``to_iter_dataset``), then the same packing and
    batching as the Parquet row."""
    source = chute.ArrayRecordDataSource(array_record_paths(folder))
    documents = (
        chute.MapDataset.source(source).map(record_read).map(decode_tokens).to_iter_dataset()
    )
    ds = pack_and_batch(chute, documents)
    if workers:
        ds = ds.mp_prefetch(**mp_options(chute, workers))
    return ds


VIRTUAL_SHARDS = 8


def token_shard(paths: list[str], pipeline: str, shard: Any) -> Any:
    """Virtual shard ``shard``'s whole pipeline: its eighth of the documents (a row range,
    half a file) from a ``ParquetDataSource``, tokenised, packed and batched."""
    import chute
    from chute.sources import ParquetDataSource

    source = ParquetDataSource(paths)
    lo = len(source) * shard.shard_index // shard.shard_count
    hi = len(source) * (shard.shard_index + 1) // shard.shard_count
    rows = chute.MapDataset.source(source)[lo:hi].map(record_read).to_iter_dataset()
    return pack_and_batch(chute, rows.map(tokenise if pipeline == "tokens" else pretokenised))


def chute_virtual_shards(chute: Any, folder: str, pipeline: str, workers: int) -> Any:
    """The token pipeline in 8 virtual shards; ``mp_prefetch`` runs the shards in workers."""
    import functools

    make_shard = functools.partial(token_shard, parquet_paths(folder, pipeline), pipeline)
    ds = chute.experimental.virtual_shards(make_shard, VIRTUAL_SHARDS)
    if workers:
        ds = ds.mp_prefetch(**mp_options(chute, workers))
    return ds


def packed_rows(paths: list[str], fn: Any) -> Iterator[Any]:
    """The documents of ``paths`` (read with pyarrow a row group at a time, one file after
    another, each row through ``fn``) packed concat-then-split into rows of 2,048."""
    import numpy as np
    import pyarrow.parquet as pq

    buffer: list[Any] = []
    filled = 0
    for path in paths:
        reader = pq.ParquetFile(path)
        for g in range(reader.num_row_groups):
            for row in reader.read_row_group(g).to_pylist():
                tokens = fn(row)["inputs"]
                buffer.append(tokens)
                filled += len(tokens)
                while filled >= ROW:
                    flat = np.concatenate(buffer)
                    yield flat[:ROW]
                    buffer, filled = [flat[ROW:]], len(flat) - ROW


def torch_token_dataset(torch: Any, folder: str, pipeline: str) -> Any:
    """PyTorch's way: an ``IterableDataset`` whose workers share the files out, read them
    with pyarrow a row group at a time, tokenise, and pack concat-then-split into rows."""
    import pyarrow.parquet  # noqa: F401  (imported when the dataset is made, as before)

    paths = parquet_paths(folder, pipeline)
    fn = tokenise if pipeline == "tokens" else pretokenised

    class ParquetTokens(torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = torch.utils.data.get_worker_info()
            mine = paths[info.id :: info.num_workers] if info else paths
            for row in packed_rows(mine, fn):
                yield {"inputs": row}

    return ParquetTokens()


class BareParquetBatches:
    """The limit of the token pipelines from Parquet: no loader, pyarrow and numpy in this
    process, the files one at a time (a row group at a time, ``to_pylist``), tokenised (or
    not) and packed concat-then-split into rows of 2,048, 8 rows stacked a batch."""

    def __init__(self, folder: str, pipeline: str) -> None:
        self._paths = parquet_paths(folder, pipeline)
        self._fn = tokenise if pipeline == "tokens" else pretokenised

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import numpy as np

        rows: list[Any] = []
        for row in packed_rows(self._paths, self._fn):
            rows.append(row)
            if len(rows) == TOKEN_BATCH:
                yield {"inputs": np.stack(rows)}
                rows = []


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
        .map(batch_made)
        .to_iter_dataset()
    )
    if workers:
        ds = ds.mp_prefetch(**mp_options(chute, workers))
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


# -- LitData and MosaicML Streaming: their formats, written once by the parent ------------------

PEER_FOLDERS = {
    ("litdata", "tokens"): "litdata-text",
    ("litdata", "pretokenised"): "litdata-tokens",
    ("litdata", "images"): "litdata",
    ("streaming", "tokens"): "mds-text",
    ("streaming", "pretokenised"): "mds-tokens",
    ("streaming", "images"): "mds",
}
"""Where each peer's copy of each pipeline's data is (under the pipeline's folder)."""


def document_tokens(path: str) -> Iterator[Any]:
    """A Parquet file of token documents: each document's tokens (int32, at most a row)."""
    import numpy as np
    import pyarrow.parquet as pq

    for tokens in pq.read_table(path).column("tokens").to_pylist():
        yield np.asarray(tokens, np.int32)[:ROW]


def concat_then_split(path: str) -> Iterator[Any]:
    """A file's documents concatenated and cut into rows of 2,048 (the remainder dropped),
    as Streaming's users pack tokens when they write their shards."""
    import numpy as np

    buffer: list[Any] = []
    filled = 0
    for tokens in document_tokens(path):
        buffer.append(tokens)
        filled += len(tokens)
        if filled >= ROW:
            flat = np.concatenate(buffer)
            for start in range(0, len(flat) - ROW + 1, ROW):
                yield flat[start : start + ROW]
            buffer = [flat[len(flat) - len(flat) % ROW :]]
            filled = len(buffer[0])


def lit_text_rows(path: str) -> Iterator[dict[str, str]]:
    """``litdata.optimize``'s function for the ``tokens`` row: packed rows, as text."""
    for row in concat_then_split(path):
        yield {"text": " ".join(map(str, row.tolist()))}


def write_peer_formats(tokens_folder: str) -> None:
    """LitData's and Streaming's copies of the token documents (``tokens/*.parquet``), each
    once: ``TokensLoader`` chunks of every document's tokens; Streaming's shards of rows
    packed concat-then-split; and both with those rows as text, for the ``tokens`` rows."""
    import multiprocessing

    import litdata
    from litdata.streaming.item_loader import TokensLoader

    import runners

    paths = parquet_paths(tokens_folder, "pretokenised")
    for (peer, pipeline), sub in PEER_FOLDERS.items():
        out = os.path.join(tokens_folder, sub)
        marker = out + ".COMPLETE"
        if pipeline == "images" or os.path.exists(marker):
            continue
        shutil.rmtree(out, ignore_errors=True)
        if peer == "litdata":
            fn, extra = (
                (document_tokens, {"item_loader": TokensLoader(), "chunk_size": ROW * 64})
                if pipeline == "pretokenised"
                else (lit_text_rows, {"chunk_bytes": "64MB"})
            )
            litdata.optimize(fn=fn, inputs=paths, output_dir=out, num_workers=1, **extra)
            multiprocessing.set_start_method("fork", force=True)  # optimize() sets spawn
        else:
            MDSWriter = runners.import_streaming().MDSWriter
            text = pipeline == "tokens"
            columns = {"text": "str"} if text else {"tokens": "ndarray:int32"}
            with MDSWriter(out=out, columns=columns) as writer:
                for path in paths:
                    for row in concat_then_split(path):
                        writer.write(
                            {"text": " ".join(map(str, row.tolist()))} if text else {"tokens": row}
                        )
        if not os.path.exists(os.path.join(out, "index.json")):
            raise RuntimeError(f"{peer} wrote no index.json into {out}")
        with open(marker, "w") as f:
            f.write("ok\n")


def text_row(row: dict[str, Any]) -> dict[str, Any]:
    """A packed row stored as text, tokenised (the peers' ``tokens`` rows)."""
    import numpy as np

    mark_first_element()
    return {"inputs": np.array(row["text"].split(), dtype=np.int32)}


def token_row(tokens: Any) -> dict[str, Any]:
    """A packed row of token ids, as read (LitData's ``TokensLoader`` block)."""
    mark_first_element()
    return {"inputs": tokens}


def image_row(row: dict[str, Any]) -> dict[str, Any]:
    """A stored JPEG and its label, transformed as every loader does."""
    return image_element((row["image"], row["label"]), worker_rng())


def litdata_loader(lib: Any, pipeline: str, folder: str, workers: int) -> Any:
    """``StreamingDataset`` of the ``litdata.optimize`` output, ``StreamingDataLoader``."""
    where = os.path.join(folder, PEER_FOLDERS["litdata", pipeline])
    if pipeline == "images":
        dataset = lib.StreamingDataset(where, shuffle=True, seed=SEED, transform=image_row)
        return lib.StreamingDataLoader(dataset, batch_size=IMAGE_BATCH, num_workers=workers)
    if pipeline == "pretokenised":
        from litdata.streaming.item_loader import TokensLoader

        dataset = lib.StreamingDataset(
            where, item_loader=TokensLoader(block_size=ROW), drop_last=True, transform=token_row
        )
    else:
        dataset = lib.StreamingDataset(where, drop_last=True, transform=text_row)
    return lib.StreamingDataLoader(dataset, batch_size=TOKEN_BATCH, num_workers=workers)


def streaming_loader(lib: Any, pipeline: str, folder: str, workers: int) -> Any:
    """A ``StreamingDataset`` subclass whose ``__getitem__`` does the work, read by
    Streaming's ``StreamingDataLoader``."""
    work = {"images": image_row, "tokens": text_row}.get(pipeline)

    class Rows(lib.StreamingDataset):  # type: ignore[misc,name-defined]
        def __getitem__(self, index: int) -> Any:
            row = super().__getitem__(index)
            return work(row) if work else token_row(row["tokens"])

    batch = IMAGE_BATCH if pipeline == "images" else TOKEN_BATCH
    dataset = Rows(
        local=os.path.join(folder, PEER_FOLDERS["streaming", pipeline]),
        shuffle=pipeline == "images",
        shuffle_seed=SEED,
        batch_size=batch,
    )
    return lib.StreamingDataLoader(dataset, batch_size=batch, num_workers=workers)


# -- one trial ---------------------------------------------------------------------------------

GRAIN_API = ("chute", "chute arrayrecord", "chute vshards", "chute ray")
"""The loaders written with chute's Grain API (``iter()``, then ``set_state``)."""


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
    if loader == "chute arrayrecord":
        return chute_array_record(lib, folder, workers)
    if loader == "chute vshards":
        return chute_virtual_shards(lib, folder, pipeline, workers)
    if loader == "chute ray":
        return chute_tokens(lib, folder, pipeline, workers, executor=lib.RayExecutor())
    if loader == "bare pyarrow":
        return BareParquetBatches(folder, pipeline)
    if loader == "litdata":
        return litdata_loader(lib, pipeline, folder, workers)
    if loader == "streaming":
        return streaming_loader(lib, pipeline, folder, workers)
    torch = sys.modules["torch"]
    if pipeline == "images":
        dataset = torch_image_dataset(torch, folder)
        kwargs: dict[str, Any] = {"batch_size": IMAGE_BATCH, "shuffle": True}
        torch.manual_seed(SEED)
    else:
        dataset = torch_token_dataset(torch, folder, pipeline)
        kwargs = {"batch_size": TOKEN_BATCH}
    if loader == "chute.torch" and workers:
        kwargs["worker_init_fn"] = worker_started
    cls = {
        "torch": lambda: torch.utils.data.DataLoader,
        "torchdata": lambda: lib.StatefulDataLoader,
        "chute.torch": lambda: lib.DataLoader,
    }[loader]()
    return cls(dataset, num_workers=workers, **kwargs)


def import_lib(loader: str) -> Any:
    import numpy  # noqa: F401

    if loader == "bare pyarrow":
        return None  # pyarrow is imported where the batches are read
    if loader in GRAIN_API:
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
    if loader == "litdata":
        import litdata

        return litdata
    if loader == "streaming":
        import runners

        return runners.import_streaming()
    return torch


def start_ray() -> None:
    """A local Ray cluster, started inside the trial; its workers import this module."""
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    import logging

    import ray

    ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)


def get_state(loader: str, made: Any, it: Any) -> Any:
    return it.get_state() if loader in GRAIN_API else made.state_dict()


def close(loader: str, it: Any) -> None:
    if loader in GRAIN_API:
        it.close()
        return
    shutdown = getattr(it, "_shutdown_workers", None) or getattr(it, "close", None)
    if shutdown is not None:
        shutdown()


def batch_summary(batch: Any) -> dict[str, Any]:
    """Shapes of the first batch (a check that it is the batch it should be)."""
    import numpy as np

    if isinstance(batch, dict):
        return {k: list(np.shape(v)) for k, v in sorted(batch.items())}
    return {"batch": list(np.shape(batch))}


def check_batch(pipeline: str, summary: dict[str, Any]) -> None:
    """Raises unless the batch holds the pipeline's array: 8 rows of 2,048 tokens, or 64
    images of 112x112x3."""
    name, shape = ("image", [IMAGE_BATCH, 112, 112, 3])
    if pipeline != "images":
        name, shape = ("inputs", [TOKEN_BATCH, ROW])
    if summary.get(name, summary.get("batch")) != shape:
        raise ValueError(f"the first batch holds {summary}; expected {name} of shape {shape}")


def save(spec: dict[str, Any], lib: Any) -> dict[str, Any]:
    """Reads an epoch, keeping the state after every batch, and writes the state after 90%
    of the epoch's batches (LitData and Streaming: their loader's length says how many
    batches an epoch holds; the trial reads 90% of them)."""
    loader = spec["loader"]
    made = build(spec, lib)
    it = iter(made)
    states: list[bytes] = []
    total = len(made) if loader in ("litdata", "streaming") else None
    for batch in it:
        if not states:  # an epoch's last batch may be short
            check_batch(spec["pipeline"], batch_summary(batch))
        if total is None:
            states.append(pickle.dumps(get_state(loader, made, it)))
        elif len(states) + 1 >= int(total * SAVE_AT):
            states.append(pickle.dumps(get_state(loader, made, it)))
            break
        else:
            states.append(b"")
    close(loader, it)
    total = len(states) if total is None else total
    at = int(total * SAVE_AT)
    with open(spec["state"], "wb") as f:
        f.write(states[at - 1])
    return {"batches": total, "saved_at": at}


def trial(spec: dict[str, Any]) -> dict[str, Any]:
    stamps: dict[str, float] = {"spawned": spec["spawned"], "started": STARTED}
    loader = spec["loader"]
    lib = import_lib(loader)
    stamps["imported"] = time.time()
    if loader == "chute ray":
        start_ray()
        stamps["ray_started"] = time.time()
    if spec["mode"] == "save":
        return {"stamps": stamps, **save(spec, lib)}
    state = None
    if spec["mode"] == "restore":
        with open(spec["state"], "rb") as f:
            state = pickle.load(f)
    stamps["state_read"] = time.time()
    made = build(spec, lib)
    stamps["built"] = time.time()
    if loader in GRAIN_API:
        it = iter(made)
        stamps["iter"] = time.time()
        if state is not None:
            it.set_state(state)
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
    check_batch(spec["pipeline"], summary)
    close(loader, it)
    return {"stamps": stamps, "batch": summary, "pid": os.getpid()}


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
