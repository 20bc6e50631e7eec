"""HighwayHash-64 checksums of ArrayRecord chunks: compiled where built, else NumPy.

Three implementations of one algorithm, all chute's own:

* ``_highway_hash_c``, an optional C extension (``setup.py`` builds it where a C
  compiler is found): AVX2 where the CPU has it (measured on a 2-core AMD EPYC:
  11 GB/s for one input, 17-21 GB/s for a batch, two inputs at a time), else
  portable C (1-3 GB/s); the GIL is released while it hashes 4 KiB or more;
* ``_highway_hash_many``, NumPy: many inputs hashed in lock-step, 150-350 MB/s
  for a batch of 256 chunks, one input about 4 MB/s;
* ``_highway_hash``, pure Python, one input at about 6 MB/s.

``hash_ranges`` picks the compiled one, else whichever of the other two costs
less for its inputs.  ``CHUTE_HIGHWAY_HASH=numpy`` in the environment (read at
import) or ``use_compiled(False)`` forces the fallback; ``implementation()``
says which runs (``chute --version`` prints it).

>>> from chute._sources._highway_hash import highway_hash64
>>> hash_each([b"", b"chute"]) == [highway_hash64(b""), highway_hash64(b"chute")]
True
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType

import numpy as np

from chute._sources._highway_hash import RIEGELI_KEY, highway_hash64
from chute._sources._highway_hash_many import highway_hash64_each, highway_hash64_many

__all__ = ["ENV", "hash_each", "hash_ranges", "implementation", "use_compiled"]

ENV = "CHUTE_HIGHWAY_HASH"
_MANY = 4  # inputs of one length from which hashing them as rows beats one by one
_LOCKSTEP = 2  # lock-step pays when the inputs hold this many times the longest one's packets

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
    """The fallback: rows of one short length together, else in lock-step where it pays,
    else one by one."""
    if len(messages) >= _MANY and min(sizes) == max(sizes) and sizes[0] < 64:
        rows = np.frombuffer(b"".join(messages), np.uint8).reshape(len(messages), -1)
        return highway_hash64_many(rows).tolist()
    packets = [size // 32 for size in sizes]
    if packets and sum(packets) >= _LOCKSTEP * max(packets) > 0:
        return highway_hash64_each(messages)
    return [highway_hash64(m) for m in messages]
