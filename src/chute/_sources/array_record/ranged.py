"""``RangedArrayRecordReader``: ArrayRecord records read from any ``RangedByteSource``.

array_record's own reader only opens local files.  This one needs only
``size()`` and ``read_ranges()`` (``chute._remote.ranged_source``), so the
same code reads a local file (``LocalRanges``) or an object in a bucket.

* **Opening** reads the file's last 256 KiB in one ranged read: the postscript
  (last 64 KiB) and, for files of up to some 25,000 chunks, the footer with
  every chunk's offset.  A larger footer takes a second read.
* **A batch of indices** maps to its chunks; the chunks not in the cache are
  merged into as few ranges as possible (chunks at most ``merge_gap_bytes``
  apart join one range, up to ``max_range_bytes`` per range) and fetched in
  **one** ``read_ranges`` call, which a remote source serves concurrently.
  Each chunk is checked and decompressed once per batch, then kept in an LRU
  cache of decoded records (``chunk_cache``): the reader's own, bounded by
  ``cache_bytes``, or one that the shards of a source share; the chunk a read
  ended in stays even when it exceeds the bound, so reading a file of large
  chunks in order fetches each chunk once.
* **Checks**, as array_record's own reader makes them: every block and chunk
  header's hash, every record chunk's data hash, sizes and decompressed lengths
  (``format``); the footer's data hash on open.  The data hashes
  of a batch's chunks are computed in one call (``checksums``: a compiled
  extension where built, 11 GB/s for one chunk and 17 for a batch with AVX2;
  else NumPy in lock-step over the chunks, 150-350 MB/s).  ``verify_data=False``
  skips them, and then a flipped byte inside an *uncompressed* chunk's values
  goes unnoticed.  Errors are ``ArrayRecordFormatError`` (a ``ValueError``)
  naming the file and the offset.

Measured once by hand on a 2-core machine, a local file of 200,000 records
of 1 KiB, random sorted batches of 256, cache off (records/s):

=========================  ===========  ===============  ======  ===========
file                       array_record array_record     ranged  ranged,
                           read(list)   read(k, k+1)              verify_data
=========================  ===========  ===============  ======  ===========
uncompressed, group_size:1   68,000       470,000        18,000    4,100
zstd, group_size:1           77,000       340,000        10,000    4,700
zstd, group_size:100         38,000        37,000         5,300      130
=========================  ===========  ===============  ======  ===========

Its last column hashed chunk data in pure Python (compiled now, see Checks),
and opening took 0.5 s (uncompressed) and 0.2 s (zstd) for the 200,000-chunk
files, mostly the footer's data hash, in pure Python too.  The table was
measured when each header was hashed alone in Python, about half the cost per
chunk; a batch's headers are now hashed in one vectorised call (``checksums``), which with
index entries read in one call per batch made shuffled reads of a set opened
from its index 1.7x faster for 1 KiB records and 2.4x for 64 KiB (one A/B run on
a busy machine).  Over a network, the one concurrent ``read_ranges`` per batch
dominates instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from chute._core.validate import check_int
from chute._remote.ranged_object import merge_ranges
from chute._remote.ranged_source import RangedByteSource
from chute._sources.array_record.chunk_cache import Chunk, ChunkCache
from chute._sources.array_record.footer import Footer, parse_footer, parse_postscript
from chute._sources.array_record.format import (
    BLOCK_SIZE,
    ArrayRecordFormatError,
    DecodedChunk,
    decode_chunks,
)
from chute._sources.protocol import check_indices

__all__ = ["PendingRead", "RangedArrayRecordReader"]

_WHAT = "RangedArrayRecordReader"
_TAIL = 4 * BLOCK_SIZE


@dataclasses.dataclass
class PendingRead:
    """A read that ``RangedArrayRecordReader.begin`` planned.

    Args:
      chunk_of, local: for each index asked, its chunk and its place in the chunk.
      found: the chunks the cache held.
      plan: the ranges to fetch, ``(begin, end, [(chunk, begin, end), ...])``.
    """

    chunk_of: list[int]
    local: list[int]
    found: dict[int, Chunk]
    plan: list[tuple[int, int, list[tuple[int, int, int]]]]

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of each range to fetch."""
        return [(b, e - b) for b, e, _ in self.plan]

    @property
    def chunks_fetched(self) -> list[int]:
        """The chunks the ranges hold, in order."""
        return [c for _, _, group in self.plan for c, _, _ in group]


