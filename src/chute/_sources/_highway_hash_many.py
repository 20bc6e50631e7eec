"""HighwayHash-64, the checksum of Riegeli block headers, chunk headers and chunk data,
of many inputs at once, vectorised with NumPy; ``checksums`` calls it where the compiled
extension (``_highway_hash_c``) is not built.

Written from the algorithm's description: four 64-bit lanes in each of ``v0``,
``v1``, ``mul0`` and ``mul1``; each 32-byte packet is added into ``v1`` and mixed
by 32x32->64-bit multiplications and a byte "zipper merge"; a last partial packet
is padded in a fixed pattern; four permuting rounds finish.  Riegeli keys it with
``'Riegeli/records\\n'`` twice.

Every 64-bit lane is held as a NumPy ``uint64`` array over the inputs, so hashing
the headers of a batch of chunks (a block header's 16 bytes, a chunk header's 32)
costs a few hundred array operations instead of a Python loop per header: about
0.5 us a header for a batch of 256, against 25 us for each in pure Python.  ``uint64`` arithmetic
wraps modulo 2**64 as the algorithm wants, and a 32x32-bit product fits.

``highway_hash64_each`` hashes inputs of any lengths (the data of a batch's
chunks) in lock-step: the inputs sorted longest first, packet ``p`` of every
input that has one is mixed in by one set of array operations over the prefix
of the state that those inputs hold.  Its cost is set by the longest input, so
it pays where many inputs of similar lengths come together.  The tests check both
against a scalar reference written apart (``tests/sources/highway_hash_reference.py``).

>>> rows = np.frombuffer(bytes(range(64)), np.uint8).reshape(4, 16)
>>> highway_hash64_many(rows).tolist() == highway_hash64_each([bytes(r) for r in rows])
True
>>> hex(highway_hash64_each([b""])[0])
'0x72c3b1e9c0139fe1'
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["RIEGELI_KEY", "highway_hash64_each", "highway_hash64_many"]

RIEGELI_KEY = (0x2F696C6567656952, 0x0A7364726F636572, 0x2F696C6567656952, 0x0A7364726F636572)
_INIT0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
_INIT1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)
_M = 0xFFFFFFFFFFFFFFFF
_U = np.uint64
_LOW = _U(0xFFFFFFFF)
_S32 = _U(32)


def _zip0(v1: int, v0: int) -> int:
    """The zipper merge added into the even lane of a pair, on two words."""
    return (
        (((v0 & 0xFF000000) | (v1 & 0xFF00000000)) >> 24)
        | (((v0 & 0xFF0000000000) | (v1 & 0xFF000000000000)) >> 16)
        | (v0 & 0xFF0000)
        | ((v0 & 0xFF00) << 32)
        | ((v1 & 0xFF00000000000000) >> 8)
        | ((v0 << 56) & _M)
    )


def _zip1(v1: int, v0: int) -> int:
    """The zipper merge added into the odd lane of a pair, on two words."""
    return (
        (((v1 & 0xFF000000) | (v0 & 0xFF00000000)) >> 24)
        | (v1 & 0xFF0000)
        | ((v1 & 0xFF0000000000) >> 16)
        | ((v1 & 0xFF00) << 24)
        | ((v0 & 0xFF000000000000) >> 8)
        | ((v1 & 0xFF) << 48)
        | (v0 & 0xFF00000000000000)
    )


def _zipper_permutation() -> np.ndarray:
    """The zipper merge as a byte shuffle of a row's 32 state bytes, read off the scalar one.

    Lanes 0-1 and 2-3 each merge as a pair: output byte ``j`` of a pair is input byte
    ``perm[j]`` of the same pair, found by merging words whose bytes are 0..15.
    """
    x0 = int.from_bytes(bytes(range(8)), "little")
    x1 = int.from_bytes(bytes(range(8, 16)), "little")
    pair = _zip0(x1, x0).to_bytes(8, "little") + _zip1(x1, x0).to_bytes(8, "little")
    perm = np.frombuffer(pair, np.uint8).astype(np.intp)
    if sorted(perm.tolist()) != list(range(16)):  # pragma: no cover
        raise ImportError("chute's HighwayHash zipper merge is not a byte permutation")
    return np.concatenate([perm, perm + 16])


_ZIPPER = _zipper_permutation()


def _zipper(x: np.ndarray) -> np.ndarray:
    """The zipper merge of every row (N x 4 words, C order)."""
    return np.take(x.view(np.uint8), _ZIPPER, axis=1).view(_U)


def _update(s: list[np.ndarray], lanes: np.ndarray) -> None:
    """One packet per input (``lanes``: N x 4 words) mixed into the state ``s``."""
    v0, v1, mul0, mul1 = s
    a = v1 + mul0 + lanes
    mul0 ^= (a & _LOW) * (v0 >> _S32)
    b = v0 + mul1
    mul1 ^= (b & _LOW) * (a >> _S32)
    b += _zipper(a)
    a += _zipper(b)
    s[0], s[1] = b, a


def _mix_into(s: list[np.ndarray], lanes: np.ndarray, tmp: np.ndarray) -> None:
    """``_update`` in place, on views (the prefix of the state still being hashed)."""
    v0, v1, mul0, mul1 = s
    v1 += mul0
    v1 += lanes
    np.bitwise_and(v1, _LOW, out=tmp)
    tmp *= v0 >> _S32
    mul0 ^= tmp
    v0 += mul1
    np.bitwise_and(v0, _LOW, out=tmp)
    tmp *= v1 >> _S32
    mul1 ^= tmp
    v0 += _zipper(v1)
    v1 += _zipper(v0)


def _swap(x: np.ndarray) -> np.ndarray:
    return (x >> _S32) | (x << _S32)


def _rot32(x: np.ndarray, n: int) -> np.ndarray:
    """Each 32-bit half of every word rotated left by ``n`` (0 < n < 32)."""
    lo, hi = x & _LOW, x >> _S32
    lo = ((lo << _U(n)) | (lo >> _U(32 - n))) & _LOW
    hi = ((hi << _U(n)) | (hi >> _U(32 - n))) & _LOW
    return (hi << _S32) | lo


def _rot32_each(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Each 32-bit half of row ``r`` of ``x`` rotated left by ``n[r]`` (0 < n < 32)."""
    left, right = n.astype(_U)[:, None], (32 - n).astype(_U)[:, None]
    lo, hi = x & _LOW, x >> _S32
    lo = ((lo << left) | (lo >> right)) & _LOW
    hi = ((hi << left) | (hi >> right)) & _LOW
    return (hi << _S32) | lo


