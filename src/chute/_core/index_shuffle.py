"""A vectorised pseudo-random permutation of ``[0, max_index]``.

The permutation is a small Feistel cipher (Simon-style round function) over a
block just wide enough to hold ``max_index``, with cycle walking to stay inside
the range.  It reproduces Grain's ``index_shuffle`` bit for bit, except where
``max_index`` is an exact power of two ``>= 2**16``: there Grain's block is one
bit too narrow and its "permutation" repeats one element and drops another.
chute sizes the block by ``max_index.bit_length()``, so every shuffle is a true
permutation.
"""

from __future__ import annotations

import functools
from typing import overload

import numpy as np
import numpy.typing as npt

_MASK32 = 0xFFFFFFFF


@functools.lru_cache(maxsize=256)
def seed_seq_generate(seed: int, count: int) -> tuple[int, ...]:
    """Returns ``count`` 32-bit words of C++ ``std::seed_seq{seed}.generate``.

    Follows the algorithm of the C++ standard ([rand.util.seedseq]) with a
    single input value; every intermediate result is taken modulo ``2**32``.

    >>> seed_seq_generate(0, 2)
    (2061087650, 2269319357)
    """
    n = count
    out = [0x8B8B8B8B] * n
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p = (n - t) // 2
    _mix_in(out, [seed & _MASK32], p, p + t)
    _scramble(out, max(2, n), p, p + t)
    return tuple(out)


def _tempered(x: int) -> int:
    return x ^ (x >> 27)


def _mix_in(out: list[int], values: list[int], p: int, q: int) -> None:
    """The first loop of seed_seq.generate: mixes the input values in."""
    n, s = len(out), len(values)
    for k in range(max(s + 1, n)):
        r1 = (1664525 * _tempered(out[k % n] ^ out[(k + p) % n] ^ out[(k - 1) % n])) & _MASK32
        if k == 0:
            r2 = r1 + s
        elif k <= s:
            r2 = r1 + k % n + values[k - 1]
        else:
            r2 = r1 + k % n
        r2 &= _MASK32
        out[(k + p) % n] = (out[(k + p) % n] + r1) & _MASK32
        out[(k + q) % n] = (out[(k + q) % n] + r2) & _MASK32
        out[k % n] = r2


def _scramble(out: list[int], m: int, p: int, q: int) -> None:
    """The second loop of seed_seq.generate: one more pass of scrambling."""
    n = len(out)
    for k in range(m, m + n):
        summed = (out[k % n] + out[(k + p) % n] + out[(k - 1) % n]) & _MASK32
        r3 = (1566083941 * _tempered(summed)) & _MASK32
        r4 = (r3 - k % n) & _MASK32
        out[(k + p) % n] ^= r3
        out[(k + q) % n] ^= r4
        out[k % n] = r4


def _check_args(max_index: int, seed: int, rounds: int) -> None:
    if max_index < 0:
        raise ValueError(f"index_shuffle: max_index must be >= 0 (got {max_index}).")
    if not 0 <= seed < 2**32:
        raise ValueError(f"index_shuffle: seed must be an integer in [0, 2**32) (got {seed}).")
    if rounds % 2 or not 4 <= rounds <= 1024:
        raise ValueError(
            f"rounds must be an even integer between 4 and 1024, but got rounds = {rounds}. "
            f"chute: index_shuffle: rounds must be even and in [4, 1024] (got {rounds})."
        )


def _encrypt(values: np.ndarray, half: int, keys: tuple[np.uint64, ...]) -> np.ndarray:
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    one, two, eight = np.uint64(1), np.uint64(2), np.uint64(8)
    r_one, r_two, r_eight = (np.uint64(half - r) for r in (1, 2, 8))

    def round_fn(x: np.ndarray) -> np.ndarray:
        rot1 = ((x << one) | (x >> r_one)) & mask
        rot2 = ((x << two) | (x >> r_two)) & mask
        rot8 = ((x << eight) | (x >> r_eight)) & mask
        return (rot1 & rot8) ^ rot2

    left = values >> shift
    right = values & mask
    for k1, k2 in zip(keys[::2], keys[1::2]):
        left = left ^ round_fn(right) ^ k1
        right = right ^ round_fn(left) ^ k2
    return (left << shift) | right


def _keys(seed: int, rounds: int, half: int) -> tuple[np.uint64, ...]:
    return tuple(np.uint64(k & ((1 << half) - 1)) for k in seed_seq_generate(seed, rounds))


def _rotl8(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << r) | (x >> (8 - r))) & 0xFF


