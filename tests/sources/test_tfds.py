"""TensorFlow Datasets data sources (ArrayRecord files) used as chute sources.

``tensorflow-datasets`` builds and reads ``array_record`` datasets without
TensorFlow and without the network.  Its data sources (``tfds.data_source``,
``builder.as_data_source``) have ``__len__``, ``__getitem__`` and a batched
``__getitems__``, so chute reads them directly.
"""

from __future__ import annotations

import pathlib
import pickle
import tempfile
from typing import Any

import numpy as np
import pytest

import chute as grain
from chute.experimental import assert_equal_output_after_checkpoint

tfds = pytest.importorskip("tensorflow_datasets")
pytest.importorskip("array_record")

N = 20


class ChuteTinyTfds(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A tiny dataset built locally: ids, vectors and text."""

    VERSION = tfds.core.Version("1.0.0")
    # No checksums file to look up.  (Finding one next to a class defined in a package
    # needs the `importlib_resources` backport, which tfds 4.9.10 uses but does not
    # install on Python >= 3.9.)
    code_path = None

    def _info(self) -> Any:
        features = {
            "id": tfds.features.Scalar(np.int64),
            "vec": tfds.features.Tensor(shape=(3,), dtype=np.float32),
            "text": tfds.features.Text(),
        }
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features))

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
        return {"train": self._generate_examples(N), "test": self._generate_examples(5)}

    def _generate_examples(self, count: int) -> Any:
        for i in range(count):
            yield i, {"id": i, "vec": np.full(3, i, np.float32), "text": f"row {i}"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("tfds")
    tfds.disable_progress_bar()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(root))  # tfds leaves an empty temp dir
        ChuteTinyTfds(data_dir=str(root), file_format="array_record").download_and_prepare()
    return str(root)


def source(data_dir: str, split: str = "train") -> Any:
    """What users call; found from the files, no registered builder needed."""
    return tfds.data_source("chute_tiny_tfds", data_dir=data_dir, split=split)


def plain(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in tree.items()}


def test_builds_array_record_files_locally(data_dir: str) -> None:
    files = sorted(p.name for p in pathlib.Path(data_dir).rglob("*.array_record*"))
    assert files and all(".array_record-" in name for name in files)


def test_data_source_reads_rows_in_batches(data_dir: str) -> None:
    src = source(data_dir)
    rows = src.__getitems__(list(range(N)))
    assert sorted(int(r["id"]) for r in rows) == list(range(N))
    row = src[0]
    assert row["text"] == f"row {row['id']}".encode() and row["vec"].dtype == np.float32
    assert len(source(data_dir, "test")) == 5 and len(source(data_dir, "train[:5]")) == 5


def test_map_dataset_source_shuffles_and_batches(data_dir: str) -> None:
    src = source(data_dir)
    ds = grain.MapDataset.source(src).shuffle(seed=4).batch(8)
    batches = list(ds)
    assert [len(b["id"]) for b in batches] == [8, 8, 4]
    ids = np.concatenate([b["id"] for b in batches])
    assert sorted(ids.tolist()) == list(range(N))
    np.testing.assert_array_equal(batches[0]["vec"][:, 0], batches[0]["id"].astype(np.float32))
    assert_equal_output_after_checkpoint(ds, max_steps=None)


def test_builder_as_data_source_pickles(data_dir: str) -> None:
    builder = tfds.builder_from_directory(str(pathlib.Path(data_dir, "chute_tiny_tfds", "1.0.0")))
    src = pickle.loads(pickle.dumps(builder.as_data_source(split="train")))
    assert [plain(r) for r in src.__getitems__([0, 1])] == [plain(src[0]), plain(src[1])]


def test_data_loader_in_worker_processes_reads_like_a_list(data_dir: str) -> None:
    def load(data_source: Any, workers: int) -> list[Any]:
        loader = grain.DataLoader(
            data_source=data_source,
            sampler=grain.IndexSampler(N, shuffle=True, seed=2, num_epochs=1),
            operations=[grain.Batch(6)],
            worker_count=workers,
        )
        return [plain(b) for b in loader]

    src = source(data_dir)
    as_list = [src[i] for i in range(N)]
    with_workers = load(src, 2)
    assert with_workers == load(as_list, 2)
    assert sorted(i for b in with_workers for i in b["id"]) == list(range(N))
    assert sorted(i for b in load(src, 0) for i in b["id"]) == list(range(N))
