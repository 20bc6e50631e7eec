"""A pipeline as an SVG drawing laid out here (no Graphviz), and as a self-contained HTML page.

Stages sit in layers, sources at the top (see ``layout``). Each box shows the
stage's name, kind and figures, filled by its share of the time; hovering
shows its full name and its element spec.  A line longer than its box is cut
with an ellipsis, and every line carries its width (``textLength``) so that
a viewer without the monospace fonts named here still draws it inside the box.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Sequence

from chute._stats.figures import Stage, figures_line, heat_colour, share_colour
from chute._stats.layout import Key, lay_out

__all__ = ["to_html", "to_svg"]

_CHAR = 7.2  # the width of one character of 12px monospace text
_LINE, _PAD, _GAP_X, _GAP_Y, _MARGIN, _LANE = 16, 8, 24, 40, 16, 8
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_FONT = "ui-monospace, Menlo, Consolas, monospace"


def _xml(text: str) -> str:
    """``text`` escaped for XML and HTML, with characters XML forbids replaced by '?'."""
    return html.escape(_CONTROL.sub("?", text), quote=True)


def _cells(text: str) -> int:
    """The character cells ``text`` takes in a monospace font (wide East Asian ones: two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _clip(text: str, cells: int) -> str:
    """``text`` cut to ``cells`` cells, the last of them an ellipsis where it was cut.

    >>> _clip("map(decode_and_augment)", 12), _clip("map(f)", 12)
    ('map(decode_…', 'map(f)')
    """
    if _cells(text) <= cells:
        return text
    kept, used = [], 1  # the ellipsis
    for c in text:
        used += _cells(c)
        if used > cells:
            break
        kept.append(c)
    return "".join(kept) + "…"


def _box_lines(stage: Stage) -> list[str]:
    return [line for line in (stage.name, stage.kind, figures_line(stage)) if line]


def _edge(points: list[tuple[float, float]]) -> str:
    """A path down through ``points``: a curve between layers, a straight line along a lane."""
    (x, y), rest = points[0], points[1:]
    d = [f"M{x:.1f},{y:.1f}"]
    for n, (x2, y2) in enumerate(rest):
        if n % 2:  # along a lane
            d.append(f"L{x2:.1f},{y2:.1f}")
        else:
            bend = (y2 - y) / 2
            d.append(f"C{x:.1f},{y + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}")
        x, y = x2, y2
    return (
        f'<path class="edge" d="{" ".join(d)}" fill="none" stroke="#555" stroke-width="1.2" '
        'marker-end="url(#arrow)"/>'
    )


def _box(stage: Stage, x: float, y: float, width: float, height: float) -> str:
    """The stage's group: a tooltip with its spec, a filled box, and its lines of text."""
    tip = "\n".join([stage.name, stage.kind, f"spec: {stage.spec}", figures_line(stage)])
    chars = int((width - 2 * _PAD) / _CHAR)
    bold = ' font-weight="bold"'
    texts = []
    for n, line in enumerate(_box_lines(stage)):
        shown = _clip(line, chars)
        texts.append(
            f'<text x="{x + _PAD:.1f}" y="{y + _PAD + (n + 0.8) * _LINE:.1f}"'
            f'{bold if n == 0 else ""} textLength="{_cells(shown) * _CHAR:.1f}" '
            f'lengthAdjust="spacingAndGlyphs">{_xml(shown)}</text>'
        )
    return (
        f'<g class="stage" id="stage-{stage.index}"><title>{_xml(tip.strip())}</title>'
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height}" rx="6" '
        f'fill="{heat_colour(stage)}" stroke="#444"/>{"".join(texts)}</g>'
    )


def _header(width: float, height: float) -> str:
    stops = "".join(
        f'<stop offset="{s:.2f}" stop-color="{share_colour(s)}"/>' for s in (0, 0.25, 0.5, 0.75, 1)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{_FONT}" font-size="12" '
        'role="img" aria-label="pipeline">\n'
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" '
        'markerHeight="8" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker>'
        f'<linearGradient id="heat">{stops}</linearGradient></defs>'
    )


def _legend(y: float) -> str:
    return (
        f'<text x="{_MARGIN}" y="{y + 12:.0f}">share of time: 0%</text>'
        f'<rect x="{_MARGIN + 140}" y="{y:.0f}" width="120" height="14" fill="url(#heat)" '
        f'stroke="#444"/><text x="{_MARGIN + 268}" y="{y + 12:.0f}">100%</text>'
    )


def to_svg(stages: Sequence[Stage]) -> str:
    """The stages drawn as an SVG document, sources at the top.

    Args:
      stages: the stages in pipeline order, each naming earlier stages as parents.

    >>> import xml.etree.ElementTree as ET
    >>> from chute._stats.graph import StageNode
    >>> svg = to_svg([StageNode(0, "range", "RangeMapDataset", ()),
    ...               StageNode(1, "map(f)", "MapMapDataset", (0,))])
    >>> len(ET.fromstring(svg).findall("{http://www.w3.org/2000/svg}g"))
    2
    """
    widest = max((_cells(line) for s in stages for line in _box_lines(s)), default=10)
    box_w = min(max(widest * _CHAR + 2 * _PAD, 140.0), 380.0)
    box_h = max((len(_box_lines(s)) for s in stages), default=1) * _LINE + 2 * _PAD
    layout = lay_out(stages, box=box_w, lane=_LANE, gap=_GAP_X)
    figures = any(figures_line(s) for s in stages)
    width = max(layout.width + 2 * _MARGIN, 330.0 if figures else 0.0)
    shift = (width - layout.width) / 2
    height = 2 * _MARGIN + layout.layers * (box_h + _GAP_Y) - _GAP_Y

    def top(key: Key) -> float:
        return _MARGIN + layout.layer[key] * (box_h + _GAP_Y)

    out = [_header(width, height + (28 if figures else 0))]
    for stage in stages:
        spread = min(16.0, box_w / (len(stage.parents) + 1))
        for n, parent in enumerate(stage.parents):
            points = [(shift + layout.x[parent], top(parent) + box_h)]
            for lane in layout.lanes[(stage.index, n)]:
                points += [(shift + layout.x[lane], top(lane))]
                points += [(shift + layout.x[lane], top(lane) + box_h)]
            offset = (n - (len(stage.parents) - 1) / 2) * spread
            points.append((shift + layout.x[stage.index] + offset, top(stage.index)))
            out.append(_edge(points))
    for stage in stages:
        left = shift + layout.x[stage.index] - box_w / 2
        out.append(_box(stage, left, top(stage.index), box_w, box_h))
    if figures:
        out.append(_legend(height + 4))
    out.append("</svg>")
    return "\n".join(out)


def to_html(stages: Sequence[Stage], *, title: str, text: str) -> str:
    """A self-contained HTML page: the drawing, then the same pipeline as text.

    Args:
      stages: the stages in pipeline order.
      title: the page's title and heading.
      text: the pipeline as text, shown below the drawing.
    """
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{_xml(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
svg {{ max-width: 100%; height: auto; }}
pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; }}
</style>
</head>
<body>
<h1>{_xml(title)}</h1>
<p>{len(stages)} stages: sources at the top, the dataset at the bottom.
Hover over a stage to see its element spec.</p>
{to_svg(stages)}
<pre>{_xml(text)}</pre>
</body>
</html>
"""
