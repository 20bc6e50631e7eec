"""chute.checkpoint: per-process JSON files, alone and through Orbax's CheckpointManager."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute
from chute import checkpoint
from chute._core.errors import CheckpointError


def _pipeline() -> chute.IterDataset[Any]:
    return (
        chute.MapDataset.range(30).shuffle(seed=5).map(lambda x: x * 2).to_iter_dataset().batch(4)
    )


def _loader() -> chute.DataLoader:
    return chute.load(list(range(30)), num_epochs=1, shuffle=True, seed=3, batch_size=4)


def _rest(iterator: Any) -> list[list[int]]:
    return [np.asarray(b).tolist() for b in iterator]


@pytest.mark.parametrize("make", [_pipeline, _loader], ids=["dataset", "data_loader"])
def test_save_then_load_continues_exactly(tmp_path: Path, make: Any) -> None:
    it = iter(make())
    next(it), next(it)
    path = checkpoint.save(it, tmp_path / "ckpt")
    assert path == tmp_path / "ckpt" / "process_0-of-1.json"
    assert sorted(p.name for p in path.parent.iterdir()) == ["process_0-of-1.json"]
    json.loads(path.read_text())  # plain JSON on disk, whatever get_state returns
    expected = _rest(it)
    restored = checkpoint.load(iter(make()), tmp_path / "ckpt")
    assert _rest(restored) == expected


def test_save_overwrites_the_previous_file(tmp_path: Path) -> None:
    it = iter(_pipeline())
    checkpoint.save(it, tmp_path)
    next(it)
    checkpoint.save(it, tmp_path)
    expected = _rest(it)
    assert _rest(checkpoint.load(iter(_pipeline()), tmp_path)) == expected


def test_save_into_a_file_path_raises(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        checkpoint.save(iter(_pipeline()), file)


def test_load_from_missing_directory_or_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        checkpoint.load(iter(_pipeline()), tmp_path / "missing")
    (tmp_path / "process_0-of-2.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="process_0-of-2.json"):
        checkpoint.load(iter(_pipeline()), tmp_path)


def test_load_of_another_pipeline_raises(tmp_path: Path) -> None:
    checkpoint.save(iter(chute.MapDataset.range(5).to_iter_dataset()), tmp_path)
    with pytest.raises(CheckpointError):
        checkpoint.load(iter(_pipeline()), tmp_path)


def test_save_rejects_objects_without_state(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="get_state"):
        checkpoint.save(iter([1, 2]), tmp_path)


def test_exported_names() -> None:
    assert checkpoint.__all__ == sorted(checkpoint.__all__)
    for name in checkpoint.__all__:
        assert hasattr(checkpoint, name), name
    assert "CheckpointSave" in dir(checkpoint)


@pytest.mark.parametrize("make", [_pipeline, _loader], ids=["dataset", "data_loader"])
def test_checkpoint_manager_saves_model_and_data_together(tmp_path: Path, make: Any) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    jnp = pytest.importorskip("jax.numpy")
    it = iter(make())
    next(it)
    params = {"w": jnp.arange(4.0), "b": jnp.ones(2)}
    with ocp.CheckpointManager(tmp_path) as manager:
        manager.save(
            7,
            args=ocp.args.Composite(
                model=ocp.args.StandardSave(params), data=checkpoint.CheckpointSave(it)
            ),
        )
        manager.wait_until_finished()
    assert (tmp_path / "7" / "data" / "process_0-of-1.json").is_file()
    expected = _rest(it)
    fresh = iter(make())
    with ocp.CheckpointManager(tmp_path) as manager:
        restored = manager.restore(
            manager.latest_step(),
            args=ocp.args.Composite(
                model=ocp.args.StandardRestore({"w": jnp.zeros(4), "b": jnp.zeros(2)}),
                data=checkpoint.CheckpointRestore(fresh),
            ),
        )
    assert restored.data is fresh
    np.testing.assert_array_equal(restored.model["w"], np.arange(4.0))
    assert _rest(fresh) == expected


def test_handler_restore_without_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="process_0-of-1.json"):
        checkpoint.CheckpointHandler().restore(tmp_path, item=iter(_pipeline()))
