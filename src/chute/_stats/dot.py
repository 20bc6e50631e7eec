"""A pipeline as Graphviz DOT: one box per stage, an edge from each parent to its child.

Sources are at the top and the dataset itself at the bottom (``rankdir=TB``),
each box filled by its share of the time (see ``figures.heat_colour``). Render
with ``dot -Tsvg pipeline.dot -o pipeline.svg``.
"""

from __future__ import annotations

from collections.abc import Sequence

from chute._stats.figures import Stage, figures_line, heat_colour

__all__ = ["dot_string", "to_dot"]


def dot_string(text: str) -> str:
    r"""``text`` as a double-quoted DOT string, its backslashes, quotes and line breaks escaped.

    Args:
      text: any text; each line break becomes a centred line break of the label.

    >>> print(dot_string('map(say "hi")\nback\\slash'))
    "map(say \"hi\")\nback\\slash"
    """
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return f'"{escaped}"'


def _label(stage: Stage) -> str:
    lines = [stage.name, stage.kind]
    if stage.spec and stage.spec != "?":
        lines.append(stage.spec)
    figures = figures_line(stage)
    if figures:
        lines.append(figures)
    return "\n".join(lines)


def to_dot(stages: Sequence[Stage], *, title: str = "pipeline") -> str:
    """The stages as a Graphviz ``digraph``.

    Args:
      stages: the stages in pipeline order, each naming its parents by index.
      title: the graph's label, drawn above it.

    >>> from chute._stats.graph import StageNode
    >>> print(to_dot([StageNode(0, "range", "RangeMapDataset", ()),
    ...               StageNode(1, "map(f)", "MapMapDataset", (0,))]))
    digraph pipeline {
      label="pipeline";
      labelloc=t;
      rankdir=TB;
      node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];
      s0 [label="range\\nRangeMapDataset", fillcolor="#d9d9d9"];
      s1 [label="map(f)\\nMapMapDataset", fillcolor="#d9d9d9"];
      s0 -> s1;
    }
    """
    lines = [
        "digraph pipeline {",
        f"  label={dot_string(title)};",
        "  labelloc=t;",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
    ]
    for stage in stages:
        lines.append(
            f"  s{stage.index} [label={dot_string(_label(stage))}, "
            f'fillcolor="{heat_colour(stage)}"];'
        )
    for stage in stages:
        lines.extend(f"  s{parent} -> s{stage.index};" for parent in stage.parents)
    lines.append("}")
    return "\n".join(lines)
