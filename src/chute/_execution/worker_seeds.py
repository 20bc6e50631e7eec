"""Seeding the global random generators of worker processes.

Every worker starts as a copy of one state (the parent's, or the fork
server's), so code that draws from ``np.random``, ``random`` or torch's
global generator would draw the same numbers in every worker, and again in
every epoch.  Like PyTorch's DataLoader, chute seeds those generators in each
worker, before ``worker_init_fn`` runs (which may seed them again):

* the parent draws one *base seed* per iterator (one epoch of workers): from
  the pipeline's seed and the epoch when the pipeline has one, so a run
  repeats; otherwise from the operating system's entropy;
* worker ``w`` seeds its generators from ``(base, w)``;
* a worker that starts at a saved position (restarted after it died, or
  restored into a new process) seeds them from ``(that seed, the position)``,
  so it does not replay the draws of its first life, and a rerun that resumes
  at the same element draws the same numbers.

torch is seeded only when the worker has already imported it (a pipeline
that uses torch has); chute never imports it for this.

>>> worker_seed(base_seed(42, epoch=0), 0) == worker_seed(base_seed(42, epoch=0), 0)
True
>>> worker_seed(base_seed(42, epoch=0), 0) != worker_seed(base_seed(42, epoch=0), 1)
True
>>> resumed_seed(7, None), resumed_seed(7, {"next_index": 3}) == resumed_seed(7, {"next_index": 3})
(7, True)
>>> resumed_seed(7, {"next_index": 3}) not in (7, resumed_seed(7, {"next_index": 4}))
True
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import sys
from typing import Any

import numpy as np

__all__ = ["base_seed", "resumed_seed", "seed_globals", "worker_seed"]


def base_seed(pipeline_seed: int | None, epoch: int) -> int:
    """The base seed of one epoch of workers: from ``pipeline_seed`` and ``epoch``, or fresh."""
    if pipeline_seed is None:
        return secrets.randbits(64)
    words = np.random.SeedSequence([pipeline_seed, epoch]).generate_state(1, np.uint64)
    return int(words[0])


def worker_seed(base: int, worker: int) -> int:
    """The 64-bit seed of worker ``worker`` in the epoch whose base seed is ``base``."""
    return int(np.random.SeedSequence([base, worker]).generate_state(1, np.uint64)[0])


def resumed_seed(seed: int, position: Any) -> int:
    """The seed of a worker whose seed is ``seed`` when it starts at ``position``.

    Args:
      seed: the worker's own seed (``worker_seed``), which its first life used.
      position: the iterator state it starts from, i.e. the element it resumes
        at; ``None`` for a fresh start, which keeps ``seed``.

    Returns:
      A 64-bit seed that depends on both; positions are JSON states, digested.
    """
    if position is None:
        return seed
    text = json.dumps(position, sort_keys=True, default=repr).encode()
    digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
    return int(np.random.SeedSequence([seed, digest]).generate_state(1, np.uint64)[0])


def seed_globals(seed: int) -> None:
    """Seeds ``random``, NumPy's global generator and (if imported) torch from ``seed``."""
    random.seed(seed)
    np.random.seed(np.random.SeedSequence(seed).generate_state(4))
    torch = sys.modules.get("torch")
    manual_seed = getattr(torch, "manual_seed", None)
    if manual_seed is not None:
        manual_seed(seed)
