"""Head against base: the same benchmarks run on two commits of chute, interleaved.

A change that must not cost speed (a refactor, say) is measured here: each named
benchmark runs on the base commit's chute and on this tree's chute in turn, in
fresh processes, with the order swapped every round, so the machine's drift falls
on both sides. The base commit is checked out into a temporary git worktree (its
compiled extensions are copied from this tree); every run imports chute through
``PYTHONPATH=<tree>/src`` and is checked to have imported it from there. The
benchmark scripts themselves are this tree's, so both sides run the same harness.

Printed: for every workload and implementation, the median rate on base and head
and head / base (the median of the rounds' ratios). The peers' rows (Grain,
PyTorch, bare limits) do not depend on chute: their head / base shows how far the
machine drifted between the paired runs, the noise to read chute's rows against.

Run with the benchmark environment (``bash benchmarks/run core`` creates it):

    .bench-venv/bin/python benchmarks/ab.py --base ffb072d --rounds 1 loader workers ray
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _base_tree(ref: str, where: Path) -> Path:
    """Checks ``ref`` out into ``where`` and gives it this tree's compiled extensions."""
    _git("worktree", "add", "--detach", "-f", str(where), ref)
    for built in (ROOT / "src").rglob("*.so"):
        target = where / built.relative_to(ROOT)
        if target.parent.is_dir() and not target.exists():
            shutil.copy2(built, target)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(where / "src")], check=True)
    return where


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONHASHSEED": "0"}


def _check_import(tree: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import chute; print(chute.__file__)"],
        env=_env(tree),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not out.startswith(str(tree / "src")):
        raise SystemExit(f"ab: chute imported from {out}, not from {tree}/src")


def _run(bench: str, tree: Path, out: Path) -> dict[str, Any]:
    _check_import(tree)
    print(f"[ab] {bench} on {tree}", flush=True)
    script = HERE / f"bench_{bench}.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--json", str(out)], cwd=ROOT, env=_env(tree)
    )
    if proc.returncode != 0 and not out.exists():
        raise SystemExit(f"ab: {bench} failed on {tree} (exit {proc.returncode})")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _rates(data: dict[str, Any]) -> dict[tuple[str, str], float]:
    rates = {}
    for result in data["results"]:
        for impl, figures in result["impls"].items():
            if figures.get("rate_median"):
                rates[(result["name"], impl)] = figures["rate_median"]
    return rates


def compare(bench: str, rounds: int, base: Path, head: Path, scratch: Path) -> None:
    runs: dict[str, list[dict[tuple[str, str], float]]] = {"base": [], "head": []}
    for r in range(rounds):
        order = [("base", base), ("head", head)]
        if r % 2:
            order.reverse()
        for code, tree in order:
            data = _run(bench, tree, scratch / f"{bench}-{code}-{r}.json")
            runs[code].append(_rates(data))
    keys = sorted(set.intersection(*(set(x) for x in runs["base"] + runs["head"])))
    print(f"\n[ab] {bench}: head / base, {rounds} round(s), order swapped every round")
    header = f"{'workload':<28} {'implementation':<34} {'base':>12} {'head':>12} {'head/base':>9}"
    print(header)
    print("-" * len(header))
    for key in keys:
        b = [x[key] for x in runs["base"]]
        h = [x[key] for x in runs["head"]]
        ratio = statistics.median(hh / bb for hh, bb in zip(h, b))
        print(
            f"{key[0]:<28} {key[1]:<34} {statistics.median(b):>12,.0f} "
            f"{statistics.median(h):>12,.0f} {ratio:>8.2f}x"
        )
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmarks", nargs="+", help="names, as for benchmarks/run")
    parser.add_argument("--base", required=True, help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=1, help="base/head pairs per benchmark")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chute-ab-") as tmp:
        scratch = Path(tmp)
        base = _base_tree(args.base, scratch / "base")
        try:
            print(
                f"[ab] base {args.base} ({_git('rev-parse', '--short', args.base)}), head this tree"
            )
            for bench in args.benchmarks:
                compare(bench, args.rounds, base, ROOT, scratch)
        finally:
            _git("worktree", "remove", "--force", str(base))


if __name__ == "__main__":
    main()
