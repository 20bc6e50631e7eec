"""Types of chute's optional C extension (``_highway_hash_c.c``)."""

from collections.abc import Sequence

from typing_extensions import Buffer

CPU: str

def hash64(data: Buffer, key: Sequence[int], /) -> int: ...
def hash64_ranges(
    buffers: Sequence[Buffer], key: Sequence[int], begin: int, lengths: Buffer, /
) -> bytes: ...
def use_simd(on: bool, /) -> bool: ...
