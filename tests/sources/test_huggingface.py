"""Hugging Face ``datasets.Dataset`` objects used directly as chute sources.

A ``datasets.Dataset`` has ``__len__``, ``__getitem__`` and ``__getitems__``
(a list of row dicts for a list of indices), so it needs no adapter: chute
reads it in batches through ``__getitems__``, and worker processes receive it
pickled.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

import chute as grain
from chute.experimental import assert_equal_output_after_checkpoint

datasets = pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def _no_tqdm_monitor_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """datasets makes (hidden) tqdm bars while it formats rows; tqdm's monitor thread would
    outlive the test, and later tests could not fork their workers."""
    tqdm = pytest.importorskip("tqdm")
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)


N = 23


def rows() -> list[dict[str, Any]]:
    return [{"id": i, "text": f"row {i}", "vec": [float(i), -float(i)]} for i in range(N)]


def hf_dataset() -> Any:
    columns = {key: [row[key] for row in rows()] for key in ("id", "text", "vec")}
    return datasets.Dataset.from_dict(columns)


class AddLength(grain.MapTransform):
    def map(self, row: dict[str, Any]) -> dict[str, Any]:
        return {**row, "length": len(row["text"])}


def plain(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: plain(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [plain(v) for v in tree]
    return tree.tolist() if isinstance(tree, np.ndarray) else tree


def test_dataset_has_a_batched_read() -> None:
    ds = hf_dataset()
    assert ds.__getitems__([3, 0]) == [rows()[3], rows()[0]]
    assert pickle.loads(pickle.dumps(ds))[5] == rows()[5]


def test_map_dataset_source_reads_rows_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    read_many = datasets.Dataset.__getitems__

    def counting(self: Any, keys: list[int]) -> list[Any]:
        calls.append(len(keys))
        return read_many(self, keys)

    monkeypatch.setattr(datasets.Dataset, "__getitems__", counting)
    ds = grain.MapDataset.source(hf_dataset())
    assert len(ds) == N and ds[4] == rows()[4]
    assert list(ds.to_iter_dataset(grain.ReadOptions(num_threads=0))) == rows()
    assert max(calls) > 1  # rows travel in chunks, not one by one


def test_shuffle_and_batch_match_a_list_of_rows() -> None:
    def pipeline(source: Any) -> list[Any]:
        ds = grain.MapDataset.source(source).shuffle(seed=5).map(AddLength()).batch(4)
        return [plain(b) for b in ds]

    got = pipeline(hf_dataset())
    assert got == pipeline(rows())
    ids = got[0]["id"]
    assert got[0]["vec"] == [[float(i) for i in ids], [-float(i) for i in ids]]
    assert sum(len(b["id"]) for b in got) == N


def test_pipeline_restores_anywhere() -> None:
    ds = grain.MapDataset.source(hf_dataset()).shuffle(seed=5).batch(4)
    assert_equal_output_after_checkpoint(ds, max_steps=None)


def loader(source: Any, workers: int, ops: list[Any]) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(N, shuffle=True, seed=3, num_epochs=1),
        operations=ops,
        worker_count=workers,
    )


def test_data_loader_in_worker_processes_matches_inline() -> None:
    inline = [plain(x) for x in loader(hf_dataset(), 0, [AddLength()])]
    assert [plain(x) for x in loader(hf_dataset(), 2, [AddLength()])] == inline
    assert sorted(row["id"] for row in inline) == list(range(N))
    batched = [plain(b) for b in loader(hf_dataset(), 2, [grain.Batch(5)])]
    assert batched == [plain(b) for b in loader(rows(), 2, [grain.Batch(5)])]


@pytest.mark.slow  # every restore starts two workers, and each imports datasets (~1.5 s)
def test_data_loader_restores_anywhere_with_workers() -> None:
    assert_equal_output_after_checkpoint(
        loader(hf_dataset(), 2, [grain.Batch(3)]), max_steps=None, restore_points=2
    )


def test_numpy_formatted_dataset_batches_into_arrays() -> None:
    ds = grain.MapDataset.source(hf_dataset().with_format("numpy")).batch(10)
    first = next(iter(ds))
    assert first["vec"].shape == (10, 2) and first["id"].tolist() == list(range(10))
