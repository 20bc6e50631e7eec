"""``visualize``: a picture of a pipeline, as text, Graphviz DOT, SVG or an HTML page.

The picture is of the stage graph (``graph.stage_graph``); given an iterator
that kept statistics, or an ``ExecutionSummary``, each stage also shows its
share of the time, its elements, its mean time per element and where it ran,
and the drawings colour it from cold (blue) to hot (red).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
from typing import Any

from chute._core.iterator import DatasetIterator
from chute._core.node import Node
from chute._stats import dot, svg
from chute._stats import summary as summary_module
from chute._stats.figures import Stage
from chute._stats.graph import StageNode, stage_graph
from chute._stats.summary import ExecutionSummary, StageStats
from chute._stats.tree_text import tree_text

__all__ = ["PipelinePicture", "visualize", "write_picture"]

_SUFFIXES = (".dot", ".html", ".svg", ".txt")
_NUMBERS = itertools.count()


@dataclasses.dataclass(frozen=True, repr=False)
class PipelinePicture:
    """A picture of a pipeline's stages; ``str()`` of it is the text version.

    The text is a call tree: the dataset itself on the first line and, indented
    below each stage, the stages it reads from, down to the sources. A stage
    that two others read from is drawn once and marked ``(shown above)`` the
    second time. The drawings (``to_dot``, ``to_svg``, ``to_html``) go the
    other way: sources at the top, the dataset at the bottom.

    Args:
      stages: ``StageNode`` or ``StageStats`` objects in pipeline order (each
        one's ``index`` its position, its parents earlier stages), as
        ``stage_graph`` and ``ExecutionSummary.stages`` list them.

    Raises:
      TypeError: a stage is neither a ``StageNode`` nor a ``StageStats``.
      ValueError: a stage's index is not its position, or it names a parent
        that is not an earlier stage.

    >>> import chute
    >>> picture = visualize(chute.MapDataset.range(4).map(str).batch(2))
    >>> picture
    PipelinePicture(3 stages ending in 'batch(2)', without figures)
    >>> print(picture.text)  # doctest: +NORMALIZE_WHITESPACE
    batch(2)        BatchMapDataset
    └─ map(str)     MapMapDataset
       └─ range     RangeMapDataset  ShapeDtypeStruct(shape=(), dtype=int64)
    """

    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        for position, stage in enumerate(self.stages):
            if not isinstance(stage, (StageNode, StageStats)):
                raise TypeError(
                    f"PipelinePicture: stages must be StageNode or StageStats objects "
                    f"(got {stage!r} that is a {type(stage).__name__} at position {position})."
                )
            if stage.index != position:
                raise ValueError(
                    f"PipelinePicture: stage {stage.name!r} at position {position} has index "
                    f"{stage.index}; list the stages in pipeline order, as stage_graph() does."
                )
            late = [p for p in stage.parents if not 0 <= p < position]
            if late:
                raise ValueError(
                    f"PipelinePicture: stage {position} ({stage.name!r}) names parents {late}; "
                    f"parents must be earlier stages (0 to {position - 1}), sources first."
                )

    @property
    def has_figures(self) -> bool:
        """Whether the stages carry measured figures (they came from an ``ExecutionSummary``)."""
        return any(isinstance(stage, StageStats) for stage in self.stages)

    @property
    def title(self) -> str:
        """``'Pipeline: batch(2)'``: the name of the last stage, the dataset itself."""
        return f"Pipeline: {self.stages[-1].name}" if self.stages else "Pipeline: (no stages)"

    @property
    def text(self) -> str:
        """The pipeline as a call tree, one line per stage, columns aligned for a terminal."""
        return tree_text(self.stages)

    def to_dot(self) -> str:
        """The pipeline as a Graphviz ``digraph`` (render with ``dot -Tsvg``)."""
        return dot.to_dot(self.stages, title=self.title)

    def to_svg(self) -> str:
        """The pipeline drawn as a standalone SVG document."""
        return svg.to_svg(self.stages)

    def to_html(self) -> str:
        """A self-contained HTML page: the SVG drawing, then the text (no scripts, no network)."""
        return svg.to_html(self.stages, title=self.title, text=self.text)

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Writes the picture in the format the file's suffix names, creating its folder.

        Args:
          path: a file ending in ``.dot``, ``.html``, ``.svg`` or ``.txt``.

        Returns:
          The path written, as a ``pathlib.Path``.

        Raises:
          ValueError: the suffix is none of those.
        """
        target = pathlib.Path(path)
        render = {
            ".dot": self.to_dot,
            ".html": self.to_html,
            ".svg": self.to_svg,
            ".txt": lambda: self.text + "\n",
        }.get(target.suffix.lower())
        if render is None:
            raise ValueError(
                f"PipelinePicture.save: cannot tell the format of {str(target)!r} "
                f"(suffix {target.suffix or 'none'!r}); end the name in one of "
                f"{', '.join(_SUFFIXES)}."
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(), encoding="utf-8")
        return target

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        last = f" ending in {self.stages[-1].name!r}" if self.stages else ""
        figures = "with" if self.has_figures else "without"
        return f"PipelinePicture({len(self.stages)} stages{last}, {figures} figures)"


def visualize(ds_or_iterator: Any) -> PipelinePicture:
    """A picture of a pipeline: its stages, and their figures when it kept statistics.

    Args:
      ds_or_iterator: a ``MapDataset`` or ``IterDataset``; the iterator that
        ``iter(dataset)`` returned (drawn with its figures when it kept
        statistics); or an ``ExecutionSummary``.

    Returns:
      A ``PipelinePicture``: ``print()`` it, or ``save()`` it as ``.html``,
      ``.svg``, ``.dot`` or ``.txt``.

    Raises:
      TypeError: the argument is none of those.
      ValueError: an iterator that knows neither its dataset nor its figures.

    >>> import chute
    >>> a = chute.MapDataset.range(3).map(str)
    >>> b = chute.MapDataset.range(3)
    >>> print(visualize(chute.experimental.ZipMapDataset([a, b])).text)
    ... # doctest: +NORMALIZE_WHITESPACE
    zip              ZipMapDataset
    ├─ map(str)      MapMapDataset
    │  └─ range      RangeMapDataset  ShapeDtypeStruct(shape=(), dtype=int64)
    └─ range         RangeMapDataset  ShapeDtypeStruct(shape=(), dtype=int64)
    """
    if isinstance(ds_or_iterator, ExecutionSummary):
        return PipelinePicture(ds_or_iterator.stages)
    if isinstance(ds_or_iterator, Node):
        return PipelinePicture(tuple(stage_graph(ds_or_iterator)))
    if isinstance(ds_or_iterator, DatasetIterator):
        summary = _summary_of(ds_or_iterator)
        if summary is not None:
            return PipelinePicture(summary.stages)
        pipeline = ds_or_iterator._pipeline
        if pipeline is None:
            raise ValueError(
                f"visualize: this {type(ds_or_iterator).__name__} knows neither its dataset nor "
                "its statistics (only the iterator that iter(dataset) returns does); pass the "
                "dataset instead."
            )
        return PipelinePicture(tuple(stage_graph(pipeline)))
    raise TypeError(
        "visualize() takes a MapDataset, an IterDataset, a DatasetIterator or an "
        f"ExecutionSummary (got {ds_or_iterator!r} that is a {type(ds_or_iterator).__name__})."
    )


def _summary_of(iterator: DatasetIterator[Any]) -> ExecutionSummary | None:
    """The iterator's ``ExecutionSummary``, or None when it kept no statistics."""
    # execution_summary lives beside ExecutionSummary; looked up by name so that a chute
    # without it still draws the bare graph.
    execution_summary = vars(summary_module).get("execution_summary")
    if execution_summary is None:
        return None
    try:
        summary = execution_summary(iterator)
    except (AttributeError, ValueError):  # ValueError: made without statistics
        return None
    return summary if isinstance(summary, ExecutionSummary) and summary.stages else None


def write_picture(ds: Any, directory: str | os.PathLike[str]) -> pathlib.Path:
    """Writes the pipeline's picture as ``pipeline-<pid>-<n>.html``, with the ``.dot`` beside it.

    This is what the ``py_dataset_visualization_output_dir`` option does when
    a pipeline starts; the name never overwrites an earlier picture.

    Args:
      ds: whatever ``visualize`` takes.
      directory: the folder to write into; created if missing.

    Returns:
      The path of the HTML page.

    Raises:
      OSError: the folder cannot be created or written to; the message names
        the option.
    """
    picture = visualize(ds)
    folder = pathlib.Path(directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        while True:
            page = folder / f"pipeline-{os.getpid()}-{next(_NUMBERS)}.html"
            try:
                with open(page, "x", encoding="utf-8") as out:
                    out.write(picture.to_html())
            except FileExistsError:
                continue
            break
        page.with_suffix(".dot").write_text(picture.to_dot(), encoding="utf-8")
    except OSError as exc:
        message = (
            f"py_dataset_visualization_output_dir={str(directory)!r}: cannot write the "
            f"pipeline's picture there ({exc.strerror or exc}); set the option to a writable "
            "folder, or to None to write no pictures."
        )
        raise (OSError(exc.errno, message) if exc.errno else OSError(message)) from exc
    return page
