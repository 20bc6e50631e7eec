"""Packing token sequences for a language model, read from several Parquet files.

Writes four Parquet files of generated token documents (lengths from 1 to
300, long-tailed), reads them with ``InterleaveIterDataset`` (two files open
at a time), packs the documents first-fit into rows of 256 tokens with
``<feature>_segment_ids`` and ``<feature>_positions``, batches the rows, saves
the iterator's state half-way and shows that a fresh iterator resumes at
exactly the same batch.  Needs the Parquet extra: ``pip install -e '.[parquet]'``.

Run:  python examples/packing.py
"""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np

import chute as grain  # the same code runs with `import grain`

ROW = 256  # tokens per packed row
BATCH = 8  # rows per batch


def write_documents(folder: pathlib.Path, files: int = 4, per_file: int = 500) -> list[str]:
    """Writes ``files`` Parquet files of token documents; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    paths = []
    for f in range(files):
        lengths = np.clip(rng.lognormal(3.5, 1.0, per_file).astype(int), 1, 300)
        tokens = [rng.integers(1, 32_000, n).tolist() for n in lengths]
        path = folder / f"documents-{f}.parquet"
        table = pa.table({"tokens": tokens})  # with page checksums, which chute verifies
        pq.write_table(table, path, row_group_size=100, write_page_checksum=True)
        paths.append(str(path))
    return paths


def tokens(row: dict[str, object]) -> dict[str, np.ndarray]:
    """A document's tokens, cut to one row (packing refuses longer sequences)."""
    return {"inputs": np.asarray(row["tokens"], np.int32)[:ROW]}


def pipeline(paths: list[str]) -> grain.IterDataset:
    files = grain.MapDataset.source(paths).map(grain.experimental.ParquetIterDataset)
    documents = grain.experimental.InterleaveIterDataset(files, cycle_length=2).map(tokens)
    packed = grain.experimental.FirstFitPackIterDataset(
        documents, length_struct={"inputs": ROW}, num_packing_bins=BATCH, seed=0
    )
    return packed.batch(BATCH, drop_remainder=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths = write_documents(pathlib.Path(folder))
        ds = pipeline(paths)
        it = iter(ds)
        batches = list(it)
        first = batches[0]
        print(f"{len(batches)} batches of {BATCH} rows x {ROW} tokens; keys {sorted(first)}")
        used = float(np.mean([(b["inputs_segment_ids"] > 0).mean() for b in batches]))
        print(f"tokens that are real (not padding): {used:.1%}")
        print("row 0 segment ids:", first["inputs_segment_ids"][0][:24], "...")

        half = iter(ds)
        for _ in range(len(batches) // 2):
            next(half)
        state = half.get_state()
        resumed = iter(pipeline(paths))
        resumed.set_state(state)
        again = next(resumed)
        expected = batches[len(batches) // 2]
        assert all(np.array_equal(again[k], expected[k]) for k in expected)
        print(f"resumed at batch {len(batches) // 2}: identical batch")


if __name__ == "__main__":
    main()
