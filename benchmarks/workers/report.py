"""The tables of ``bench_workers``: one row an implementation, and the first-batch trials.

The ratio table, totals and problems come after them, from ``common.finish``.
"""

from __future__ import annotations

import statistics
from typing import Any

import common
from workers.harness import BATCH
from workers.processes import shutdown_summary


def mib(x: float | None) -> str:
    return common.fmt_num(x, 0)


def parent_peak_cell(mem: dict[str, Any]) -> str:
    """The parent's peak, and in parentheses how far above its RSS before the run."""
    peak, before = mem.get("parent_peak_mib"), mem.get("parent_rss_before_mib")
    if peak is None:
        return "-"
    return mib(peak) + (f" (+{peak - before:,.0f})" if before is not None else "")


def impl_row(res: dict[str, Any], impl: Any) -> list[str]:
    """One row of the main table: ``impl`` of the workload ``res``."""
    mem = res.get("memory", {}).get(impl.name, {})
    rate, fb, element_bytes = impl.rate(), impl.first_batch, res.get("bytes_per_element")
    mb = rate * element_bytes / 1e6 if rate and element_bytes else None
    return [
        res["name"],
        impl.name,
        "ERROR" if impl.error else common.fmt_num(rate),
        common.fmt_num(rate / BATCH if rate else None, 1),
        common.fmt_num(mb),
        common.fmt_num(impl.median, 3),
        f"{impl.spread() * 100:.0f}%" if impl.spread() is not None else "-",
        common.fmt_num(statistics.median(fb) * 1e3 if fb else None, 1),
        parent_peak_cell(mem),
        ", ".join(mib(x) for x in mem.get("worker_peaks_mib", [])) or "-",
        impl.check.split(":")[0],
    ]


def shutdown_note(res: dict[str, Any], impl: Any) -> str | None:
    """How ``impl``'s workers went after its closes, and the /dev/shm entries it made."""
    logs, mem = res.get("shutdown", {}), res.get("memory", {}).get(impl.name, {})
    if impl.name not in logs:
        return None
    shm = mem.get("new_shm_segments_seen")
    return f"{res['name']} {impl.name}: {shutdown_summary(logs[impl.name])}" + (
        f"; {shm} new /dev/shm entries during the memory run" if mem else ""
    )


def print_first_batch(res: dict[str, Any]) -> None:
    rows = [
        [
            "first_batch",
            impl.name,
            common.fmt_num(impl.median * 1e3 if impl.median else None, 0),
            ", ".join(f"{t * 1e3:.0f}" for t in impl.times) or "-",
            "ERROR" if impl.error else impl.check.split(":")[0],
        ]
        for impl in res["impls"]
    ]
    common.print_table(
        ["bench", "impl + parent", "1st batch ms (fresh process)", "trials ms", "output"],
        rows,
        right={2, 3},
    )


def print_results(results: list[dict[str, Any]]) -> None:
    """The main table, the first-batch table, the shutdown notes and what the columns mean."""
    timed = [res for res in results if res["name"] != "first_batch"]
    rows = [impl_row(res, impl) for res in timed for impl in res["impls"]]
    notes = [note for res in timed for impl in res["impls"] if (note := shutdown_note(res, impl))]
    print()
    common.print_table(
        [
            "bench",
            "impl",
            "elements/s",
            "batches/s",
            "MB/s",
            "run s",
            "spread",
            "1st batch ms (warm)",
            "parent peak MiB (+run)",
            "worker peaks MiB",
            "output",
        ],
        rows,
        right={2, 3, 4, 5, 6, 7, 8, 9},
    )
    for res in results:
        if res["name"] == "first_batch":
            print()
            print_first_batch(res)
    print("\nworker shutdown after close() (all runs) and shared memory:")
    for line in notes:
        print(f"  {line}")
    print(
        "\nparent peak: VmHWM of the parent process during one extra untimed run that touches "
        "every batch (reset before it; in parentheses: above its RSS before the run; arrayrecord "
        "torch and limit: the clean parent's); worker peaks: VmHWM of each worker process "
        "(chute's workers count pages shared with chute's fork server, PyTorch's and the limit's "
        "forked processes those shared with the process they were forked from)"
    )
