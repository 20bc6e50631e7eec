"""HighwayHash-64 checksums of ArrayRecord chunks: compiled where built, else NumPy.

chute's one HighwayHash entry point: every checksum goes through ``hash_ranges`` (or
``hash_each``), which picks one of two implementations of the algorithm, both chute's
own:

* ``_highway_hash_c``, an optional C extension (``setup.py`` builds it where a C
  compiler is found): AVX2 where the CPU has it (measured on a 2-core AMD EPYC:
  11 GB/s for one input, 17-21 GB/s for a batch, two inputs at a time), else
  portable C (1-3 GB/s); the GIL is released while it hashes 4 KiB or more;
* ``_highway_hash_many``, NumPy: inputs of one length hashed as the rows of an
  array, others in lock-step; 150-350 MB/s for a batch of 256 chunks, one input
  about 3-5 MB/s.

``hash_ranges`` picks the compiled one, else NumPy.  ``CHUTE_HIGHWAY_HASH=numpy`` in
the environment (read at import) or ``use_compiled(False)`` forces the fallback;
``implementation()`` says which runs (``chute --version`` prints it).  The tests check
both against a scalar reference written apart (``tests/sources/highway_hash_reference.py``).

>>> [hex(h) for h in hash_each([b""])]
['0x72c3b1e9c0139fe1']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType

import numpy as np

from chute._sources._highway_hash_many import (
    RIEGELI_KEY,
    highway_hash64_each,
    highway_hash64_many,
)

__all__ = ["ENV", "hash_each", "hash_ranges", "implementation", "use_compiled"]

ENV = "CHUTE_HIGHWAY_HASH"

Buffers = Sequence[bytes | memoryview]


def _load() -> ModuleType | None:
    try:
        from chute._sources import _highway_hash_c
    except ImportError:
        return None
    return _highway_hash_c


_COMPILED = _load()
_forced_off = os.environ.get(ENV, "").strip().lower() == "numpy"
_use = _COMPILED is not None and not _forced_off


def implementation() -> str:
    """Which HighwayHash checks ArrayRecord chunks in this process, in words."""
    if _use and _COMPILED is not None:
        return f"compiled, {'AVX2' if _COMPILED.CPU == 'avx2' else 'portable C'}"
    if _COMPILED is None:
        return "NumPy, C extension not built"
    return f"NumPy, {ENV}=numpy" if _forced_off else "NumPy, use_compiled(False)"


def use_compiled(on: bool) -> bool:
    """Hash with the compiled extension (``True``, where built) or with NumPy (``False``);
    returns the setting it replaces."""
    global _use
    if on and _COMPILED is None:
        raise ValueError(
            "use_compiled(True): chute's C extension _highway_hash_c is not built; "
            "reinstall chute where a C compiler is present (pip install -e .)."
        )
    previous, _use = _use, bool(on)
    return previous


def hash_ranges(buffers: Buffers, begin: int, lengths: np.ndarray) -> np.ndarray:
    """The HighwayHash-64 (Riegeli's key) of ``buffers[i][begin : begin + lengths[i]]``
    for each ``i``, as ``uint64``; every range must lie inside its buffer."""
    lengths = np.ascontiguousarray(lengths, np.int64)
    if _use and _COMPILED is not None:
        out = _COMPILED.hash64_ranges(buffers, RIEGELI_KEY, begin, lengths)
        return np.frombuffer(out, np.uint64)
    views = [memoryview(b)[begin : begin + n] for b, n in zip(buffers, lengths.tolist())]
    return np.array(_numpy_hashes(views, lengths.tolist()), np.uint64)


def hash_each(messages: Buffers) -> list[int]:
    """The HighwayHash-64 (Riegeli's key) of each of ``messages``, as ints."""
    sizes = np.array([memoryview(m).nbytes for m in messages], np.int64)
    return hash_ranges(messages, 0, sizes).tolist()


def _numpy_hashes(messages: Buffers, sizes: list[int]) -> list[int]:
    """The fallback: inputs of one length (one input too) as the rows of an array, others
    in lock-step."""
    if not messages:
        return []
    if min(sizes) == max(sizes):
        rows = np.frombuffer(b"".join(messages), np.uint8).reshape(len(messages), -1)
        return highway_hash64_many(rows).tolist()
    return highway_hash64_each(messages)
