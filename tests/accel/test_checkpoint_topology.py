"""chute.checkpoint with virtual shards: hosts save files of their own; any host count loads.

Every host is a separate Python process (a script run with ``subprocess``), as
the hosts of a training job are: each builds the pipeline for its
``ShardOptions(host, hosts)``, saves with ``chute.checkpoint.save`` (or the
Orbax handler) into one directory, and the hosts of another topology load
from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import chute
from chute import checkpoint
from chute._core.errors import CheckpointError

_SCRIPT = textwrap.dedent(
    """
    import json, pathlib, sys
    import chute
    from chute import checkpoint
    from chute.experimental import virtual_shards

    def shard(opts):
        mine = chute.MapDataset.range(240)[opts.shard_index :: opts.shard_count]
        ds = mine.shuffle(seed=3).to_iter_dataset().filter(lambda x: x % 5 != 0)
        return ds.map(lambda x: x * 10).batch(3)

    def main(directory, host, hosts, workers, steps, mode):
        ds = virtual_shards(shard, 8, shard_options=chute.ShardOptions(host, hosts))
        ds = ds.mp_prefetch(chute.MultiprocessingOptions(num_workers=workers))
        out = []
        with iter(ds) as it:
            if mode == "load":
                checkpoint.load(it, directory)
            elif mode == "orbax-load":
                checkpoint.CheckpointHandler().restore(pathlib.Path(directory), item=it)
            for element in it:
                out.append([list(it.last_origin), element.tolist()])
                if len(out) == steps:
                    break
            if mode == "save":
                checkpoint.save(it, directory)
            elif mode == "orbax-save":
                checkpoint.CheckpointHandler().save(pathlib.Path(directory), item=it)
        print(json.dumps(out))

    main(sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6])
    """
)


def _hosts(
    script: Path, directory: Path, hosts: int, workers: int, steps: int, mode: str
) -> list[list[Any]]:
    """Runs ``hosts`` host processes at once; each one's ``[origin, batch]`` pairs."""
    running = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(directory),
                str(h),
                str(hosts),
                str(workers),
                str(steps),
                mode,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in range(hosts)
    ]
    outputs = []
    for h, process in enumerate(running):
        out, err = process.communicate(timeout=100)
        assert process.returncode == 0, f"host {h} of {hosts} failed:\n{err}"
        outputs.append(json.loads(out))
    return outputs


def _in_global_order(outputs: list[list[Any]]) -> list[Any]:
    pairs = [pair for host in outputs for pair in host]
    pairs.sort(key=lambda pair: (pair[0][1], pair[0][0]))  # (n, shard)
    return [batch for _, batch in pairs]


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hosts") / "host.py"
    path.write_text(_SCRIPT)
    return path


@pytest.fixture(scope="module")
def whole(script: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The uninterrupted run: one host, no workers."""
    directory = tmp_path_factory.mktemp("whole")
    return _in_global_order(_hosts(script, directory, 1, 0, 10**6, "run"))


@pytest.mark.parametrize(("hosts", "workers"), [(4, 1), (1, 3)])
@pytest.mark.parametrize("kind", ["", "orbax-"])
def test_two_hosts_save_and_another_topology_loads_the_rest(
    script: Path, whole: list[Any], tmp_path: Path, hosts: int, workers: int, kind: str
) -> None:
    before = _in_global_order(_hosts(script, tmp_path, 2, 2, 5, f"{kind}save"))
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [
        "process_0-of-2.json",
        "process_1-of-2.json",
    ]
    after = _hosts(script, tmp_path, hosts, workers, 10**6, f"{kind}load")
    assert before == whole[:10]
    assert _in_global_order(after) == whole[10:]


def _shard(opts: chute.ShardOptions) -> chute.IterDataset[Any]:
    return chute.MapDataset.range(40)[opts.shard_index :: opts.shard_count].to_iter_dataset()


def test_a_directory_with_two_runs_files_is_refused(tmp_path: Path) -> None:
    from chute.experimental import virtual_shards

    for hosts in (1, 2):
        it = iter(virtual_shards(_shard, 4, shard_options=chute.ShardOptions(0, hosts)))
        next(it)
        checkpoint.save(it, tmp_path)
    fresh = iter(virtual_shards(_shard, 4))
    with pytest.raises(CheckpointError, match="2 different runs"):
        checkpoint.load(fresh, tmp_path)
    assert next(fresh) == 0  # nothing moved


def test_one_host_of_two_alone_is_refused_with_what_to_do(tmp_path: Path) -> None:
    from chute.experimental import virtual_shards

    it = iter(virtual_shards(_shard, 4, shard_options=chute.ShardOptions(1, 2)))
    next(it)
    state = it.get_state()
    fresh = iter(virtual_shards(_shard, 4))
    with pytest.raises(CheckpointError, match="merge_states"):
        fresh.set_state(state)
    assert next(fresh) == 0
