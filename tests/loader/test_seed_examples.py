"""The DataLoader examples of the seed guides, run with `import chute as grain`."""

from __future__ import annotations

import csv
import os
import pathlib

import numpy as np
import pytest

import chute as grain

SPECIES = ["Eared Grebe", "Bald Eagle", "House Finch", "Carolina Wren", "Verdin"]
PHOTOGRAPHERS = ["Laura Erickson", "Jerry Ting", "Ned Harris"]


@pytest.fixture(scope="module")
def nabirds(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """200 small stand-in images (.npy) and a CSV metadata table, like NABirds."""
    base = tmp_path_factory.mktemp("nabirds")
    images = base / "cleaned_images"
    images.mkdir()
    rng = np.random.default_rng(0)
    rows = []
    for i in range(200):
        path = f"{i:04d}.npy"
        np.save(images / path, rng.integers(0, 256, (24, 24, 3), dtype=np.uint8))
        rows.append(
            {
                "path": path,
                "species_name": SPECIES[i % len(SPECIES)],
                "species_id": 100 + i % len(SPECIES),
                "photographer": PHOTOGRAPHERS[i % len(PHOTOGRAPHERS)],
                "is_training_img": int(i % 10 != 0),
            }
        )
    with open(base / "metadata.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return base


class NABirdsDataset:
    """NABirds dataset class (the seed's, reading a CSV table and .npy images)."""

    def __init__(self, metadata_file: list[dict[str, str]], data_dir: str) -> None:
        self.metadata_file = metadata_file
        self.data_dir = data_dir

    def __len__(self) -> int:
        return len(self.metadata_file)

    def __getitem__(self, idx: int) -> dict[str, object]:
        row = self.metadata_file[idx]
        img = np.load(os.path.join(self.data_dir, row["path"]))
        return {
            "img": img,
            "species_name": row["species_name"],
            "species_id": int(row["species_id"]),
            "photographer": row["photographer"],
        }


def _train_source(base: pathlib.Path) -> NABirdsDataset:
    with open(base / "metadata.csv") as f:
        metadata = list(csv.DictReader(f))
    train = [row for row in metadata if row["is_training_img"] == "1"]
    return NABirdsDataset(train, str(base / "cleaned_images"))


def test_seed_000_conceptual_data_loader() -> None:
    source = list(range(1000))  # stands in for ArrayRecordDataSource(["data/file1.array_record"])
    sampler = grain.IndexSampler(
        num_records=len(source),
        shard_options=grain.ShardOptions(shard_index=0, shard_count=1),
        shuffle=True,
        seed=42,
    )
    transformations = [grain.MapTransform(lambda x: x + 1), grain.Batch(batch_size=32)]
    loader = grain.DataLoader(data_source=source, sampler=sampler, operations=transformations)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == 40:
            break
    assert all(b.shape == (32,) for b in batches)
    first_epoch = np.concatenate(batches)[:1000]
    assert sorted(first_epoch.tolist())[:5] == [1, 2, 3, 4, 5]


def test_seed_004_samplers_print_like_grain(capsys: pytest.CaptureFixture[str]) -> None:
    for record_metadata in grain.SequentialSampler(num_records=4):
        print(record_metadata)
    sampler = grain.IndexSampler(num_records=200, shuffle=True, seed=0)
    for i, record_metadata in enumerate(sampler):
        print(record_metadata)
        if i == 3:
            break
    assert capsys.readouterr().out.splitlines() == [
        "RecordMetadata(index=0, record_key=0, rng=None)",
        "RecordMetadata(index=1, record_key=1, rng=None)",
        "RecordMetadata(index=2, record_key=2, rng=None)",
        "RecordMetadata(index=3, record_key=3, rng=None)",
        "RecordMetadata(index=0, record_key=134, rng=Generator(Philox))",
        "RecordMetadata(index=1, record_key=133, rng=Generator(Philox))",
        "RecordMetadata(index=2, record_key=10, rng=Generator(Philox))",
        "RecordMetadata(index=3, record_key=136, rng=Generator(Philox))",
    ]


def test_seed_004_custom_source_through_data_loaders(nabirds: pathlib.Path) -> None:
    nabirds_train = _train_source(nabirds)
    for i, element in enumerate(nabirds_train):  # the seed iterates the class directly too
        assert element["img"].shape == (24, 24, 3)
        if i == 3:
            break
    seq = grain.DataLoader(
        data_source=nabirds_train, sampler=grain.SequentialSampler(num_records=4), worker_count=0
    )
    assert [e["species_name"] for e in seq] == [nabirds_train[i]["species_name"] for i in range(4)]

    isampler = grain.IndexSampler(num_records=len(nabirds_train), shuffle=True, seed=0)
    shuffled = grain.DataLoader(data_source=nabirds_train, sampler=isampler, worker_count=0)
    for i, element in enumerate(shuffled):
        assert set(element) == {"img", "species_name", "species_id", "photographer"}
        if i == 3:
            break

    batched = grain.DataLoader(
        data_source=nabirds_train,
        sampler=isampler,
        worker_count=0,
        operations=[grain.Batch(batch_size=32)],
    )
    batch = next(iter(batched))
    assert batch["img"].shape == (32, 24, 24, 3) and batch["img"].dtype == np.uint8
    assert batch["species_id"].shape == (32,)
    assert batch["photographer"].dtype.kind == "U" and batch["species_name"].shape == (32,)