_BYTES = np.arange(256, dtype=np.uint16)
# The round function on 8-bit halves, as a table (rotating 8 bits by 8 is a no-op).
_ROUND8 = ((_rotl8(_BYTES, 1) & _BYTES) ^ _rotl8(_BYTES, 2)).astype(np.uint8)
_BLOCK16 = np.arange(1 << 16)
_HIGH16, _LOW16 = (_BLOCK16 >> 8).astype(np.uint8), (_BLOCK16 & 0xFF).astype(np.uint8)


def _encrypt_block16(seed: int, rounds: int) -> np.ndarray:
    """The cipher applied to all 65536 values of the 16-bit block, by table lookups."""
    keys = [np.uint8(k & 0xFF) for k in seed_seq_generate(seed, rounds)]
    left, right = _HIGH16.copy(), _LOW16.copy()
    for k1, k2 in zip(keys[::2], keys[1::2]):
        left ^= _ROUND8[right]
        left ^= k1
        right ^= _ROUND8[left]
        right ^= k2
    return (left.astype(np.int64) << 8) | right


@functools.lru_cache(maxsize=16)
def _small_table(max_index: int, seed: int, rounds: int) -> np.ndarray:
    """The walked permutation of ``[0, max_index]`` for a 16-bit block (read-only).

    A 16-bit block over a small range would need thousands of cycle-walking
    steps per index; instead, encrypt all 65536 block values at once and
    resolve every walk together by pointer jumping: each pass doubles the
    distance skipped over out-of-range values, so a few passes suffice.

    The table kept is a compact copy (``uint16``, ``max_index + 1`` entries,
    at most 128 KiB), not a view that would hold the 512 KiB block: shuffles
    reseed every epoch, so the cache always holds its 16 tables.
    """
    jump = _encrypt_block16(seed, rounds)
    active = np.flatnonzero(jump > max_index)
    while active.size and active[0] <= max_index:
        jumped = jump[jump[active]]
        jump[active] = jumped
        active = active[jumped > max_index]
    table = jump[: max_index + 1].astype(np.uint16)
    table.flags.writeable = False
    return table


def index_shuffle_array(
    indices: npt.ArrayLike, max_index: int, seed: int, rounds: int = 4
) -> np.ndarray:
    """Permutes every index of ``indices`` (all in ``[0, max_index]``) at once.

    Returns an ``int64`` array of the same shape.
    """
    _check_args(max_index, seed, rounds)
    values = np.asarray(indices, dtype=np.uint64)
    if max_index == 0:
        return np.zeros(values.shape, dtype=np.int64)
    bits = max(16, max_index.bit_length())
    bits += bits % 2
    if bits == 16:
        return _small_table(max_index, seed, rounds)[values].astype(np.int64)
    half = bits // 2
    keys = _keys(seed, rounds, half)
    out = _encrypt(values.ravel(), half, keys)
    limit = np.uint64(max_index)
    outside = np.flatnonzero(out > limit)
    while outside.size:
        walked = _encrypt(out[outside], half, keys)
        out[outside] = walked
        outside = outside[walked > limit]
    return out.reshape(values.shape).astype(np.int64)


@overload
def index_shuffle(index: int, max_index: int, seed: int, rounds: int) -> int: ...
@overload
def index_shuffle(
    index: npt.NDArray[np.integer], max_index: int, seed: int, rounds: int
) -> np.ndarray: ...


def index_shuffle(index, max_index, seed, rounds):
    """Returns the position of ``index`` in a pseudo-random permutation.

    The permutation of ``[0, max_index]`` is fixed by ``seed`` and ``rounds``
    (even, in ``[4, 1024]``; chute's shuffles use 4).  ``index`` may be an int
    or a numpy array of ints; arrays are permuted in one vectorised pass.

    Args:
        index: An int or a numpy array of ints in ``[0, max_index]``.
        max_index: The largest index of the permutation.
        seed: An integer in ``[0, 2**32)``.
        rounds: Cipher rounds: even, in ``[4, 1024]``.

    >>> [index_shuffle(i, max_index=99999, seed=3, rounds=4) for i in range(5)]
    [42407, 51356, 40198, 95258, 34627]
    """
    if isinstance(index, (int, np.integer)):
        _check_args(max_index, seed, rounds)
        if not 0 <= index <= max_index:
            raise ValueError(
                f"index must be in [0, max_index], but got index = {index} and max_index = "
                f"{max_index}. chute: index_shuffle: index must be in [0, max_index={max_index}] "
                f"(got {index})."
            )
        return int(index_shuffle_array(np.array([index]), max_index, seed, rounds)[0])
    return index_shuffle_array(index, max_index, seed, rounds)
