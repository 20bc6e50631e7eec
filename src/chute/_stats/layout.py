"""Where each stage sits in the drawing: layers from the sources down, with lanes for long edges.

A stage's layer is one more than the deepest of its parents' (sources are
layer 0). An edge that skips layers passes through a narrow empty *lane* in
each layer between, so it never runs behind another stage's box. Within a
layer, stages and lanes are ordered by the mean position of what feeds them,
which keeps branches apart and edges short.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from chute._stats.graph import StageNode
from chute._stats.summary import StageStats

__all__ = ["Key", "Layout", "lay_out"]

#: A stage (its index), or a lane: (child, which parent of it, layer).
Key = int | tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The result of ``lay_out``.

    Args:
      x: the horizontal centre of every stage and lane.
      layer: the layer of every stage and lane (0: the top row).
      lanes: for the edge into stage ``c`` from its ``n``-th parent, the lanes it passes through.
      width: the width of the widest layer.
      layers: how many layers there are.
    """

    x: dict[Key, float]
    layer: dict[Key, int]
    lanes: dict[tuple[int, int], list[Key]]
    width: float
    layers: int


def _feeders(
    stages: Sequence[StageNode | StageStats], layer: dict[Key, int]
) -> tuple[dict[Key, list[Key]], dict[tuple[int, int], list[Key]]]:
    """What feeds each stage or lane (a parent, or the lane just above), and each edge's lanes."""
    feeders: dict[Key, list[Key]] = {}
    lanes: dict[tuple[int, int], list[Key]] = {}
    for stage in stages:
        feeders[stage.index] = []
        for n, parent in enumerate(stage.parents):
            above: Key = parent
            lanes[(stage.index, n)] = []
            for row in range(layer[parent] + 1, layer[stage.index]):
                lane = (stage.index, n, row)
                layer[lane], feeders[lane] = row, [above]
                lanes[(stage.index, n)].append(lane)
                above = lane
            feeders[stage.index].append(above)
    return feeders, lanes


def lay_out(
    stages: Sequence[StageNode | StageStats], *, box: float, lane: float, gap: float
) -> Layout:
    """Places the stages (each ``box`` wide) and lanes (``lane`` wide), ``gap`` apart.

    Args:
      stages: the stages in pipeline order, each naming earlier stages as parents.
      box: the width of a stage's box.
      lane: the width of a lane.
      gap: the space between neighbours in a layer.

    >>> from chute._stats.graph import StageNode
    >>> nodes = [StageNode(0, "a", "A", ()), StageNode(1, "b", "B", (0,)),
    ...          StageNode(2, "c", "C", (0, 1))]
    >>> layout = lay_out(nodes, box=100, lane=10, gap=20)
    >>> layout.layers, layout.lanes[(2, 0)], layout.width
    (3, [(2, 0, 1)], 130.0)
    """
    layer: dict[Key, int] = {}
    for stage in stages:
        layer[stage.index] = 1 + max((layer[p] for p in stage.parents), default=-1)
    feeders, lanes = _feeders(stages, layer)
    layers = max(layer.values(), default=-1) + 1
    x: dict[Key, float] = {}
    width = 0.0
    for row in range(layers):
        members = [key for key in layer if layer[key] == row]

        def order(key: Key) -> tuple[float, int, int]:
            fed = feeders[key]
            centre = sum(x[f] for f in fed) / len(fed) if fed else 0.0
            stage, n = (key, -1) if isinstance(key, int) else key[:2]
            return centre, stage, n

        members.sort(key=order)
        widths = [box if isinstance(key, int) else lane for key in members]
        total = float(sum(widths) + gap * (len(members) - 1))
        width = max(width, total)
        left = -total / 2
        for key, span in zip(members, widths):
            x[key] = left + span / 2
            left += span + gap
    return Layout(
        x={key: centre + width / 2 for key, centre in x.items()},
        layer=layer,
        lanes=lanes,
        width=width,
        layers=layers,
    )
