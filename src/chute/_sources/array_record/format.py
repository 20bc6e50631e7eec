"""Riegeli's byte layout, as ArrayRecord files use it, parsed from bytes in memory.

The facts relied on (Riegeli's ``doc/riegeli_records_file_format.md``):

* A file is a sequence of *chunks*, interrupted at every multiple of 64 KiB by
  a 24-byte *block header*: ``header_hash``, ``previous_chunk`` (distance from
  the interrupted chunk's beginning back to the block) and ``next_chunk``.  A
  chunk that starts exactly on a block boundary formally begins there, before
  the block header.
* A chunk is a 40-byte header (``header_hash`` over the next 32 bytes,
  ``data_size``, ``data_hash``, one byte of ``chunk_type`` and 7 of
  ``num_records``, ``decoded_data_size``), then ``data_size`` bytes of data,
  then padding.  Integers are little-endian; hashes are HighwayHash-64 with the
  key ``'Riegeli/records\\n'`` twice.
* A *simple* chunk (type ``'r'``) holds a compression byte (0, ``'b'`` Brotli,
  ``'z'`` Zstd, ``'s'`` Snappy), a varint size of the compressed record sizes,
  the compressed sizes (one varint per record) and the compressed values.  A
  compressed buffer starts with its decompressed size as a varint (for Snappy
  the raw, unframed format follows; checked against files array_record wrote).

Everything is checked, as array_record's own reader does: block and chunk header
hashes, each block header's distance back to its chunk, the hash of each chunk's
data, sizes against the bytes present, decompressed sizes, record sizes against
``decoded_data_size``.  ``decode_chunks`` decodes a batch of chunks and hashes all
their headers in one call, then all their data in another (``checksums``: compiled
where built, else NumPy in lock-step); ``verify_data=False`` skips the data hashes.
Failures raise ``ArrayRecordFormatError`` naming the file and the offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chute._sources.checksums import hash_ranges

__all__ = [
    "BLOCK_SIZE",
    "ArrayRecordFormatError",
    "DecodedChunk",
    "decode_chunk",
    "decode_chunks",
    "read_varint",
    "varint_array",
]

BLOCK_SIZE = 1 << 16
BLOCK_HEADER_SIZE = 24
CHUNK_HEADER_SIZE = 40
_SIMPLE, _TRANSPOSED = ord("r"), ord("t")
_EXTRA = "chute[remote]"


class ArrayRecordFormatError(ValueError):
    """Bytes that are not a valid ArrayRecord file: truncated, corrupted or unsupported.

    A plain ``ValueError`` subclass for now; once the reader is public it joins
    chute's exception tree (``chute._core.errors``), which every export must list.
    """


DecodedChunk = tuple[bytes, np.ndarray]
"""A chunk's concatenated record values and the ``num_records + 1`` offsets into them."""


def read_varint(buf: bytes | memoryview, pos: int, where: str) -> tuple[int, int]:
    """The unsigned LEB128 varint at ``buf[pos]`` and the position after it."""
    value = shift = 0
    while pos < len(buf) and shift < 64:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ArrayRecordFormatError(f"{where}: a varint runs past its buffer or over 64 bits.")


