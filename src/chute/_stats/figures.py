"""What the pictures of a pipeline say about each stage: its figures and its colour.

A stage is a ``StageNode`` (the bare graph: name, kind, spec) or a
``StageStats`` (the same, with the figures an ``ExecutionSummary`` measured).
The text, DOT and SVG pictures all take their words and colours from here, so
they agree with one another.
"""

from __future__ import annotations

import colorsys
import math

from chute._stats.graph import StageNode
from chute._stats.summary import StageStats

__all__ = [
    "GREY",
    "Stage",
    "figures",
    "figures_line",
    "heat_colour",
    "per_element",
    "share_colour",
    "share_of",
]

#: A stage of either kind: with figures (``StageStats``) or without (``StageNode``).
Stage = StageNode | StageStats

#: The fill of a stage without figures.
GREY = "#d9d9d9"

_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def share_of(stage: Stage) -> float | None:
    """The stage's share of all self time, clamped to 0..1; None without figures."""
    if not isinstance(stage, StageStats):
        return None
    share = float(stage.share)
    return 0.0 if math.isnan(share) else min(max(share, 0.0), 1.0)


def per_element(seconds: float) -> str:
    """A time with a unit that keeps three significant digits.

    Args:
      seconds: the time in seconds.

    >>> per_element(0.00123), per_element(2.5), per_element(0.0)
    ('1.23 ms', '2.5 s', '0 s')
    """
    if not seconds or not math.isfinite(seconds):
        return f"{seconds:g} s"
    scale, unit = next(((s, u) for s, u in _UNITS if abs(seconds) >= s), _UNITS[-1])
    value = seconds / scale
    return f"{value:.3g} {unit}" if abs(value) < 1000 else f"{value:.0f} {unit}"


def figures(stage: Stage) -> list[str]:
    """``['41.2%', '1,000 el', '1.23 ms/el', 'main']``, or ``[]`` for a stage without figures.

    Args:
      stage: a ``StageNode`` or ``StageStats``.
    """
    share = share_of(stage)
    if share is None or not isinstance(stage, StageStats):
        return []
    return [
        f"{share:.1%}",
        f"{stage.elements:,} el",
        f"{per_element(stage.mean_seconds)}/el",
        stage.where,
    ]


def figures_line(stage: Stage) -> str:
    """The figures on one line, ``'41.2% · 1,000 el · 1.23 ms/el · main'``, or ``''``.

    Args:
      stage: a ``StageNode`` or ``StageStats``.
    """
    return " · ".join(figures(stage))


def heat_colour(stage: Stage) -> str:
    """The stage's fill: blue for share 0 through to red for share 1, grey without figures.

    The colour follows the absolute share, not the share relative to the
    hottest stage, so a pipeline whose time is spread evenly looks evenly cool.

    Args:
      stage: a ``StageNode`` or ``StageStats``.

    >>> from chute._stats.graph import StageNode
    >>> heat_colour(StageNode(0, "range", "RangeMapDataset", ()))
    '#d9d9d9'
    """
    return share_colour(share_of(stage))


def share_colour(share: float | None) -> str:
    """The fill for a share of the time (0 to 1): blue, through green and yellow, to red.

    Args:
      share: the share, already clamped to 0..1; None for grey.

    >>> share_colour(0.0), share_colour(1.0), share_colour(None)
    ('#7ba3f4', '#f47b7b', '#d9d9d9')
    """
    if share is None:
        return GREY
    hue = (1.0 - share) * 220.0 / 360.0  # 220°: blue; 0°: red
    red, green, blue = colorsys.hls_to_rgb(hue, 0.72, 0.85)
    return "#{:02x}{:02x}{:02x}".format(*(round(c * 255) for c in (red, green, blue)))
