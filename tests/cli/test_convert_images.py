"""``chute convert`` of an image folder: labels from sub-folders said out loud, no labels
for a flat folder, and folders that mix images with other data refused."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from chute._sources.array_record.source import ArrayRecordDataSource
from chute.cli import main

pytest.importorskip("array_record")


def convert(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    status = main(["convert", *map(str, argv), "--no-progress"])
    out, err = capsys.readouterr()
    return status, out, err


def write(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"\x89PNG " + name.encode())


def records(prefix: Path) -> list[dict[str, object]]:
    return [pickle.loads(r) for r in ArrayRecordDataSource(str(prefix))]


def test_sub_folder_labels_are_printed_with_their_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "in", "dog/1.png", "cat/2.png", "fish/3.jpg", "cat/4.png")
    status, out, err = convert(capsys, tmp_path / "in", tmp_path / "out")
    assert (status, err) == (0, "")
    assert "labels: from sub-folder names, 3 classes: cat=0, dog=1, fish=2" in out
    assert [(r["filename"], r["label_id"]) for r in records(tmp_path / "out")] == [
        ("cat/2.png", 0),
        ("cat/4.png", 0),
        ("dog/1.png", 1),
        ("fish/3.jpg", 2),
    ]


def test_a_flat_folder_gives_records_without_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "in", "a.png", "b.png")
    (tmp_path / "in" / "README.txt").write_text("about these images")
    status, out, _ = convert(capsys, tmp_path / "in", tmp_path / "out")
    assert status == 0
    assert "labels: none, all images are directly in the folder" in out
    assert "skipped 1 file(s) that are not images: README.txt" in out
    assert records(tmp_path / "out") == [
        {"image": b"\x89PNG a.png", "filename": "a.png"},
        {"image": b"\x89PNG b.png", "filename": "b.png"},
    ]


def test_a_folder_mixing_images_and_arrays_is_refused_with_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "in", "a.png", "b.png", "c.png")
    np.save(tmp_path / "in" / "features.npy", np.zeros(3))
    status, _, err = convert(capsys, tmp_path / "in", tmp_path / "out")
    assert status == 2 and err.count("\n") == 1
    assert "mixes images with other data files (3 .png, 1 .npy)" in err
    assert f"'{tmp_path / 'in'}/*.npy'" in err
    assert not list(tmp_path.glob("out*"))


def test_images_both_loose_and_in_sub_folders_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "in", "loose.png", "cat/1.png", "dog/2.png")
    status, _, err = convert(capsys, tmp_path / "in", tmp_path / "out")
    assert status == 2
    assert "1 image(s) lie directly in the folder" in err and "(cat, dog)" in err
    assert not list(tmp_path.glob("out*"))


def test_a_folder_of_arrays_suggests_a_glob_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in").mkdir()
    for name in ("a", "b"):
        np.save(tmp_path / "in" / f"{name}.npy", np.zeros(3))
    status, _, err = convert(capsys, tmp_path / "in", tmp_path / "out")
    assert status == 2
    assert "(found 2 .npy)" in err and f"'{tmp_path / 'in'}/*.npy'" in err