def _tail_columns(rest: int) -> list[tuple[int, int]]:
    """``(packet byte, tail byte)`` pairs that pad a last packet of ``rest`` bytes."""
    whole, mod4 = rest & ~3, rest & 3
    pairs = [(i, i) for i in range(whole)]
    if rest & 16:
        pairs += [(28 + j, whole + mod4 - 4 + j) for j in range(4)]
    elif mod4:
        pairs += [(16, whole), (17, whole + (mod4 >> 1)), (18, whole + mod4 - 1)]
    return pairs


def _tail_table() -> np.ndarray:
    """Row ``rest``: the tail byte each byte of the padded last packet takes (-1: zero)."""
    table = np.full((32, 32), -1, np.int64)
    for rest in range(1, 32):
        for to, frm in _tail_columns(rest):
            table[rest, to] = frm
    return table


_TAIL = _tail_table()


def _initial_state(n: int, key: tuple[int, ...]) -> list[np.ndarray]:
    keys = np.array(key, _U)[None, :]
    init0, init1 = np.array(_INIT0, _U)[None, :], np.array(_INIT1, _U)[None, :]
    return [
        np.repeat(init0 ^ keys, n, axis=0),
        np.repeat(init1 ^ _swap(keys), n, axis=0),
        np.repeat(init0, n, axis=0),
        np.repeat(init1, n, axis=0),
    ]


