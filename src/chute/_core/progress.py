"""tqdm progress bars that start no thread.

tqdm's bars start a monitor thread that outlives them; while it runs, chute
cannot fork worker processes and starts them through the fork server
instead. Every bar chute shows comes from ``bar_type()``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["bar_type"]


def bar_type() -> Any:
    """tqdm's bar class without its monitor thread, or None when tqdm is not installed."""
    try:
        importlib.import_module("tqdm")
        tqdm = importlib.import_module("tqdm.auto").tqdm
    except ImportError:
        return None
    return type("Bar", (tqdm,), {"monitor_interval": 0})