class RangedArrayRecordReader:
    """Random access to the records of one ArrayRecord file on a ranged byte source.

    Args:
      source: a ``RangedByteSource`` (``LocalRanges(path)``, or an object store's).
      cache_bytes: bound on the decoded chunks kept between calls (0 keeps none),
        beyond the chunk the last read ended in.
      max_range_bytes: largest range that merged chunks may form (a bigger chunk
        is read alone, whole).
      merge_gap_bytes: chunks at most this far apart are read as one range.
      verify_data: check each record chunk's data hash (on by default, as in
        array_record's reader; ``False`` skips it).
      footer: the file's chunk index when it is known already (from a data-set
        index, ``index``): the file's own footer is then not read.
      cache: a ``ChunkCache`` shared with other readers (``cache_bytes`` is then
        not used), in which this file's chunks are ``cache_key``'s.
      cache_key: what tells this file's chunks apart in a shared ``cache``.

    Records come back byte for byte as array_record's ``ArrayRecordReader``
    returns them; files written with ``transpose`` are refused.
    """

    def __init__(
        self,
        source: RangedByteSource,
        *,
        cache_bytes: int = 64 << 20,
        max_range_bytes: int = 8 << 20,
        merge_gap_bytes: int = 64 << 10,
        verify_data: bool = True,
        footer: Footer | None = None,
        cache: ChunkCache | None = None,
        cache_key: Hashable = 0,
    ) -> None:
        if not isinstance(source, RangedByteSource):
            raise TypeError(
                f"{_WHAT}: source must have size() and read_ranges(ranges) (got "
                f"{source!r} that is a {type(source).__name__}); wrap a local path in "
                "LocalRanges(path)."
            )
        self._cache_bytes = check_int(cache_bytes, f"{_WHAT}: cache_bytes", minimum=0)
        self._max_range = check_int(max_range_bytes, f"{_WHAT}: max_range_bytes", minimum=1)
        self._gap = check_int(merge_gap_bytes, f"{_WHAT}: merge_gap_bytes", minimum=0)
        self._verify = bool(verify_data)
        self._shared_cache, self._cache_key = cache, cache_key
        self._source = source
        self._name = str(source)
        self._footer = footer if footer is not None else self._read_footer()
        if "transpose:true" in self._footer.writer_options.split(","):
            raise ArrayRecordFormatError(
                f"{self._name}: written with 'transpose:true', whose chunks {_WHAT} cannot "
                "decode; read it with array_record's ArrayRecordReader, or rewrite it "
                "without 'transpose'."
            )
        self._init_cache()

    def _init_cache(self) -> None:
        shared = self._shared_cache
        self._cache = shared if shared is not None else ChunkCache(self._cache_bytes)

    def _read(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        got = self._source.read_ranges(ranges)
        self._check(ranges, got)
        return got

    def _check(self, ranges: list[tuple[int, int]], got: list[bytes]) -> None:
        """Raises unless ``got`` holds one buffer of the asked length per range."""
        if len(got) != len(ranges):
            raise ArrayRecordFormatError(
                f"{self._name}: read_ranges returned {len(got)} buffers for {len(ranges)} ranges."
            )
        for (offset, length), data in zip(ranges, got):
            if len(data) != length:
                raise ArrayRecordFormatError(
                    f"{self._name}: reading {length} bytes at offset {offset} gave "
                    f"{len(data)} (file truncated or changed?)."
                )

    def _read_footer(self) -> Footer:
        size = self._source.size()
        if size < BLOCK_SIZE:
            raise ArrayRecordFormatError(
                f"{self._name}: {size} bytes is too short for an ArrayRecord file (the "
                f"postscript alone takes the last {BLOCK_SIZE}); file truncated?"
            )
        tail_at = max(0, size - _TAIL)
        (tail,) = self._read([(tail_at, size - tail_at)])
        end = size - BLOCK_SIZE
        footer_at = parse_postscript(tail[end - tail_at :], size, self._name)
        if footer_at >= tail_at:
            raw = tail[footer_at - tail_at : end - tail_at]
        else:
            (raw,) = self._read([(footer_at, end - footer_at)])
        return parse_footer(raw, footer_at, self._name)

    def __len__(self) -> int:
        return self._footer.num_records

    @property
    def num_chunks(self) -> int:
        return len(self._footer.starts) - 1

    @property
    def writer_options(self) -> str:
        """The options string the file was written with, as its footer records it."""
        return self._footer.writer_options

    @property
    def retries(self) -> int:
        """Requests its source retried so far (0 where the source keeps no count: a local file)."""
        return int(getattr(self._source, "retries", 0) or 0)

    @property
    def cached_bytes(self) -> int:
        """Bytes of decoded chunks held in the cache now (above ``cache_bytes`` only by
        the chunk the last read ended in)."""
        return self._cache.nbytes

    def read(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at ``indices``, in that order; repeats allowed."""
        pending = self.begin(indices)
        buffers = self._source.read_ranges(pending.ranges) if pending.plan else []
        pieces = self.pieces(pending, buffers)  # checks the buffers' lengths
        return self.finish(pending, decode_chunks(pieces, self._name, verify_data=self._verify))

    # A read in three steps, so that a caller reading many files at once (a batch over
    # the shards of a bucket) can fetch every file's ranges together and decode all
    # their chunks in one call: ``begin`` (no I/O on the file), then ``read_ranges`` of
    # ``pending.ranges``, then ``pieces`` and ``decode_chunks``, then ``finish``.

    def begin(self, indices: Sequence[int] | np.ndarray) -> PendingRead:
        """What reading ``indices`` needs: the chunks in the cache, the ranges to fetch."""
        idx = check_indices(indices, len(self), f"{_WHAT}({self._name})", negative=False)
        group = self._footer.group
        if group:  # chunks of equal size: no search (nor pages of the index touched)
            chunk_of = idx // group
            local = (idx - chunk_of * group).tolist()
        else:
            first = self._footer.first_record
            chunk_of = np.searchsorted(first, idx, side="right") - 1
            local = (idx - first[chunk_of]).tolist() if len(idx) else []
        wanted = np.unique(chunk_of).tolist()
        found = self._cache.find(self._cache_key, wanted)
        missing = [c for c in wanted if c not in found]
        return PendingRead(chunk_of.tolist(), local, found, self._plan(missing))

    def pieces(self, pending: PendingRead, buffers: list[bytes]) -> list[tuple[bytes, int, int]]:
        """The raw chunks ``(bytes, offset, records)`` in ``buffers``, read for ``pending``."""
        self._check(pending.ranges, buffers)
        footer = self._footer
        return [
            (buf if (begin, end) == (b0, e0) else buf[begin - b0 : end - b0], begin,
             footer.chunk_records(c))
            for (b0, e0, group), buf in zip(pending.plan, buffers)
            for c, begin, end in group
        ]  # fmt: skip

    def finish(self, pending: PendingRead, decoded: list[DecodedChunk]) -> list[bytes]:
        """The records ``pending`` was begun for, from the cache and the ``decoded`` chunks."""
        fetched = {
            c: (values, offsets.tolist())
            for c, (values, offsets) in zip(pending.chunks_fetched, decoded)
        }
        current = pending.chunk_of[-1] if pending.chunk_of else None
        self._cache.store(self._cache_key, fetched, current)
        chunks = {**pending.found, **fetched}
        out = []
        for c, k in zip(pending.chunk_of, pending.local):
            values, offsets = chunks[c]
            out.append(values[offsets[k] : offsets[k + 1]])
        return out

    def _plan(self, missing: list[int]) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
        """Ranges ``(begin, end, chunks)`` covering the chunks, neighbours merged; each
        chunk as ``(chunk, begin, end)`` in the file."""
        if not missing:
            return []
        begins, ends = self._footer.spans(missing)
        merged = merge_ranges(list(zip(begins, ends)), self._gap, self._max_range)
        return [
            (begin, end, [(missing[m], begins[m], ends[m]) for m in members])
            for begin, end, members in merged
        ]

    def release_cache(self) -> None:
        """The reader is done for now: its current chunk may leave a shared cache."""
        self._cache.release(self._cache_key)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_cache"]
        state["_shared_cache"] = None  # a copy caches on its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_cache()

    def __repr__(self) -> str:
        return f"{_WHAT}({self._source!r})"