def _finish(s: list[np.ndarray]) -> np.ndarray:
    for _ in range(4):
        _update(s, _swap(s[0][:, [2, 3, 0, 1]]))
    return s[0][:, 0] + s[1][:, 0] + s[2][:, 0] + s[3][:, 0]


def highway_hash64_each(
    messages: Sequence[bytes | memoryview], key: tuple[int, ...] = RIEGELI_KEY
) -> list[int]:
    """The 64-bit HighwayHash of each of ``messages`` (bytes-like, any lengths) under ``key``.

    >>> messages = [bytes(range(n)) for n in (0, 5, 40, 100, 33)]
    >>> highway_hash64_each(messages) == [highway_hash64_each([m])[0] for m in messages]
    True
    """
    n = len(messages)
    lengths = np.array([memoryview(m).nbytes for m in messages], np.int64)
    packets = lengths // 32
    order = np.argsort(-packets, kind="stable")  # longest first: the active ones a prefix
    padded = -(-lengths[order] // 32) * 32
    parts: list[Any] = []
    for i, pad in zip(order.tolist(), (padded - lengths[order]).tolist()):
        parts += (messages[i], bytes(pad))
    flat = np.frombuffer(b"".join(parts), np.uint8)
    starts = np.concatenate(([0], np.cumsum(padded)[:-1])).astype(np.int64)
    s = _initial_state(n, key)
    words, tmp = flat.view("<u8"), np.empty((n, 4), _U)
    lanes = (starts // 8)[:, None] + np.arange(4)
    sorted_packets = packets[order]
    active = n - np.cumsum(np.bincount(sorted_packets, minlength=1))
    for p in range(int(sorted_packets[0]) if n else 0):
        k = int(active[p])
        _mix_into([x[:k] for x in s], words[lanes[:k] + 4 * p], tmp[:k])
    _mix_tails(s, flat, starts + 32 * sorted_packets, lengths[order] % 32)
    out = np.empty(n, _U)
    out[order] = _finish(s) if n else out
    return out.tolist()


def _mix_tails(s: list[np.ndarray], flat: np.ndarray, at: np.ndarray, rest: np.ndarray) -> None:
    """Mixes into ``s`` the last partial packet of each input that has one."""
    rows = np.flatnonzero(rest)
    if not len(rows):
        return
    table = _TAIL[rest[rows]]
    packet = np.where(table >= 0, flat[np.where(table >= 0, at[rows, None] + table, 0)], 0)
    sub = [x[rows] for x in s]
    sub[0] += ((rest[rows].astype(_U) << _S32) + rest[rows].astype(_U))[:, None]
    sub[1] = _rot32_each(sub[1], rest[rows])
    _update(sub, np.ascontiguousarray(packet, np.uint8).view("<u8").astype(_U))
    for x, y in zip(s, sub):
        x[rows] = y


def highway_hash64_many(data: np.ndarray, key: tuple[int, ...] = RIEGELI_KEY) -> np.ndarray:
    """The 64-bit HighwayHash of each row of ``data`` (``uint8``, N x length) under ``key``."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if data.ndim != 2:
        raise ValueError(f"data must be a 2-D uint8 array, one input a row (got {data.shape}).")
    n, length = data.shape
    s = _initial_state(n, key)
    full = length - length % 32
    if full:
        words = np.ascontiguousarray(data[:, :full]).view("<u8").astype(_U)  # N x (full / 8)
        for p in range(0, full // 8, 4):
            _update(s, words[:, p : p + 4])
    rest = length - full
    if rest:
        s[0] = s[0] + _U((rest << 32) + rest)
        s[1] = _rot32(s[1], rest)
        packet = np.zeros((n, 32), np.uint8)
        for to, frm in _tail_columns(rest):
            packet[:, to] = data[:, full + frm]
        _update(s, packet.view("<u8").astype(_U))
    return _finish(s)


if sys.byteorder != "little":  # pragma: no cover - the zipper merge permutes the host's bytes
    raise ImportError("chute's HighwayHash reads words in the host's order: little-endian only")
