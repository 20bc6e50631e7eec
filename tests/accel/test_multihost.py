"""Multi-host: two real JAX processes shard, checkpoint, restore and build global batches.

The test starts two JAX processes (``jax.distributed`` on the CPU backend, one
device each) that each read their ``ShardByJaxProcess`` shard through a
``DataLoader``, take a few batches and save their iterator state; a second
pair restores from those states and reads the rest.  Together they must read
every record exactly once.  This file is also the script the processes run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chute
from chute._accel.multihost import make_global_batch

NUM_RECORDS = 30
BATCH = 4
FIRST_BATCHES = 2
CANNOT_START = 77  # a child's exit status when jax.distributed does not start


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return int(sock.getsockname()[1])


def _loader(where: str) -> chute.DataLoader:
    """The loader, sharded by JAX process in the sampler or in the DataLoader."""
    in_sampler = where == "sampler"
    sampler = chute.IndexSampler(
        num_records=NUM_RECORDS,
        shard_options=chute.ShardByJaxProcess() if in_sampler else chute.NoSharding(),
        shuffle=True,
        seed=0,
        num_epochs=1,
    )
    return chute.DataLoader(
        data_source=list(range(NUM_RECORDS)),
        sampler=sampler,
        operations=[chute.Batch(BATCH)],
        shard_options=None if in_sampler else chute.ShardByJaxProcess(),
    )


def _check_global_batch(jax: Any, batch: np.ndarray) -> list[int]:
    """Builds a global batch over one device per process; returns its global shape."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    out = make_global_batch({"x": batch, "y": batch[:, None] * 2}, sharding)
    local = [np.asarray(s.data) for s in out["x"].addressable_shards]
    assert len(local) == 1 and local[0].tolist() == batch.tolist()
    assert out["y"].shape == (out["x"].shape[0], 1)
    return list(out["x"].shape)


def _child(process_id: int, port: int, phase: str, workdir: Path, where: str) -> None:
    """One JAX process: reads its shard (phase 'first' or 'rest') and writes what it saw."""
    import jax

    try:
        jax.distributed.initialize(
            coordinator_address=f"localhost:{port}",
            num_processes=2,
            process_id=process_id,
            initialization_timeout=20,
        )
    except Exception as exc:
        print(f"jax.distributed.initialize failed: {type(exc).__name__}: {exc}")
        sys.exit(CANNOT_START)
    shard = chute.ShardByJaxProcess()
    it = iter(_loader(where))
    state_file = workdir / f"state_{process_id}.json"
    if phase == "first":
        batches = [np.asarray(next(it)) for _ in range(FIRST_BATCHES)]
        state_file.write_bytes(it.get_state())
    else:
        it.set_state(state_file.read_bytes())
        batches = [np.asarray(b) for b in it]
    report = {
        "shard": [shard.shard_index, shard.shard_count],
        "process": [jax.process_index(), jax.process_count()],
        "elements": [int(x) for b in batches for x in b],
        "global_shape": _check_global_batch(jax, batches[0]),
    }
    (workdir / f"{phase}_{process_id}.json").write_text(json.dumps(report))
    jax.distributed.shutdown()


def _run_pair(phase: str, workdir: Path, where: str) -> list[dict[str, Any]]:
    """Runs both processes of one phase; skips the test if jax.distributed cannot start."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    port = str(_free_port())
    argv = [sys.executable, "-W", "error", __file__, port, phase, str(workdir), where]
    procs = [
        subprocess.Popen(
            [*argv, str(i)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for i in range(2)
    ]
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=60)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.skip("jax.distributed processes did not finish within 60 s on this machine")
    if any(p.returncode == CANNOT_START for p in procs):
        pytest.skip(f"jax.distributed cannot start here: {' | '.join(outputs).strip()[-500:]}")
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out
    return [json.loads((workdir / f"{phase}_{i}.json").read_text()) for i in range(2)]


@pytest.mark.parametrize(
    "where",
    ["sampler", "loader"],
    ids=["in_sampler", "in_loader"],
)
def test_two_processes_shard_checkpoint_and_restore(tmp_path: Path, where: str) -> None:
    first = _run_pair("first", tmp_path, where)
    rest = _run_pair("rest", tmp_path, where)
    for i, (a, b) in enumerate(zip(first, rest)):
        assert a["shard"] == b["shard"] == [i, 2]
        assert a["process"] == b["process"] == [i, 2]
        assert len(a["elements"]) == FIRST_BATCHES * BATCH
        assert a["global_shape"] == b["global_shape"] == [2 * BATCH]
    seen = [x for report in first + rest for x in report["elements"]]
    assert sorted(seen) == list(range(NUM_RECORDS))
    if where == "sampler":  # each process reads only its own contiguous half
        half = NUM_RECORDS // 2
        assert sorted(first[0]["elements"] + rest[0]["elements"]) == list(range(half))


def test_make_global_batch_single_process_shapes_and_errors() -> None:
    jax = pytest.importorskip("jax")
    devices = np.array(jax.devices()[:2])
    mesh = jax.sharding.Mesh(devices, ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    out = make_global_batch({"a": np.arange(4), "b": [np.ones((4, 3))]}, sharding)
    assert out["a"].shape == (4,) and out["b"][0].shape == (4, 3)
    assert np.asarray(out["a"]).tolist() == [0, 1, 2, 3]
    if len(devices) == 2:
        with pytest.raises(ValueError, match=r"\['a'\].*leading dimension 3"):
            make_global_batch({"a": np.arange(3)}, sharding)
    with pytest.raises(ValueError, match="scalar"):
        make_global_batch({"a": np.int64(3)}, sharding)
    with pytest.raises(TypeError, match="jax.sharding.Sharding"):
        make_global_batch(np.arange(4), jax.devices()[0])


if __name__ == "__main__":
    _port, _phase, _workdir, _where, _process_id = sys.argv[1:6]
    _child(int(_process_id), int(_port), _phase, Path(_workdir), _where)
