"""``device_put``: transfer, prefetch depth, checkpoints, shutdown and batch checks."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

import numpy as np
import pytest

from chute import MapDataset
from chute._accel.device_put import device_put
from chute.experimental import assert_equal_output_after_checkpoint

jax = pytest.importorskip("jax")


def batches(count: int = 10, size: int = 8) -> Any:
    ds = MapDataset.range(count * size).map(lambda i: {"x": np.full((3,), i, np.float32), "y": i})
    return ds.batch(size).to_iter_dataset()


def prefetch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("chute-thread-prefetch-")}


def test_batches_arrive_on_the_device_unchanged() -> None:
    device = jax.devices()[0]
    out = list(device_put(batches(), device))
    assert len(out) == 10
    for got, want in zip(out, batches()):
        assert isinstance(got["x"], jax.Array) and got["x"].devices() == {device}
        np.testing.assert_array_equal(np.asarray(got["x"]), want["x"])


def test_device_buffer_holds_transferred_batches_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    transferred: list[Any] = []
    ahead = threading.Event()
    real = jax.device_put

    def counting(x: Any, device: Any = None) -> Any:
        transferred.append(x)
        if len(transferred) >= 3:
            ahead.set()
        return real(x, device)

    monkeypatch.setattr(jax, "device_put", counting)
    with iter(device_put(batches(), jax.devices()[0], device_buffer_size=2)) as it:
        next(it)
        assert ahead.wait(timeout=30)  # the step's batch and 2 more already on device


def test_state_after_n_batches_restores_the_next_batch_exactly() -> None:
    ds = device_put(batches(), jax.devices()[0])
    for n in (0, 1, 4, 9, 10):
        with iter(ds) as it:
            for _ in range(n):
                next(it)
            state = it.get_state()
            rest = [np.asarray(b["x"]) for b in it]
        with iter(ds) as restored:
            restored.set_state(state)
            again = [np.asarray(b["x"]) for b in restored]
        assert len(again) == len(rest) == 10 - n
        for a, b in zip(again, rest):
            np.testing.assert_array_equal(a, b)


def test_passes_the_checkpoint_conformance_check() -> None:
    ds = device_put(batches(5, 2), jax.devices()[0], cpu_buffer_size=2, device_buffer_size=1)
    assert_equal_output_after_checkpoint(ds.map(lambda b: jax.tree.map(np.asarray, b)))


def test_close_stops_the_transfer_thread() -> None:
    before = prefetch_threads()
    it = iter(device_put(batches(), jax.devices()[0]))
    next(it)
    started = prefetch_threads() - before
    assert len(started) == 1
    it.close()
    assert not any(t.is_alive() for t in started)


def _join(threads: set[threading.Thread]) -> None:
    gc.collect()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)


def test_break_out_of_the_loop_stops_the_threads() -> None:
    before = prefetch_threads()
    for _ in device_put(batches(), jax.devices()[0]):
        break
    started = prefetch_threads() - before
    assert len(started) == 1
    _join(started)


def test_exception_in_the_loop_body_stops_the_threads() -> None:
    before = prefetch_threads()

    def train() -> None:
        for _ in device_put(batches(), jax.devices()[0]):
            raise RuntimeError("step failed")

    with pytest.raises(RuntimeError, match="step failed"):
        train()
    started = prefetch_threads() - before
    _join(started)


@pytest.mark.parametrize(("cpu", "on_device"), [(0, 0), (2, 0), (0, 2), (3, 1)])
def test_every_buffer_combination_gives_the_same_batches_on_device(
    cpu: int, on_device: int
) -> None:
    ds = device_put(batches(), jax.devices()[0], cpu_buffer_size=cpu, device_buffer_size=on_device)
    out = list(ds)
    assert all(isinstance(b["x"], jax.Array) for b in out)
    for got, want in zip(out, batches(), strict=True):
        np.testing.assert_array_equal(np.asarray(got["x"]), want["x"])


@pytest.mark.parametrize("on_device", [0, 2])
def test_a_failed_transfer_names_the_batch_and_the_next_batch_follows(
    monkeypatch: pytest.MonkeyPatch, on_device: int
) -> None:
    real = jax.device_put

    def failing_third(x: Any, device: Any = None) -> Any:
        if int(np.asarray(x["y"])[0]) == 16:
            raise RuntimeError("transfer failed")
        return real(x, device)

    monkeypatch.setattr(jax, "device_put", failing_third)
    with iter(device_put(batches(), jax.devices()[0], device_buffer_size=on_device)) as it:
        assert [int(next(it)["y"][0]) for _ in range(2)] == [0, 8]
        with pytest.raises(RuntimeError, match="transfer failed") as info:
            next(it)
        assert "stage device_put while processing element index 2" in str(info.value.__notes__)
        assert int(next(it)["y"][0]) == 24


def test_rejects_a_device_that_is_neither_device_nor_sharding() -> None:
    with pytest.raises(TypeError, match="jax.Device or a jax.sharding.Sharding"):
        device_put(batches(), "cpu")  # type: ignore[arg-type]


def test_rejects_a_negative_buffer_size() -> None:
    with pytest.raises(ValueError, match="cpu_buffer_size"):
        device_put(batches(), jax.devices()[0], cpu_buffer_size=-1)


def test_without_jax_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(ImportError, match=r"pip install chute\[jax\]"):
        device_put(batches(), object())  # type: ignore[arg-type]


def indivisible_batch_fails_before_any_transfer() -> None:
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    calls: list[Any] = []
    real = jax.device_put
    jax.device_put = lambda *a, **k: calls.append(a) or real(*a, **k)  # type: ignore[assignment]
    with iter(device_put(batches(4, 12), sharding)) as it:
        try:
            next(it)
        except ValueError as exc:
            message = str(exc)
        else:
            raise AssertionError("no ValueError for a batch of 12 over 8 devices")
    assert "batch of size 12" in message and "8 devices" in message, message
    assert "divisible by 8" in message, message
    assert not calls
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    assert next(iter(device_put(batches(4, 12), replicated)))["x"].shape == (12, 3)


def test_indivisible_batch_raises_a_clear_error(on_8_devices: Any) -> None:
    on_8_devices(__file__, "indivisible_batch_fails_before_any_transfer")


if __name__ == "__main__":  # run by the on_8_devices fixture
    if len(jax.devices()) != 8:
        raise SystemExit(f"expected 8 CPU devices, got {jax.devices()}")
    globals()[sys.argv[1]]()
