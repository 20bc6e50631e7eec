"""How long a training step waits for data: two-stage ``device_put`` vs plain.

A training loop over an MNIST-shaped pipeline (``source().seed(42).shuffle()
.map(normalise).batch(128, drop_remainder=True).to_iter_dataset()``) runs a
simulated 20 ms step (a sleep, which releases the GIL as an accelerator step
does).  Before each step it takes the next batch onto the default JAX device:

* ``plain``: ``next(it)`` then ``jax.device_put(batch)`` in the loop;
* ``two-stage``: ``chute.experimental.device_put(ds, device, cpu_buffer_size=4,
  device_buffer_size=2)``, which prepares and transfers batches ahead.

Reported: the mean time per step spent waiting for the batch to be on the
device (``jax.block_until_ready``), after a warm-up of 20 steps.  Target: the
two-stage wait is at most 10% of the plain wait.

A third row measures the floor of any background prefetcher on this machine:
a thread hands over batches that are already on the device through a
``queue.Queue``, so the wait is only the wake-up of a thread hand-off plus
``jax.block_until_ready`` of a ready batch.  Before timing, the two-stage
batches are checked equal to the plain ones.  Run through
``bash benchmarks/run device``.
"""

# bench-requires: jax[cpu]

from __future__ import annotations

import queue
import statistics
import sys
import threading
import time
from typing import Any

import common
from bench_core import mnist_source, normalise

STEP_SECONDS = 0.02
WARMUP, STEPS = 20, 150
TARGET = 0.10


def pipeline(chute: Any, source: list[Any]) -> Any:
    return (
        chute.MapDataset.source(source)
        .seed(42)
        .shuffle()
        .map(normalise)
        .batch(128, drop_remainder=True)
        .to_iter_dataset()
    )


def waits(iterator: Any, transfer: Any, jax: Any) -> list[float]:
    """Seconds each step waited for its batch, after the warm-up steps."""
    out = []
    for step in range(WARMUP + STEPS):
        began = time.perf_counter()
        batch = transfer(next(iterator))
        jax.block_until_ready(batch)
        if step >= WARMUP:
            out.append(time.perf_counter() - began)
        time.sleep(STEP_SECONDS)  # the training step
    return out


def ready_batches(batches: list[Any]) -> Any:
    """An iterator over ``batches`` (already on the device) through a thread and a queue."""
    handoff: queue.Queue[Any] = queue.Queue(maxsize=2)

    def produce() -> None:
        for batch in batches:
            handoff.put(batch)

    threading.Thread(target=produce, daemon=True).start()
    return iter(handoff.get, None)


def same_batches(chute: Any, jax: Any, source: list[Any], device: Any) -> None:
    """Checks that the two-stage batches equal the plain ones (the first 8)."""
    import numpy as np

    plain = iter(pipeline(chute, source))
    staged = iter(chute.experimental.device_put(pipeline(chute, source), device))
    for _ in range(8):
        want, got = next(plain), next(staged)
        for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
            np.testing.assert_array_equal(a, np.asarray(b))
    plain.close()
    staged.close()


def row(name: str, values: list[float]) -> list[str]:
    return [
        name,
        f"{statistics.mean(values) * 1e3:.3f}",
        f"{statistics.median(values) * 1e3:.3f}",
        f"{max(values) * 1e3:.3f}",
    ]


def main() -> int:
    args = common.parse_args(__doc__.splitlines()[0])
    import jax

    import chute

    source = mnist_source()
    device = jax.devices()[0]
    print(f"device benchmark: chute {chute.__version__}, jax {jax.__version__} on {device}")
    warning = common.load_warning()
    if warning:
        print(warning)
    same_batches(chute, jax, source, device)
    plain_it = iter(pipeline(chute, source))
    plain = waits(plain_it, lambda b: jax.device_put(b, device), jax)
    plain_it.close()
    staged = chute.experimental.device_put(
        pipeline(chute, source), device, cpu_buffer_size=4, device_buffer_size=2
    )
    staged_it = iter(staged)
    two_stage = waits(staged_it, lambda b: b, jax)
    on_device = [staged_it.__next__() for _ in range(8)]
    staged_it.close()
    floor = waits(ready_batches(on_device * (WARMUP + STEPS)), lambda b: b, jax)
    rows = [
        row("plain jax.device_put", plain),
        row("two-stage device_put", two_stage),
        row("floor: thread hand-off of ready batches", floor),
    ]
    print(f"\n  {STEPS} steps of {STEP_SECONDS * 1e3:.0f} ms after {WARMUP} warm-up steps")
    common.print_table(["variant", "mean wait ms", "median ms", "max ms"], rows, {1, 2, 3})
    ratio = statistics.mean(two_stage) / statistics.mean(plain)
    floor_ratio = statistics.mean(floor) / statistics.mean(plain)
    result = "PASS" if ratio <= TARGET else "SHORT"
    print(f"\ntwo-stage wait / plain wait = {ratio:.3f} (target <= {TARGET}) {result}")
    print(f"floor wait / plain wait     = {floor_ratio:.3f} (best any thread prefetcher does here)")
    print(
        f"two-stage wait / floor wait = {statistics.mean(two_stage) / statistics.mean(floor):.2f}"
    )
    common.write_json(
        args.json,
        {
            "benchmark": "device",
            "environment": common.environment(),
            "plain_wait_ms": [w * 1e3 for w in plain],
            "two_stage_wait_ms": [w * 1e3 for w in two_stage],
            "floor_wait_ms": [w * 1e3 for w in floor],
            "floor_ratio": floor_ratio,
            "ratio": ratio,
            "target": TARGET,
            "result": result,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
