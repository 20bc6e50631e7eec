"""What ``chute profile`` does with the pipeline: read it with statistics on, then suggest.

``read_tracked`` switches ``py_debug_mode`` on while it reads (restoring it
afterwards): every stage is timed, and the stages that ``mp_prefetch`` runs
are timed by the workers themselves, which send their figures along.
``suggestion`` asks ``pick_performance_config`` for worker and read-ahead
options; a pipeline that already has ``mp_prefetch`` gets them for the
stages its workers run.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from chute._cli.target import UserCodeError
from chute._core.progress import bar_type

__all__ = ["Progress", "options_text", "read_tracked", "suggestion"]

_REDRAW_S = 0.1  # how often the plain counter is redrawn


class Progress:
    """Elements read so far on stderr: a tqdm bar, else a ``\\r`` counter; none off a terminal."""

    def __init__(self, total: int | None, *, stream: Any = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.total, self.bar, self.shown_at = total, None, 0.0
        self.on = bool(getattr(self.stream, "isatty", lambda: False)())
        if self.on:
            bar = bar_type()
            if bar is not None:
                self.bar = bar(total=total, unit=" elements", file=self.stream, leave=False)

    def update(self, count: int) -> None:
        """``count`` elements have been read."""
        if self.bar is not None:
            self.bar.update(count - self.bar.n)
        elif self.on and time.monotonic() - self.shown_at >= _REDRAW_S:
            self.shown_at = time.monotonic()
            of = f" of {self.total:,}" if self.total else ""
            self.stream.write(f"\r{count:,}{of} elements read")
            self.stream.flush()

    def close(self) -> None:
        """Takes the progress line off the terminal."""
        if self.bar is not None:
            self.bar.close()
        elif self.on:
            self.stream.write("\r\033[K")
            self.stream.flush()


def read_tracked(
    ds: Any, elements: int | None, seconds: float, progress: Progress
) -> tuple[Any, str]:
    """Reads ``ds`` for ``elements`` elements, else for ``seconds``; returns its summary.

    Returns:
      The ``ExecutionSummary``, and a note for the user ("" when the limit
      was reached): the pipeline ended early, or Ctrl-C stopped the reading.

    Raises:
      UserCodeError: the pipeline raised; the iterator is closed.
    """
    from chute._core.config import config
    from chute._stats.summary import execution_summary

    previous = config.py_debug_mode
    config.update("py_debug_mode", True)
    it = None
    try:
        it = iter(ds)
        note = _read(it, elements, seconds, progress)
        return execution_summary(it), note
    except UserCodeError:
        raise
    except Exception as exc:
        raise UserCodeError("the pipeline", exc) from exc
    finally:
        progress.close()
        config.update("py_debug_mode", previous)
        if it is not None:
            it.close()  # stops the workers, whatever happened


def _read(it: Any, elements: int | None, seconds: float, progress: Progress) -> str:
    count = 0
    deadline = None if elements is not None else time.monotonic() + seconds
    try:
        while elements is None or count < elements:
            if deadline is not None and time.monotonic() >= deadline:
                break
            try:
                next(it)
            except StopIteration:
                return f"the pipeline ended after {count:,} elements"
            count += 1
            progress.update(count)
    except KeyboardInterrupt:
        return f"interrupted after {count:,} elements; the summary covers those"
    return ""


def options_text(options: Any) -> str:
    """``MultiprocessingOptions(num_workers=4)``: the options with the fields not at their default.

    >>> from chute import ReadOptions
    >>> options_text(ReadOptions(num_threads=4, prefetch_buffer_size=64))
    'ReadOptions(num_threads=4, prefetch_buffer_size=64)'
    """
    shown = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if field.default is not dataclasses.MISSING and value == field.default:
            continue
        if field.default_factory is not dataclasses.MISSING and value == field.default_factory():
            continue
        shown.append(f"{field.name}={value!r}")
    return f"{type(options).__name__}({', '.join(shown)})"


def _pools(ds: Any) -> list[Any]:
    from chute._stages.mp_prefetch import MultiprocessPrefetchIterDataset
    from chute._stats.graph import post_order

    return [node for node in post_order(ds) if isinstance(node, MultiprocessPrefetchIterDataset)]


def suggestion(ds: Any, ram_budget_mb: int | None) -> str:
    """pick_performance_config's options for ``ds`` as lines to paste, or why there are none.

    ``pick_performance_config`` takes a pipeline before ``mp_prefetch``: for a
    pipeline with one ``mp_prefetch`` it is asked about that stage's parent
    (what each worker runs), and the text says which options the pipeline
    uses now.  A pipeline with more than one ``mp_prefetch`` gets none.
    """
    from chute._execution.performance import pick_performance_config, usable_cores

    pools = _pools(ds)
    head = "Suggested performance config"
    if len(pools) > 1:
        return f"{head}: none; the pipeline has {len(pools)} mp_prefetch stages (expected one)."
    now = ""
    if pools:
        now = (
            f"The pipeline runs mp_prefetch({options_text(pools[0]._options)}) now; for the "
            "stages before it:\n"
        )
        ds = pools[0].parents[0]
    budget = 1024 if ram_budget_mb is None else ram_budget_mb
    try:
        config = pick_performance_config(
            ds, ram_budget_mb=ram_budget_mb, max_workers=usable_cores(), max_buffer_size=None
        )
    except Exception as exc:  # an empty pipeline, or one that fails: not worth exit status 1
        return f"{head}: none; pick_performance_config: {type(exc).__name__}: {exc}"
    lines = [f"{head}, from pick_performance_config for a {budget} MiB RAM budget "
             "(--ram-budget-mb):"]  # fmt: skip
    if config.read_options is not None:
        lines.append(f"  .to_iter_dataset(read_options={options_text(config.read_options)})")
    if config.multiprocessing_options is not None:
        lines.append(f"  .mp_prefetch({options_text(config.multiprocessing_options)})")
    return now + "\n".join(lines)
