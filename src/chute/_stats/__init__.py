"""Seeing where a pipeline's time goes: per-stage statistics, the summary and its
verdict, a picture of the pipeline, and ``chute profile``.

``graph`` lists a dataset's stages in pipeline order; ``instrument`` times
them (only when tracking is on); ``summary`` turns the figures into a table
and a verdict; ``visualize`` draws the stage graph, as text (``tree_text``),
Graphviz DOT (``dot``) or SVG and HTML (``svg``, placed by ``layout``), each
stage worded and coloured by ``figures``.

Importing this package installs ``instrument`` as the statistics hooks that
``iter(ds)`` asks (``chute._core.registry``; ``_core`` imports nothing from here).
"""

from chute._core.registry import install_stats
from chute._stats import instrument

install_stats(instrument)
