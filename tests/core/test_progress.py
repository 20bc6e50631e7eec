"""chute's progress bars start no thread (one would keep workers from being forked)."""

from __future__ import annotations

import io
import threading

from chute._core.progress import bar_type


def test_a_bar_starts_no_monitor_thread() -> None:
    bar = bar_type()
    assert bar is not None  # tqdm comes with the test extra
    before = {t.name for t in threading.enumerate()}
    with bar(total=3, file=io.StringIO(), mininterval=0) as shown:
        shown.update(3)
    assert {t.name for t in threading.enumerate()} - before == set()
    assert bar.monitor is None
