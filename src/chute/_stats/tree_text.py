"""A pipeline as text: a call tree, the dataset on top and its parents indented below it.

One line per stage, in columns: the tree and the stage's name, its kind, its
figures when it has them (share of the time, elements, mean time per
element, where it ran) and its element spec where known. A stage that two
others read from is written out once; the second time, one line says
``(shown above)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from chute._stats.figures import Stage, figures
from chute._stats.summary import StageStats

__all__ = ["tree_text"]


def _cells(stage: Stage, label: str, measured: bool) -> tuple[str, ...]:
    spec = "" if stage.spec == "?" else stage.spec
    if not measured:
        return (label, stage.kind, spec)
    return (label, stage.kind, *(figures(stage) or ["", "", "", ""]), spec)


def _rows(stages: Sequence[Stage]) -> list[tuple[str, ...]]:
    """The cells of each line, walking the tree without recursion."""
    measured = any(isinstance(stage, StageStats) for stage in stages)
    read = {parent for stage in stages for parent in stage.parents}
    roots = [stage.index for stage in reversed(stages) if stage.index not in read]
    stack = [(index, "", "") for index in reversed(roots)]
    rows: list[tuple[str, ...]] = []
    seen: set[int] = set()
    while stack:
        index, lead, branch = stack.pop()
        stage = stages[index]
        if index in seen:
            blank = len(_cells(stage, "", measured)) - 1
            rows.append((f"{lead}{branch}{stage.name} (shown above)",) + ("",) * blank)
            continue
        seen.add(index)
        rows.append(_cells(stage, lead + branch + stage.name, measured))
        below = "" if not branch else lead + ("   " if branch == "└─ " else "│  ")
        last = len(stage.parents) - 1
        for n in range(last, -1, -1):
            stack.append((stage.parents[n], below, "└─ " if n == last else "├─ "))
    return rows


def tree_text(stages: Sequence[Stage]) -> str:
    """The stages as an aligned call tree, the last stage (the dataset) first.

    Args:
      stages: the stages in pipeline order, each naming earlier stages as parents.

    >>> from chute._stats.graph import StageNode
    >>> print(tree_text([StageNode(0, "range", "RangeMapDataset", ()),
    ...                  StageNode(1, "map(f)", "MapMapDataset", (0,))]))
    map(f)    MapMapDataset
    └─ range  RangeMapDataset
    """
    rows = _rows(stages)
    if not rows:
        return "(no stages)"
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)
