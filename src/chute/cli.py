"""The ``chute`` command: convert data sets to ArrayRecord and inspect files.

Placeholder entry point; the subcommands arrive with their own change.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Runs the ``chute`` command line."""
    print("chute: no subcommands yet", file=sys.stderr)
    return 2
