"""``chute profile``: where a pipeline's time goes, stage by stage, and what to change.

Calls the user's ``MODULE:FUNCTION`` for a pipeline, reads it for a while
with per-stage statistics switched on (``py_debug_mode``, for the reading
only, so worker processes time their stages too), and prints the
``execution_summary`` table and verdict, then the options that
``pick_performance_config`` suggests.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from chute._cli.errors import CliError
from chute._cli.profiling import Progress, read_tracked, suggestion
from chute._cli.target import UserCodeError, dataset_from, load_function, parse_kwargs
from chute._stats.collector import WORKER_REPORT_S

__all__ = ["EPILOG", "register", "run"]

EPILOG = """\
Example:
  chute profile examples/profile_me.py:make_dataset --seconds 5
  chute profile my_pipeline:make_dataset --arg batch_size=64 --arg split=train --html p.html

FUNCTION is called with the --arg values as keyword arguments (Python
literals where they parse, else strings) and must return a MapDataset (read
through .to_iter_dataset()) or an IterDataset.  The pipeline is read for
--seconds (default 10) or --elements, as a training loop would read it but
with nothing else to do; Ctrl-C stops early and still prints the summary.

Output: the per-stage table (self time, share, time per element, element
size, how full each buffer was; stages run by mp_prefetch workers show
where=workers), the verdict, then pick_performance_config's suggestion.  A
pipeline that already has mp_prefetch gets the suggestion for the stages its
workers run (the stages before mp_prefetch).  An exception in FUNCTION or
in the pipeline prints its traceback and exits with status 1."""

_DEFAULT_SECONDS = 10.0
_PICTURES = (".html", ".svg", ".dot", ".txt")
_HERE = Path(__file__).resolve().parent


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``profile`` subcommand."""
    parser = subparsers.add_parser(
        "profile",
        help="time every stage of your pipeline and say what to change",
        description=(
            "Build the pipeline that MODULE:FUNCTION returns, read it for a while with\n"
            "per-stage statistics on, and print where the time went, a verdict, and the\n"
            "worker and read-ahead options that pick_performance_config suggests."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        metavar="MODULE:FUNCTION",
        help="a module importable from the current folder, or a path/to/file.py, and the "
        "function in it that returns the pipeline",
    )
    parser.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="K=V",
        help="a keyword argument for FUNCTION (repeatable); V is a Python literal or a string",
    )
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument(
        "--seconds", type=_positive(float), metavar="S", help="read for this long (default: 10)"
    )
    limit.add_argument(
        "--elements", type=_positive(int), metavar="N", help="read this many elements"
    )
    parser.add_argument("--html", metavar="PATH", help="write the pipeline's picture (.html, "
                        ".svg, .dot or .txt by the suffix) with each stage's figures")  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="write the summary as JSON")
    parser.add_argument(
        "--no-suggest", action="store_true", help="skip pick_performance_config's suggestion"
    )
    parser.add_argument(
        "--ram-budget-mb",
        type=_positive(int),
        metavar="MB",
        help="MiB the suggested buffers may hold over all workers (default: 1024)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Runs ``chute profile`` with parsed ``args``; returns the exit status."""
    for path in (args.html, args.json):
        _check_writable(path)
    if args.html is not None and Path(args.html).suffix.lower() not in _PICTURES:
        raise CliError(f"--html {args.html}: end the name in one of {', '.join(_PICTURES)}")
    kwargs = parse_kwargs(args.arg)
    try:
        ds = dataset_from(load_function(args.target), kwargs, args.target)
        seconds = _DEFAULT_SECONDS if args.seconds is None else args.seconds
        summary, note = read_tracked(ds, args.elements, seconds, Progress(args.elements))
    except UserCodeError as exc:
        _print_traceback(exc.error)
        print(f"chute profile: {exc} (traceback above)", file=sys.stderr)
        return 1
    if note:
        print(f"chute profile: {note}", file=sys.stderr)
    print(summary)
    if summary.workers and not any(s.where == "workers" for s in summary.stages):
        print(
            "\nThe worker processes had not sent their figures yet (they do every "
            f"{WORKER_REPORT_S} s of work): profile for longer to see their stages."
        )
    _write_outputs(summary, args)
    if not args.no_suggest:
        print()
        print(suggestion(ds, args.ram_budget_mb))
    return 0


def _print_traceback(error: BaseException) -> None:
    """The traceback of the user's error, from its first frame outside this command."""
    tb = error.__traceback__
    while tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().parent == _HERE:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb, file=sys.stderr)


def _check_writable(path: str | None) -> None:
    """Fails before the reading, not after it, when an output file cannot be written."""
    if path is None:
        return
    folder = Path(path).parent
    if Path(path).is_dir() or (folder.exists() and not os.access(folder, os.W_OK | os.X_OK)):
        raise CliError(f"{path}: cannot write there; give a file in a writable folder")


def _write_outputs(summary: Any, args: argparse.Namespace) -> None:
    from chute._stats.visualize import visualize

    written = []
    try:
        if args.html is not None:
            written.append(f"Picture: {visualize(summary).save(args.html)}")
        if args.json is not None:
            target = Path(args.json)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(summary.to_json(indent=2) + "\n", encoding="utf-8")
            written.append(f"Summary JSON: {target}")
    except OSError as exc:
        raise CliError(f"cannot write the output: {exc}") from None
    if written:
        print("\n" + "\n".join(written))
