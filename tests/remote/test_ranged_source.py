"""LocalRanges: ranges of a local file, and close() while another thread reads."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from chute._remote import ranged_source
from chute._remote.ranged_source import LocalRanges


def test_reads_ranges_in_the_order_given(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    with LocalRanges(path) as source:
        assert source.size() == 10
        assert source.read_ranges([(7, 3), (0, 2), (5, 0)]) == [b"789", b"01", b""]
        with pytest.raises(ValueError, match="outside the file"):
            source.read_ranges([(8, 3)])


def test_close_during_a_read_lets_the_read_finish_on_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.write_bytes(b"mine-" * 10)
    other.write_bytes(b"OTHER" * 10)
    reading, go = threading.Event(), threading.Event()
    pread = ranged_source._pread_all

    paused_fd: list[int] = []

    def paused_pread(fd: int, length: int, offset: int) -> bytes:
        paused_fd.append(fd)
        reading.set()  # the read has its descriptor: let close() run now
        go.wait()
        return pread(fd, length, offset)

    monkeypatch.setattr(ranged_source, "_pread_all", paused_pread)
    source = LocalRanges(mine)
    source.size()  # opens the file
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(source.read_ranges([(0, 10)])))
    reader.start()
    reading.wait()
    source.close()
    # Were the read's descriptor closed, this would reuse its number (the lowest free).
    reused = os.open(other, os.O_RDONLY)
    try:
        go.set()
        reader.join()
    finally:
        os.close(reused)
    assert got == [[b"mine-mine-"]]  # not the other file's bytes
    try:  # closed once the read let go of it (the number may serve another file since)
        still = os.fstat(paused_fd[0]).st_ino == mine.stat().st_ino
    except OSError:
        still = False
    assert not still
    monkeypatch.setattr(ranged_source, "_pread_all", pread)
    assert source.read_ranges([(5, 4)]) == [b"mine"]  # a later read opens it again
    source.close()
