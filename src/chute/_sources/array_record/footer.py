"""ArrayRecord's index: the postscript in the last 64 KiB and the footer chunk it points to.

The facts relied on (array_record's ``cpp/layout.proto`` and its reader):

* The last 64 KiB of the file start on a block boundary with the *postscript*
  chunk: an uncompressed simple chunk whose records are (three copies of) a
  ``RiegeliPostscript`` proto, ``footer_offset = 1`` and ``magic = 2`` with
  magic ``0x71930e704fdae05e``.
* The *footer* is the simple chunk at ``footer_offset`` (compressed like the
  records).  Its first record is a ``RiegeliFooterMetadata`` whose field 1
  holds ``version = 1`` (must be 1), ``num_chunks = 2``, ``num_records = 3`` and
  ``writer_options = 4``; then one ``ArrayRecordFooter`` per record chunk:
  ``chunk_offset = 1``, ``decoded_data_size = 2``, ``num_records = 3``.
* Record chunk ``i`` spans the file from its offset to the next chunk's offset
  (the footer's offset for the last one); record ``k`` lies in the chunk whose
  running record count passes ``k``.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from chute._sources.array_record.format import (
    BLOCK_SIZE,
    ArrayRecordFormatError,
    decode_chunk,
    read_varint,
    varint_array,
)

__all__ = ["MAGIC", "Footer", "parse_footer", "parse_postscript"]

MAGIC = 0x71930E704FDAE05E
_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Footer:
    """Where the record chunks of one file lie and how many records each holds."""

    starts: np.ndarray  # file offset of each record chunk, then the footer's offset
    first_record: np.ndarray  # index of each chunk's first record, then the total
    writer_options: str
    group: int = 0  # records in every chunk but the last (which holds at most that), or 0

    @property
    def num_records(self) -> int:
        return int(self.first_record[-1])

    def spans(self, chunks: list[int]) -> tuple[list[int], list[int]]:
        """The file offsets where each of ``chunks`` begins and ends, read in one go."""
        read_pairs = getattr(self.starts, "pairs", None)  # an index's entries, read when asked
        if read_pairs is not None:
            return read_pairs(chunks)
        at = np.asarray(chunks, np.int64)
        return self.starts[at].tolist(), self.starts[at + 1].tolist()

    def chunk_records(self, c: int) -> int:
        """The records chunk ``c`` holds."""
        if self.group:
            return min(self.group, self.num_records - c * self.group)
        return int(self.first_record[c + 1] - self.first_record[c])


def uniform_group(first_record: np.ndarray) -> int:
    """Records per chunk when every chunk but the last holds the same number (else 0)."""
    counts = np.diff(first_record)
    if not len(counts) or counts[0] <= 0:
        return 0
    if (counts[:-1] == counts[0]).all() and 0 < counts[-1] <= counts[0]:
        return int(counts[0])
    return 0


def _fields(buf: bytes, where: str) -> dict[int, list[int | bytes]]:
    """The varint and length-delimited fields of a proto message, by field number."""
    out: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos, where)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = read_varint(buf, pos, where)
        elif wire == 2:
            size, pos = read_varint(buf, pos, where)
            value, pos = buf[pos : pos + size], pos + size
            if pos > len(buf):
                raise ArrayRecordFormatError(f"{where}: a proto field runs past its record.")
        elif wire in (1, 5):
            value, pos = 0, pos + (8 if wire == 1 else 4)
        else:
            raise ArrayRecordFormatError(f"{where}: unsupported proto wire type {wire}.")
        out.setdefault(number, []).append(value)
    return out


def _int(fields: dict[int, list[int | bytes]], number: int, what: str, where: str) -> int:
    values = fields.get(number)
    if not values or not isinstance(values[-1], int):
        raise ArrayRecordFormatError(f"{where}: the {what} field is missing.")
    return values[-1]


def _records(raw: bytes, begin: int, where: str) -> tuple[list[bytes], bytes, np.ndarray]:
    values, offsets = decode_chunk(raw, begin, where, verify_data=True)
    bounds = offsets.tolist()
    return [values[a:b] for a, b in itertools.pairwise(bounds)], values, offsets


def _index_fast(values: bytes, offsets: np.ndarray, where: str) -> tuple[np.ndarray, ...] | None:
    """Chunk offsets and record counts of the ``ArrayRecordFooter`` records, vectorised.

    Works when every record is the writer's usual three varint fields, each
    once, chunk_offset first; returns None otherwise (the caller parses one by one).
    """
    base = int(offsets[1])
    numbers, starts = varint_array(values[base:], where)
    if len(numbers) % 2:
        return None
    tags, fields = numbers[0::2], numbers[1::2]
    at = starts[0::2]
    record_starts = offsets[1:-1] - base
    firsts = tags == 8
    if not np.isin(tags, (8, 16, 24)).all() or not np.array_equal(at[firsts], record_starts):
        return None
    owner = np.searchsorted(record_starts, at, side="right") - 1
    counts = tags == 24
    if not np.array_equal(owner[counts], np.arange(len(record_starts))):
        return None
    if np.bincount(owner[tags == 16], minlength=len(record_starts)).max(initial=0) > 1:
        return None
    return fields[firsts], fields[counts]


def parse_postscript(tail: bytes, size: int, where: str) -> int:
    """The footer's offset, from the file's last 64 KiB (``tail``) of a file of ``size`` bytes."""
    begin = size - BLOCK_SIZE
    records = _records(tail, begin, where)[0]
    at = f"{where}: postscript at offset {begin}"
    if not records:
        raise ArrayRecordFormatError(f"{at}: it holds no records.")
    fields = _fields(records[0], at)
    if _int(fields, 2, "magic", at) != MAGIC:
        raise ArrayRecordFormatError(f"{at}: wrong magic number; this is not an ArrayRecord file.")
    offset = _int(fields, 1, "footer_offset", at)
    if not 0 < offset < begin:
        raise ArrayRecordFormatError(
            f"{at}: footer offset {offset} lies outside the file of {size} bytes."
        )
    return offset


def parse_footer(raw: bytes, offset: int, where: str) -> Footer:
    """The chunk index from the footer chunk's bytes ``raw``, which start at file ``offset``."""
    records, values, value_offsets = _records(raw, offset, where)
    at = f"{where}: footer at offset {offset}"
    if not records:
        raise ArrayRecordFormatError(f"{at}: it holds no metadata record.")
    meta_fields = _fields(records[0], at).get(1)
    if not meta_fields or not isinstance(meta_fields[-1], bytes):
        raise ArrayRecordFormatError(f"{at}: it carries no ArrayRecord metadata.")
    meta = _fields(meta_fields[-1], at)
    version = _int(meta, 1, "version", at)
    if version != _VERSION:
        raise ArrayRecordFormatError(f"{at}: ArrayRecord version {version} is not supported.")
    num_chunks = _int(meta, 2, "num_chunks", at) if 2 in meta else 0
    num_records = _int(meta, 3, "num_records", at) if 3 in meta else 0
    options = meta.get(4, [b""])[-1]
    if len(records) != num_chunks + 1:
        raise ArrayRecordFormatError(
            f"{at}: it lists {len(records) - 1} chunks, its metadata says {num_chunks}."
        )
    starts = np.empty(num_chunks + 1, np.int64)
    counts = np.empty(num_chunks, np.int64)
    fast = _index_fast(values, value_offsets, at) if num_chunks else None
    if fast is not None:
        starts[:-1], counts[:] = fast
    else:
        for i, record in enumerate(records[1:]):
            fields = _fields(record, at)
            starts[i] = _int(fields, 1, "chunk_offset", at)
            counts[i] = _int(fields, 3, "num_records", at) if 3 in fields else 0
    starts[-1] = offset
    first = np.zeros(num_chunks + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    if (np.diff(starts) <= 0).any() or (num_chunks and starts[0] < 64):
        raise ArrayRecordFormatError(f"{at}: the chunk offsets are not increasing.")
    if int(first[-1]) != num_records:
        raise ArrayRecordFormatError(
            f"{at}: the chunks hold {int(first[-1])} records, the metadata says {num_records}."
        )
    writer_options = options.decode("utf-8", "replace") if isinstance(options, bytes) else ""
    return Footer(starts, first, writer_options, uniform_group(first))
