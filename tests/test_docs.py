"""The README's code and the seed guides' dataset examples run as written."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import chute as grain

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs the README's shell commands for `chute convert`/`inspect`, then its Python."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from chute.cli import main

    monkeypatch.chdir(tmp_path)
    rows = {"image": [bytes([i % 256]) * 16 for i in range(600)], "label": list(range(600))}
    pq.write_table(pa.table(rows), "train.parquet")
    assert (
        main(["convert", "train.parquet", "data/train", "--num-shards", "8", "--no-progress"]) == 0
    )
    assert main(["inspect", "data/train"]) == 0
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for block in blocks:
        if block.lstrip().startswith("import chute as grain          # was"):
            continue  # the one-line migration snippet
        exec(compile(block, "README.md", "exec"), {})


def run_example(name: str) -> subprocess.CompletedProcess[str]:
    """Runs ``examples/<name>`` in a fresh interpreter; it must exit 0."""
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_quickstart_example_runs() -> None:
    assert "identical batch" in run_example("quickstart.py").stdout


def test_packing_example_runs() -> None:
    pytest.importorskip("pyarrow")
    out = run_example("packing.py")
    assert "identical batch" in out.stdout
    assert "keys ['inputs', 'inputs_positions', 'inputs_segment_ids']" in out.stdout


def test_images_example_decodes_jpegs_in_workers_and_resumes() -> None:
    pytest.importorskip("PIL")
    out = run_example("images.py")
    assert "batch: image (32, 32, 32, 3) float32" in out.stdout
    assert "resumed: identical batch" in out.stdout


def test_torch_example_trains_saves_mid_epoch_and_resumes_with_another_worker_count() -> None:
    pytest.importorskip("torch")
    out = run_example("torch_resume.py").stdout
    assert "saved after 25 batches of epoch 0 (num_workers=2)" in out
    assert "resumed with num_workers=1: 103 more batches" in out
    assert "the same 128 batches in the same order: True" in out
    assert "ends with the same weights: True" in out


def test_topology_example_saves_on_two_hosts_and_resumes_on_four_and_on_one() -> None:
    out = run_example("topology.py").stdout
    assert "2 host(s) x 2 worker(s)" in out
    assert out.count("resumed from the 2 files, batches 12-31: identical") == 2
    assert "4 host(s) x 1 worker(s)" in out and "1 host(s) x 3 worker(s)" in out


def test_profile_example_runs() -> None:
    out = run_example("profile_me.py")
    assert "map(jitter)" in out.stdout
    assert "Suggested performance config" in out.stdout


def test_bucket_example_reads_s3_and_gcs_and_crosses_a_checkpoint() -> None:
    for module in ("moto.server", "gcp_storage_emulator.server", "gcsfs", "obstore", "cramjam"):
        pytest.importorskip(module)
    out = run_example("from_a_bucket.py")
    assert "into s3://example/data/train" in out.stdout
    assert "into gs://example/data/train" in out.stdout
    assert "resumed on GCS: identical batch" in out.stdout
    assert "shard copies in the cache: 4 of 4" in out.stdout
    assert "Traceback" not in out.stderr and "still inside a read" not in out.stderr


def _mnist_like(n: int = 512) -> list[dict[str, object]]:
    rng = np.random.default_rng(0)
    return [
        {"image": rng.integers(0, 256, (28, 28, 1), dtype=np.uint8), "label": np.int32(i % 10)}
        for i in range(n)
    ]


def test_seed_guide_minimal_pipeline() -> None:
    source = _mnist_like()
    ds = (
        grain.MapDataset.source(source)
        .seed(42)
        .shuffle()
        .map(lambda r: {"image": r["image"].astype(np.float32) / 255.0, "label": r["label"]})
        .batch(batch_size=128, drop_remainder=True)
        .to_iter_dataset()
    )
    for batch in ds:
        shapes = {k: (v.shape, v.dtype) for k, v in batch.items()}
        assert shapes == {
            "image": ((128, 28, 28, 1), np.dtype("float32")),
            "label": ((128,), np.dtype("int32")),
        }
        break


def test_seed_guide_stable_shapes_and_custom_collation() -> None:
    source = _mnist_like()
    ds = (
        grain.MapDataset.source(source)
        .seed(42)
        .shuffle()
        .repeat()
        .map(lambda r: {"image": r["image"].astype(np.float32) / 255.0, "label": r["label"]})
        .batch(128, drop_remainder=True)
    )
    assert len(ds) == 72057594037927935

    def pad_collate(items):  # type: ignore[no-untyped-def]
        max_len = max(x["tokens"].shape[0] for x in items)
        tokens = np.stack([np.pad(x["tokens"], (0, max_len - x["tokens"].shape[0])) for x in items])
        return {"tokens": tokens}

    ragged = grain.MapDataset.source(
        [{"tokens": np.arange(np.random.randint(2, 6))} for _ in range(16)]
    )
    ragged = ragged.batch(4, batch_fn=pad_collate, drop_remainder=True)
    for i in range(3):
        assert ragged[i]["tokens"].shape[0] == 4


def test_seed_blog_dataset_chain_without_workers() -> None:
    dataset = (
        grain.MapDataset.range(100)
        .shuffle(0)
        .map(lambda elem: elem)  # no op
        .to_iter_dataset()
        .batch(2, drop_remainder=True)
    )
    batches = list(dataset)
    assert len(batches) == 50
    assert sorted(np.concatenate(batches).tolist()) == list(range(100))


def test_ray_example_checkpoints_loses_a_worker_and_resumes() -> None:
    pytest.importorskip("ray")
    out = run_example("on_a_ray_cluster.py")
    assert "Ray workers and local workers yield the same batches: True" in out.stdout
    assert "resumed from the checkpoint in local workers: identical batch True" in out.stdout
    assert "restarting it from the last element it delivered" in out.stderr


# Grain 0.2.18's top-level names (`dir(grain)` after `import grain`): the README's and the
# examples' code, written with `import chute as grain`, must also run with `import grain`.
GRAIN_TOP_LEVEL = frozenset(
    {
        "DataLoader",
        "DataLoaderIterator",
        "DatasetIterator",
        "IterDataset",
        "MapDataset",
        "MultiprocessingOptions",
        "ReadOptions",
        "Record",
        "RecordMetadata",
        "checkpoint",
        "config",
        "constants",
        "experimental",
        "load",
        "monitoring",
        "multiprocessing",
        "samplers",
        "sharding",
        "sources",
        "transforms",
    }
)
# chute's own top-level additions that its docs may use: each is marked new in the README's
# table of Grain names (a row that starts with "| — |").
CHUTE_ADDITIONS = frozenset({"RayExecutor"})


def _code_written_as_grain() -> dict[str, str]:
    """Every code block or example that reads ``import chute as grain``, by where it is."""
    found: dict[str, str] = {}
    for doc in ("README.md", "docs/cli.md"):
        text = (ROOT / doc).read_text()
        for n, block in enumerate(re.findall(r"```python\n(.*?)```", text, flags=re.S)):
            if re.search(r"^import chute as grain\b", block, flags=re.M):
                found[f"{doc} block {n}"] = block
    for example in sorted((ROOT / "examples").glob("*.py")):
        text = example.read_text()
        if re.search(r"^import chute as grain\b", text, flags=re.M):
            found[f"examples/{example.name}"] = text
    return found


def test_docs_use_only_names_grain_has_at_its_top_level_or_new_ones_marked_as_such() -> None:
    code = _code_written_as_grain()
    assert len(code) >= 5
    for where, text in code.items():
        code_lines = [line for line in text.splitlines() if not line.startswith("import ")]
        used = set(re.findall(r"\bgrain\.([A-Za-z_]\w*)", "\n".join(code_lines)))
        unknown = used - GRAIN_TOP_LEVEL - CHUTE_ADDITIONS
        assert not unknown, f"{where} uses grain.{sorted(unknown)}, which Grain 0.2.18 lacks"
    new_rows = [
        line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| — |")
    ]
    for name in CHUTE_ADDITIONS:
        assert any(f"chute.{name}`" in row for row in new_rows), name
        assert hasattr(grain, name)
