"""A clean parent process for the processes of the ``arrayrecord`` workload that fork.

A process forked after its parent opened an array_record reader hangs or crashes when it
reads with array_record itself.  The benchmark's process has opened readers for chute and
Grain (whose workers come from a fork server, or are spawned, so they are not affected),
so PyTorch's DataLoader and the limit's bare processes run in a second Python process,
started as ``bench_workers.py --clean-parent``: it imports torch, never opens a reader,
and runs an epoch on command (``serve``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from multiprocessing.connection import Client, Listener
from typing import Any

import numpy as np

import common
import runners
from workers import processes
from workers.harness import BATCH, ENTRY, WORKERS, image_digest
from workers.memory import reset_peak_rss, touch
from workers.photos import SEED, bare_photos, photo_dataset_class
from workers.processes import CLEAN_PARENT_FLAG, SHUTDOWN_WAIT_S, kib, proc_status


class CleanParent:
    """A fresh Python process, as a PyTorch user's script: torch imported, no ArrayRecord
    reader ever opened.  PyTorch's DataLoader and the limit's bare processes of the
    arrayrecord workload fork from it.

    It runs an epoch on command: ``iterate()`` gives an iterator in this process that
    asks it for one batch at a time (in lock-step) and whose ``close()`` closes the
    DataLoader there.  The reply is ``None``; while ``mode`` is ``"digest"`` it is the
    batch's digest, and while it is ``"touch"`` the clean parent touches every batch first.
    """

    def __init__(self, directory: str, path: str, n: int) -> None:
        address = os.path.join(directory, "clean-parent.sock")
        listener = Listener(address, family="AF_UNIX")
        self.proc = subprocess.Popen(
            [sys.executable, ENTRY, CLEAN_PARENT_FLAG, address, path, str(n)]
        )
        processes.seen_pids.add(self.proc.pid)
        with common.time_limit(common.RUN_TIMEOUT_S):
            self.conn = listener.accept()
        listener.close()
        self.mode: str | None = None
        self.broken = False
        self.call("ping")

    def call(self, *command: Any) -> Any:
        if self.broken:
            raise RuntimeError("an earlier command to the clean parent process was interrupted")
        try:
            self.conn.send(command)
            status, value = self.conn.recv()
        except BaseException:
            self.broken = True  # a reply may still come: the next one would be out of step
            raise
        if status == "error":
            raise RuntimeError(f"in the clean parent process: {value}")
        return value

    def iterate(self, what: str) -> Iterator[Any]:
        """An epoch of ``what`` (``torch`` or ``limit``) in the clean parent."""
        self.call("iter", what, self.mode)
        return RemoteEpoch(self)

    def close(self) -> None:
        try:
            self.call("exit")
            self.proc.wait(timeout=SHUTDOWN_WAIT_S)
        except Exception:
            self.proc.kill()
            self.proc.wait()


class RemoteEpoch:
    """This process's end of an epoch that runs in the clean parent."""

    def __init__(self, parent: CleanParent) -> None:
        self.parent = parent

    def __iter__(self) -> RemoteEpoch:
        return self

    def __next__(self) -> Any:
        more, value = self.parent.call("next")
        if not more:
            raise StopIteration
        return value

    def close(self) -> None:
        self.parent.call("close")


def serve(address: str, path: str, n: int) -> int:
    """Clean-parent mode: runs epochs of the arrayrecord workload on command (see above)."""
    import torch
    import torch.utils.data

    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    conn = Client(address, family="AF_UNIX")
    epochs = Epochs(torch, path, n)
    while True:
        command, *args = conn.recv()
        if command == "exit":
            conn.send(("ok", None))
            return 0
        try:
            reply: tuple[str, Any] = ("ok", epochs.handle(command, *args))
        except Exception:
            reply = ("error", traceback.format_exc(limit=6))
        conn.send(reply)


class Epochs:
    """The clean parent's side: one epoch at a time, of PyTorch's DataLoader or of the limit."""

    def __init__(self, torch: Any, path: str, n: int) -> None:
        self.torch, self.path = torch, path
        self.dataset = photo_dataset_class(torch, path, n)
        self.order = np.random.default_rng(SEED).permutation(n)
        self.it: Any = None
        self.mode: str | None = None
        self.digest = image_digest()

    def handle(self, command: str, *args: Any) -> Any:
        """The reply's value to ``command`` (``ping`` and unknown commands: ``None``)."""
        if command == "iter":
            what, self.mode = args
            self.digest = image_digest()
            if what == "torch":
                loader = runners.torch_loader(self.torch, self.dataset(), WORKERS, BATCH, SEED)
                self.it = iter(loader)
            else:
                self.it = runners.bare_processes(bare_photos(self.path, self.order), WORKERS)
        elif command == "next":
            return self.next()
        elif command == "close":
            runners.shutdown_torch(self.it)
            self.it = None
        elif command == "reset_peak":
            return kib(proc_status("self"), "VmRSS"), reset_peak_rss()
        elif command == "peak":
            return kib(proc_status("self"), "VmHWM")
        return None

    def next(self) -> tuple[bool, Any]:
        """(False, None) at the end of the epoch, else (True, the batch's reply)."""
        try:
            batch = next(self.it)
        except StopIteration:
            return False, None
        if self.mode == "touch":
            touch(batch)
        return True, self.digest(batch) if self.mode == "digest" else None
