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
two-stage wait is at most 10% of the plain wait.  Run through
``bash benchmarks/run device``.
"""

# bench-requires: jax[cpu]

from __future__ import annotations

import statistics
import sys
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
    plain_it = iter(pipeline(chute, source))
    plain = waits(plain_it, lambda b: jax.device_put(b, device), jax)
    plain_it.close()
    staged = chute.experimental.device_put(
        pipeline(chute, source), device, cpu_buffer_size=4, device_buffer_size=2
    )
    staged_it = iter(staged)
    two_stage = waits(staged_it, lambda b: b, jax)
    staged_it.close()
    rows = []
    for name, values in (("plain jax.device_put", plain), ("two-stage device_put", two_stage)):
        rows.append(
            [
                name,
                f"{statistics.mean(values) * 1e3:.3f}",
                f"{statistics.median(values) * 1e3:.3f}",
                f"{max(values) * 1e3:.3f}",
            ]
        )
    print(f"\n  {STEPS} steps of {STEP_SECONDS * 1e3:.0f} ms after {WARMUP} warm-up steps")
    common.print_table(["variant", "mean wait ms", "median ms", "max ms"], rows, {1, 2, 3})
    ratio = statistics.mean(two_stage) / statistics.mean(plain)
    result = "PASS" if ratio <= TARGET else "SHORT"
    print(f"\ntwo-stage wait / plain wait = {ratio:.3f} (target <= {TARGET}) {result}")
    common.write_json(
        args.json,
        {
            "benchmark": "device",
            "environment": common.environment(),
            "plain_wait_ms": [w * 1e3 for w in plain],
            "two_stage_wait_ms": [w * 1e3 for w in two_stage],
            "ratio": ratio,
            "target": TARGET,
            "result": result,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
