"""One loader of ``bench_images`` in a fresh interpreter of its own, epochs on command.

``bench_images.py --child NAME FOLDER N`` imports the loader's library and prints
``ready``; then, for each line ``check`` or ``run`` on its standard input, it runs one
epoch and prints one line ``RESULT {json}``: the epoch's seconds (building the pipeline,
iterating to the end; closing is not timed), its images, what is wrong with it (``None``:
nothing), and, for ``check``, the digest of its first batches.  ``reference`` computes
the digest of the same batches without workers; it comes after the timed epochs, since
reading the records in this process would keep chute from forking its workers from it
(array_record's reader starts native threads).  ``quit`` (or the end of the input) ends it.

Each loader runs alone in its process, so no library's imports, threads or forked
state reach another's workers.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

from jpegs.loaders import CHECKED_BATCHES, LOADERS, Loader
from jpegs.work import EpochCheck, digest

RESULT = "RESULT "


def one_epoch(loader: Loader, n: int, check: bool) -> dict[str, Any]:
    gc.collect()
    verdict = EpochCheck()
    head: list[Any] = []
    start = time.perf_counter()
    it = loader.epoch()
    for images, labels in it:
        verdict.add(images, labels)
        if check and len(head) < CHECKED_BATCHES:
            head.append((images.copy(), labels.copy()))
    seconds = time.perf_counter() - start
    closer = getattr(it, "close", None)
    if closer is not None:
        closer()
    result: dict[str, Any] = {"seconds": seconds}
    if loader.hands_back:
        result.update(images=verdict.images, batches=verdict.batches, problem=verdict.verdict(n))
    else:
        result.update(images=n, batches=None, problem=None)
    if check:
        result["digest"] = digest(iter(head)) if head else None
    return result


def serve(name: str, folder: str, n: int) -> int:
    loader = LOADERS[name](folder, n)
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        if command == "reference":
            result: dict[str, Any] = {"reference": loader.reference(), "problem": None}
        else:
            result = one_epoch(loader, n, check=command == "check")
        print(RESULT + json.dumps(result), flush=True)
    return 0
