"""Every example of the JAX batching and device_put guide, with ``import chute as grain``.

An in-memory source of MNIST-shaped records stands in for
``tfds.data_source("mnist")``.  The multi-device sections (4 and 5) run in a
fresh interpreter with 8 CPU devices (see ``conftest.py``).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

import chute as grain

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

experimental = grain.experimental


class MnistLike:
    """1,024 MNIST-shaped records: a uint8 (28, 28, 1) image and an int64 label."""

    def __len__(self) -> int:
        return 1024

    def __getitem__(self, index: int) -> dict[str, Any]:
        rng = np.random.default_rng(index)
        image = rng.integers(0, 256, size=(28, 28, 1), dtype=np.uint8)
        return {"image": image, "label": np.int64(index % 10)}


source = MnistLike()


def preprocess(r: dict[str, Any]) -> dict[str, Any]:
    return {"image": r["image"].astype(np.float32) / 255.0, "label": r["label"]}


def mnist_batches(batch_size: int = 128, *, repeat: bool = False) -> Any:
    ds = grain.MapDataset.source(source).seed(42).shuffle()
    ds = ds.repeat() if repeat else ds
    return ds.map(preprocess).batch(batch_size, drop_remainder=True).to_iter_dataset()


def expected_batches(count: int, batch_size: int = 128) -> list[dict[str, Any]]:
    """The host batches the guide's pipeline yields, without any transfer."""
    return [b for _, b in zip(range(count), mnist_batches(batch_size, repeat=True))]


def assert_same_batch(batch: dict[str, Any], expected: dict[str, Any]) -> None:
    for key in ("image", "label"):
        np.testing.assert_array_equal(np.asarray(batch[key]), expected[key])


def test_minimal_pipeline_yields_static_batches_on_the_default_device() -> None:
    for batch in mnist_batches():
        batch = jax.device_put(batch)
        shapes = jax.tree.map(lambda x: (x.shape, x.dtype), batch)
        break
    assert shapes == {
        "image": ((128, 28, 28, 1), np.dtype("float32")),
        "label": ((128,), np.dtype("int32")),
    }


def test_repeat_then_batch_has_the_length_of_an_infinite_stream() -> None:
    ds = (
        grain.MapDataset.source(source)
        .seed(42)
        .shuffle()
        .repeat()
        .map(preprocess)
        .batch(128, drop_remainder=True)
    )
    assert len(ds) == sys.maxsize // 128 == 72057594037927935


def pad_collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    max_len = max(x["tokens"].shape[0] for x in items)
    tokens = np.stack([np.pad(x["tokens"], (0, max_len - x["tokens"].shape[0])) for x in items])
    return {"tokens": tokens}


def test_custom_collation_pads_to_the_longest_sequence() -> None:
    lengths = np.random.default_rng(0).integers(2, 6, size=16)
    ragged = grain.MapDataset.source([{"tokens": np.arange(n)} for n in lengths])
    ragged = ragged.batch(4, batch_fn=pad_collate, drop_remainder=True)
    for i in range(3):
        tokens = ragged[i]["tokens"]
        group = lengths[4 * i : 4 * i + 4]
        assert tokens.shape == (4, max(group))
        for row, n in zip(tokens, group):
            np.testing.assert_array_equal(row, np.pad(np.arange(n), (0, max(group) - n)))


def test_option_a_plain_device_put_lands_on_device_zero() -> None:
    expected = expected_batches(2)
    for step, batch in zip(range(2), mnist_batches()):
        batch = jax.device_put(batch)
        assert batch["image"].shape == (128, 28, 28, 1)
        assert batch["image"].sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
        assert_same_batch(batch, expected[step])


def test_option_b_thread_prefetch_then_map_device_put() -> None:
    ds = experimental.ThreadPrefetchIterDataset(mnist_batches(), prefetch_buffer_size=4)
    ds = ds.map(jax.device_put)
    expected = expected_batches(3)
    for step, batch in zip(range(3), ds):
        assert isinstance(batch["image"], jax.Array)
        assert batch["image"].shape == (128, 28, 28, 1)
        assert batch["image"].sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
        assert_same_batch(batch, expected[step])


def test_option_c_two_stage_prefetch_to_one_device() -> None:
    ds = experimental.device_put(
        ds=mnist_batches(), device=jax.devices()[0], cpu_buffer_size=4, device_buffer_size=2
    )
    expected = expected_batches(2)
    for step, batch in zip(range(2), ds):
        assert isinstance(batch["image"], jax.Array)
        assert batch["image"].sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
        assert_same_batch(batch, expected[step])


def data_sharding() -> jax.sharding.NamedSharding:
    mesh = jax.sharding.Mesh(np.array(jax.devices()), axis_names=("data",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))


def section_4_shards_each_batch_over_all_devices() -> None:
    sharding = data_sharding()
    ds = experimental.device_put(
        ds=mnist_batches(repeat=True), device=sharding, cpu_buffer_size=4, device_buffer_size=2
    )
    expected = expected_batches(3)
    for step, batch in zip(range(3), ds):
        image = batch["image"]
        assert isinstance(image.sharding, jax.sharding.NamedSharding)
        assert image.sharding == sharding and image.sharding.mesh.devices.size == 8
        assert image.sharding.spec == jax.sharding.PartitionSpec("data")
        assert {s.data.shape for s in image.addressable_shards} == {(16, 28, 28, 1)}
        assert len({s.device for s in image.addressable_shards}) == 8
        assert_same_batch(batch, expected[step])


def section_5_full_template_trains_a_jitted_step() -> None:
    batch_size = 256
    ds = (
        grain.MapDataset.source(source)
        .seed(42)
        .shuffle()
        .repeat()
        .map(preprocess)
        .batch(batch_size, drop_remainder=True)
        .to_iter_dataset()
    )
    ds = experimental.device_put(
        ds=ds, device=data_sharding(), cpu_buffer_size=4, device_buffer_size=2
    )

    @jax.jit
    def train_step(params: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
        return params + batch["image"].mean()

    params = jnp.zeros(())
    expected = 0.0
    for step, batch in zip(range(6), ds):  # 4 batches an epoch: crosses into the next
        assert batch["image"].sharding == data_sharding()
        params = train_step(params, batch)
        expected += float(expected_batches(step + 1, batch_size)[step]["image"].mean())
        np.testing.assert_allclose(float(params), expected, rtol=1e-5)


def test_section_4_named_sharding_over_8_devices(on_8_devices: Any) -> None:
    on_8_devices(__file__, "section_4_shards_each_batch_over_all_devices")


def test_section_5_full_template(on_8_devices: Any) -> None:
    on_8_devices(__file__, "section_5_full_template_trains_a_jitted_step")


if __name__ == "__main__":  # run by the on_8_devices fixture
    if len(jax.devices()) != 8:
        raise SystemExit(f"expected 8 CPU devices, got {jax.devices()}")
    globals()[sys.argv[1]]()
