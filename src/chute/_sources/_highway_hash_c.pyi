"""Types of chute's optional C extension (``_highway_hash_c.c``)."""

from collections.abc import Sequence

from typing_extensions import Buffer

def hash64(data: Buffer, key: Sequence[int], /) -> int: ...
def hash64_each(buffers: Sequence[Buffer], key: Sequence[int], /) -> list[int]: ...
