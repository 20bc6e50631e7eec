"""PyTorch interop: to_torch (tensor batches) and to_torch_dataset (torch DataLoader)."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

import chute
from chute._accel.torch import to_torch, to_torch_dataset

torch = pytest.importorskip("torch")


def _double(x: int) -> dict[str, Any]:
    return {"x": np.float32(x) * 2, "label": x, "name": f"n{x}"}


def _batches() -> chute.IterDataset[Any]:
    return chute.MapDataset.range(10).map(_double).to_iter_dataset().batch(4)


def test_leaves_become_tensors_with_dtypes_and_values() -> None:
    batches = list(to_torch(_batches()))
    first = batches[0]
    assert isinstance(first["x"], torch.Tensor) and first["x"].dtype == torch.float32
    assert first["label"].dtype == torch.int64
    assert first["x"].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert first["label"].tolist() == [0, 1, 2, 3]
    assert list(first["name"]) == ["n0", "n1", "n2", "n3"]  # strings pass through
    assert [b["label"].shape[0] for b in batches] == [4, 4, 2]


def test_tensors_share_memory_with_writeable_arrays() -> None:
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    (tensor,) = to_torch(chute.MapDataset.source([array]))
    array[0, 0] = 99
    assert tensor[0, 0].item() == 99


@pytest.mark.parametrize(
    "array",
    [
        np.arange(5)[::-1],
        np.arange(5, dtype=">i4"),
        np.frombuffer(np.arange(5, dtype=np.int16).tobytes(), dtype=np.int16),
    ],
    ids=["reversed", "big_endian", "read_only"],
)
def test_arrays_torch_cannot_wrap_are_copied(array: np.ndarray) -> None:
    (tensor,) = to_torch(chute.MapDataset.source([array]))
    assert tensor.tolist() == array.tolist()


def test_scalars_become_zero_dim_tensors() -> None:
    values = list(to_torch(chute.MapDataset.source([np.float64(1.5), np.bool_(True)])))
    assert [v.dtype for v in values] == [torch.float64, torch.bool]
    assert [v.shape for v in values] == [torch.Size([]), torch.Size([])]


def test_state_restores_exactly() -> None:
    ds = to_torch(_batches())
    it = iter(ds)
    next(it)
    state = it.get_state()
    expected = [b["label"].tolist() for b in it]
    restored = iter(ds)
    restored.set_state(state)
    assert [b["label"].tolist() for b in restored] == expected == [[4, 5, 6, 7], [8, 9]]


def test_bad_arguments_raise() -> None:
    with pytest.raises(TypeError, match="MapDataset or IterDataset"):
        to_torch([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a torch device"):
        to_torch(_batches(), device="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="pin_memory"):
            to_torch(_batches(), pin_memory=True)
    with pytest.raises(TypeError, match="MapDataset or IterDataset"):
        to_torch_dataset(range(3))


def test_torch_data_loader_without_workers_checkpoints() -> None:
    data = to_torch_dataset(_batches())
    assert isinstance(data, torch.utils.data.IterableDataset)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=0)
    it = iter(loader)
    first = next(it)
    assert isinstance(first["x"], torch.Tensor) and first["label"].tolist() == [0, 1, 2, 3]
    state = data.get_state()
    expected = [b["label"].tolist() for b in it]
    data.set_state(state)
    assert [b["label"].tolist() for b in loader] == expected == [[4, 5, 6, 7], [8, 9]]
    assert next(iter(loader))["label"].tolist() == [0, 1, 2, 3]  # pending state used once


def test_get_state_before_iterating_raises() -> None:
    with pytest.raises(ValueError, match="num_workers=0"):
        to_torch_dataset(_batches()).get_state()


# JAX (imported by other tests) warns that fork() copies its threads; the
# workers here never use JAX.
_FORK_WARNING = "ignore:os.fork\\(\\) was called:RuntimeWarning"


@pytest.mark.filterwarnings(_FORK_WARNING)
@pytest.mark.parametrize("num_workers", [1, 2])
def test_torch_workers_share_the_elements(num_workers: int) -> None:
    ds = chute.MapDataset.range(12).map(_double)
    for pipeline in (ds, ds.to_iter_dataset()):
        loader = torch.utils.data.DataLoader(
            to_torch_dataset(pipeline), batch_size=3, num_workers=num_workers
        )
        labels = [b["label"].tolist() for b in loader]
        assert sorted(x for batch in labels for x in batch) == list(range(12))
        if num_workers == 2:  # torch alternates workers; worker w reads w, w + 2, ...
            assert labels == [[0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9, 11]]


@pytest.mark.filterwarnings(_FORK_WARNING)
def test_state_cannot_restore_into_workers() -> None:
    data = to_torch_dataset(_batches())
    data.set_state(iter(_batches()).get_state())
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)
    with pytest.raises(ValueError, match="num_workers=0"):
        list(loader)


def _spin(x: int) -> int:
    deadline = time.thread_time() + 0.0005
    while time.thread_time() < deadline:
        pass
    return sum(t.name.startswith("chute") for t in threading.enumerate())


@pytest.mark.filterwarnings(_FORK_WARNING)
def test_torch_workers_read_inline_when_the_work_holds_the_cpu() -> None:
    ds = chute.MapDataset.range(1200).map(_spin).to_iter_dataset()
    loader = torch.utils.data.DataLoader(to_torch_dataset(ds), batch_size=None, num_workers=2)
    assert {int(threads) for threads in loader} == {0}  # torch's queue feeder is not chute's