def varint_array(buf: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Every varint filling ``buf``, decoded with numpy, and the byte where each starts."""
    b = np.frombuffer(buf, np.uint8)
    ends = np.flatnonzero(b < 0x80)
    if len(b) and (not len(ends) or ends[-1] != len(b) - 1):
        raise ArrayRecordFormatError(f"{where}: the last varint is cut short.")
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    lengths = ends - starts + 1
    if len(ends) and lengths.max() > 9:
        raise ArrayRecordFormatError(f"{where}: a varint is larger than 2**63.")
    out = np.zeros(len(ends), np.uint64)
    for k in range(int(lengths.max()) if len(ends) else 0):
        has = lengths > k
        part = (b[starts[has] + k] & 0x7F).astype(np.uint64)
        out[has] |= part << np.uint64(7 * k)
    return out.astype(np.int64), starts


def _sizes(buf: bytes, count: int, where: str) -> np.ndarray:
    """The ``count`` record sizes that fill ``buf`` exactly."""
    if count <= 8:  # numpy's fixed cost outweighs a short loop
        sizes, pos = [], 0
        for _ in range(count):
            size, pos = read_varint(buf, pos, where)
            sizes.append(size)
        if pos != len(buf) or max(sizes, default=0) >= 1 << 63:
            raise ArrayRecordFormatError(
                f"{where}: the record sizes do not fill their {len(buf)} bytes."
            )
        return np.array(sizes, np.int64)
    sizes_array = varint_array(buf, where)[0]
    if len(sizes_array) != count:
        raise ArrayRecordFormatError(
            f"{where}: the record sizes hold {len(sizes_array)} varints, expected {count}."
        )
    return sizes_array


def _codec(kind: int) -> Callable[[bytes], Any]:
    try:
        import cramjam
    except ImportError as exc:
        raise ImportError(
            f"Reading compressed ArrayRecord chunks needs cramjam: pip install {_EXTRA}"
        ) from exc
    codecs = {
        ord("b"): cramjam.brotli.decompress,
        ord("z"): cramjam.zstd.decompress,
        ord("s"): cramjam.snappy.decompress_raw,
    }
    return codecs[kind]


def _decompress(kind: int, buf: memoryview, where: str) -> bytes:
    if kind == 0:
        return bytes(buf)
    size, pos = read_varint(buf, 0, where)
    try:
        out = bytes(_codec(kind)(bytes(buf[pos:])))
    except ImportError:
        raise
    except Exception as exc:  # each codec raises its own type
        raise ArrayRecordFormatError(f"{where}: cannot decompress ({exc}).") from exc
    if len(out) != size:
        raise ArrayRecordFormatError(
            f"{where}: decompressed to {len(out)} bytes, the chunk says {size}."
        )
    return out


def _strip_block_headers(raw: bytes, begin: int, where: str, headers: list[bytes]) -> bytes:
    """The bytes of the chunk at file offset ``begin`` without block headers.

    Each block header is checked for its distance back to the chunk and appended to
    ``headers`` for the caller to check its hash.
    """
    first = -(-begin // BLOCK_SIZE) * BLOCK_SIZE
    if first >= begin + len(raw):
        return raw
    pieces, pos = [], 0
    for block in range(first, begin + len(raw), BLOCK_SIZE):
        at = block - begin
        pieces.append(raw[pos:at])
        header = raw[at : at + BLOCK_HEADER_SIZE]
        if len(header) < BLOCK_HEADER_SIZE:
            raise ArrayRecordFormatError(f"{where}: the block header at {block} is cut short.")
        if struct.unpack_from("<Q", header, 8)[0] != block - begin:
            raise ArrayRecordFormatError(
                f"{where}: the block header at offset {block} is corrupted "
                "(its distance back to the chunk does not match)."
            )
        headers.append(header)
        pos = at + BLOCK_HEADER_SIZE
    pieces.append(raw[pos:])
    return b"".join(pieces)


def _first_bad(buffers: list[bytes], begin: int, lengths: np.ndarray, expected: np.ndarray,
               skip: np.ndarray | None = None) -> int | None:  # fmt: skip
    """The position of the first of ``buffers`` whose bytes ``begin : begin + length`` do
    not hash to ``expected`` (``skip`` marks those not to judge), or ``None``; all hashed
    in one call."""
    if not buffers:
        return None
    wrong = hash_ranges(buffers, begin, lengths) != expected
    bad = np.flatnonzero(wrong if skip is None else wrong & ~skip)
    return int(bad[0]) if len(bad) else None


def _first_bad_data(stripped: list[bytes], heads: np.ndarray) -> int | None:
    """The position of the first chunk whose data does not hash to its header's
    ``data_hash``; a chunk whose data is cut short is left to ``_decode_body`` to report."""
    present = np.array([len(d) - CHUNK_HEADER_SIZE for d in stripped], np.uint64)
    short = heads[:, 1] > present
    lengths = np.where(short, 0, heads[:, 1]).astype(np.int64)
    return _first_bad(stripped, CHUNK_HEADER_SIZE, lengths, heads[:, 2], short)


def decode_chunk(
    raw: bytes, begin: int, where: str, *, verify_data: bool = True, records: int | None = None
) -> DecodedChunk:
    """The records of the simple chunk whose bytes (block headers included) start at ``begin``.

    ``where`` names the file in errors; ``records``, when given, is the number
    of records the footer promised for this chunk; ``verify_data=False`` skips the
    hash of the chunk's data (its headers' hashes are always checked).
    """
    return decode_chunks([(raw, begin, records)], where, verify_data=verify_data)[0]


def decode_chunks(
    chunks: Sequence[tuple[bytes, int, int | None]],
    where: str | Sequence[str],
    *,
    verify_data: bool = True,
) -> list[DecodedChunk]:
    """``decode_chunk`` for each ``(raw, begin, records)``, their header hashes checked at once.

    ``where`` names the file of every chunk, or of each chunk (chunks of several files).
    """
    names = [where] * len(chunks) if isinstance(where, str) else list(where)
    blocks: list[bytes] = []
    owners: list[int] = []  # the chunk of each block header
    stripped = []
    for k, (raw, begin, _) in enumerate(chunks):
        data = _strip_block_headers(raw, begin, f"{names[k]}: chunk at offset {begin}", blocks)
        owners += [k] * (len(blocks) - len(owners))
        if len(data) < CHUNK_HEADER_SIZE:
            raise ArrayRecordFormatError(
                f"{names[k]}: chunk at offset {begin}: the chunk header is cut short "
                "(file truncated?)."
            )
        stripped.append(data)
    block_hashes = np.frombuffer(b"".join(blocks), "<u8")[::3]
    bad = _first_bad(blocks, 8, np.full(len(blocks), BLOCK_HEADER_SIZE - 8), block_hashes)
    if bad is not None:
        k = owners[bad]
        raise ArrayRecordFormatError(
            f"{names[k]}: chunk at offset {chunks[k][1]}: a block header inside it is "
            "corrupted (hash mismatch)."
        )
    # Each header: header_hash, data_size, data_hash, chunk type and records, decoded size.
    heads = np.frombuffer(b"".join([d[:CHUNK_HEADER_SIZE] for d in stripped]), "<u8")
    heads = heads.reshape(len(stripped), 5)
    bad = _first_bad(stripped, 8, np.full(len(stripped), CHUNK_HEADER_SIZE - 8), heads[:, 0])
    if bad is not None:
        raise ArrayRecordFormatError(
            f"{names[bad]}: chunk at offset {chunks[bad][1]}: the chunk header is corrupted "
            "(hash mismatch)."
        )
    bad = _first_bad_data(stripped, heads) if verify_data else None
    if bad is not None:
        count = int(heads[bad, 3]) >> 8
        raise ArrayRecordFormatError(
            f"{names[bad]}: chunk at offset {chunks[bad][1]}: the chunk data is corrupted "
            f"(its hash does not match), so none of its {count} records is returned. The "
            "file is damaged: restore it from a good copy or write it again."
        )
    return [
        _decode_body(data, f"{name}: chunk at offset {begin}", records)
        for data, (_, begin, records), name in zip(stripped, chunks, names)
    ]


def _decode_body(data: bytes, where: str, records: int | None) -> DecodedChunk:
    """The records of a chunk whose header (and data, where asked) hashes were checked."""
    _, size, _, type_and_count, decoded_size = struct.unpack_from("<5Q", data)
    kind, count = type_and_count & 0xFF, type_and_count >> 8
    body = memoryview(data)[CHUNK_HEADER_SIZE : CHUNK_HEADER_SIZE + size]
    if len(body) != size:
        raise ArrayRecordFormatError(
            f"{where}: the chunk holds {size} bytes of data but only {len(body)} are present "
            "(file truncated?)."
        )
    if kind == _TRANSPOSED:
        raise ArrayRecordFormatError(
            f"{where}: transposed chunks (written with the 'transpose' option) are not "
            "supported; read the file with array_record's ArrayRecordReader, or rewrite it "
            "without 'transpose'."
        )
    if kind != _SIMPLE or (records is not None and count != records):
        raise ArrayRecordFormatError(
            f"{where}: expected a record chunk of {records} records, found chunk type "
            f"{chr(kind)!r} with {count} records."
        )
    return _decode_simple(body, count, decoded_size, where)


def _decode_simple(body: memoryview, count: int, decoded_size: int, where: str) -> DecodedChunk:
    if not body:
        raise ArrayRecordFormatError(f"{where}: the chunk data is empty.")
    kind = body[0]
    if kind not in (0, ord("b"), ord("z"), ord("s")):
        raise ArrayRecordFormatError(f"{where}: unknown compression type {kind}.")
    sizes_len, pos = read_varint(body, 1, where)
    if pos + sizes_len > len(body):
        raise ArrayRecordFormatError(f"{where}: the record sizes run past the chunk data.")
    sizes = _sizes(_decompress(kind, body[pos : pos + sizes_len], where), count, where)
    values = _decompress(kind, body[pos + sizes_len :], where)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if len(values) != decoded_size or int(offsets[-1]) != decoded_size:
        raise ArrayRecordFormatError(
            f"{where}: the records add up to {int(offsets[-1])} bytes and the values hold "
            f"{len(values)}, the chunk header says {decoded_size}."
        )
    return values, offsets
