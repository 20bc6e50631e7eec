"""CRC32C (Castagnoli), the checksum of TFRecord files, without a hard dependency.

``crc32c`` uses a C implementation when ``google-crc32c`` or ``crc32c`` is
installed.  Otherwise short inputs run a table-driven Python loop and longer
ones a vectorised numpy reduction: the CRC register update is linear over
GF(2), so the raw CRC of a block is the XOR of its pieces' raw CRCs, each
carried past the bytes that follow it by a "feed zeros" operator.  The
reduction folds 16 neighbouring pieces at a time through one table lookup
per byte, so a mebibyte takes a handful of numpy calls per level (about
100-200 MB/s, against 7-10 MB/s for the Python loop).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["crc32c", "masked_crc32c"]

_POLY = 0x82F63B78  # CRC32C, bit-reversed
_MASK_DELTA = 0xA282EAD8
_RADIX = 16  # pieces folded per level
_CHUNK = _RADIX**4  # 64 KiB pieces keep the first levels in cache
_CHUNK_LEVEL = 4
_SMALL = 128  # below this many bytes the Python loop is faster


def _byte_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = (t >> 1) ^ np.where(t & 1, np.uint32(_POLY), np.uint32(0))
    return t


_TABLE = _byte_table()
_TABLE_LIST: list[int] = _TABLE.tolist()
_BYTES = np.arange(256, dtype=np.uint32)
# A linear map of 32-bit words is kept as 4 tables: its value on each byte of the word.
_IDENTITY = np.stack([_BYTES << (8 * b) for b in range(4)])
_ZERO_BYTE = np.stack([_TABLE] + [_BYTES << (8 * (b - 1)) for b in range(1, 4)])
_OFFSETS = {n: np.arange(n, dtype=np.intp) * 256 for n in (_RADIX, 4 * _RADIX)}


def _apply(op: np.ndarray, x: np.ndarray) -> np.ndarray:
    return op[0][x & 0xFF] ^ op[1][(x >> 8) & 0xFF] ^ op[2][(x >> 16) & 0xFF] ^ op[3][x >> 24]


@functools.cache
def _zeros(level: int) -> tuple[np.ndarray, ...]:
    """The operators that feed ``j * 16**level`` zero bytes, for ``j`` in 0..16."""
    step = _ZERO_BYTE if level == 0 else _zeros(level - 1)[_RADIX]
    ops = [_IDENTITY]
    for _ in range(_RADIX):
        ops.append(_apply(step, ops[-1]))
    return tuple(ops)


@functools.cache
def _fold_table(level: int) -> np.ndarray:
    """Lookups for one fold: byte ``p`` of a group of 16 pieces, flattened."""
    ops = _zeros(level)
    if level == 0:  # the pieces are data bytes; byte p has 15 - p bytes after it
        return np.concatenate([_apply(ops[_RADIX - 1 - p], _TABLE) for p in range(_RADIX)])
    return np.concatenate([ops[_RADIX - 1 - j].reshape(-1) for j in range(_RADIX)])


@functools.cache
def _zeros_list(level: int, count: int) -> list[list[int]]:
    return _zeros(level)[count].tolist()


def _front_pad(a: np.ndarray, multiple: int) -> np.ndarray:
    """Leading zeros leave a raw CRC unchanged, so groups may be padded in front."""
    pad = (-len(a)) % multiple
    return np.concatenate([np.zeros(pad, a.dtype), a]) if pad else a


def _fold(pieces: np.ndarray, level: int) -> int:
    """Folds raw CRCs of equal-length pieces (``16**level`` bytes) into one."""
    while len(pieces) > 1:
        group = _front_pad(pieces, _RADIX).view(np.uint8).reshape(-1, 4 * _RADIX)
        pieces = np.bitwise_xor.reduce(_fold_table(level)[group + _OFFSETS[4 * _RADIX]], axis=1)
        level += 1
    return int(pieces[0])


def _raw_numpy(data: np.ndarray) -> int:
    """The CRC register after ``data`` from zero, with no final inversion."""
    if len(data) > _CHUNK:
        first = len(data) % _CHUNK
        parts = [data[:first]] if first else []
        parts += [data[i : i + _CHUNK] for i in range(first, len(data), _CHUNK)]
        return _fold(np.array([_raw_numpy(p) for p in parts], dtype=np.uint32), _CHUNK_LEVEL)
    group = _front_pad(data, _RADIX).reshape(-1, _RADIX)
    return _fold(np.bitwise_xor.reduce(_fold_table(0)[group + _OFFSETS[_RADIX]], axis=1), 1)


def _numpy_crc32c(data: Any) -> int:
    raw = _raw_numpy(np.frombuffer(data, dtype=np.uint8))
    # The initial 0xFFFFFFFF, carried past len(data) bytes (digit by digit in base 16).
    init, n, level = 0xFFFFFFFF, memoryview(data).nbytes, 0
    while n:
        n, digit = divmod(n, _RADIX)
        if digit:
            t = _zeros_list(level, digit)
            init = (
                t[0][init & 0xFF]
                ^ t[1][(init >> 8) & 0xFF]
                ^ t[2][(init >> 16) & 0xFF]
                ^ t[3][init >> 24]
            )
        level += 1
    return raw ^ init ^ 0xFFFFFFFF


def _python_crc32c(data: Any) -> int:
    crc, table = 0xFFFFFFFF, _TABLE_LIST
    for b in memoryview(data).cast("B"):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _portable_crc32c(data: Any) -> int:
    if memoryview(data).nbytes < _SMALL:
        return _python_crc32c(data)
    return _numpy_crc32c(data)


def _native() -> Callable[[Any], int] | None:
    """A C implementation from an installed package, if there is one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # crc32c warns when it runs in software mode
        try:
            import crc32c as crc32c_package

            return crc32c_package.crc32c
        except (ImportError, AttributeError):
            pass
        try:
            import google_crc32c
        except ImportError:
            return None
    if getattr(google_crc32c, "implementation", "") != "c":
        return None
    value = google_crc32c.value  # takes bytes only, not other buffers
    return lambda data: value(data if type(data) is bytes else bytes(data))


_NATIVE = _native()


def crc32c(data: Any) -> int:
    """The CRC32C of a bytes-like object.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    return _NATIVE(data) if _NATIVE is not None else _portable_crc32c(data)


def masked_crc32c(data: Any) -> int:
    """The masked CRC32C that TFRecord files store: rotated right 15 bits, plus a constant.

    >>> hex(masked_crc32c(b""))
    '0xa282ead8'
    """
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
