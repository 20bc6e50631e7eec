"""HighwayHash-64 checksums of ArrayRecord chunks: compiled where built, else NumPy.

Three implementations of one algorithm, all chute's own:

* ``_highway_hash_c``, an optional C extension (``setup.py`` builds it where a C
  compiler is found): about 2.5 GB/s, with the GIL released for large inputs;
* ``_highway_hash_many``, NumPy: many inputs hashed in lock-step, about 250-350
  MB/s for a batch of 256 chunks, one input about 4 MB/s;
* ``_highway_hash``, pure Python, one input at about 6 MB/s.

``hash_each`` picks the compiled one, else whichever of the other two costs
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

__all__ = ["ENV", "hash_each", "implementation", "use_compiled"]

ENV = "CHUTE_HIGHWAY_HASH"
_MANY = 4  # inputs of one length from which hashing them as rows beats one by one
_LOCKSTEP = 2  # lock-step pays when the inputs hold this many times the longest one's packets


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
    if _use:
        return "compiled (C extension)"
    if _COMPILED is None:
        return "NumPy (C extension not built)"
    return f"NumPy ({ENV}=numpy)" if _forced_off else "NumPy (use_compiled(False))"


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


def hash_each(messages: Sequence[bytes | memoryview]) -> list[int]:
    """The HighwayHash-64 (Riegeli's key) of each of ``messages``, as ints."""
    if _use and _COMPILED is not None:
        return _COMPILED.hash64_each(messages, RIEGELI_KEY)
    sizes = [memoryview(m).nbytes for m in messages]
    if len(messages) >= _MANY and min(sizes) == max(sizes) and sizes[0] < 64:
        rows = np.frombuffer(b"".join(messages), np.uint8).reshape(len(messages), -1)
        return highway_hash64_many(rows).tolist()
    packets = [size // 32 for size in sizes]
    if packets and sum(packets) >= _LOCKSTEP * max(packets) > 0:
        return highway_hash64_each(messages)
    return [highway_hash64(m) for m in messages]
