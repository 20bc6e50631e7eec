"""``read_together``: one batch's records from many ArrayRecord files in a bucket at once.

A shuffled batch touches many shards.  Read one shard at a time, it would wait one round
trip per shard; read on one thread per shard, the threads contend for the interpreter
while they wait and decode.  Here the calling thread plans every shard's read
(``RangedArrayRecordReader.begin``: the cache first), issues every shard's ranged GETs
together on the process's I/O loop (``chute._remote.ranged_object.read_many``), checks every
chunk's headers and data with one hash call each and decodes them (``decode_chunks``),
and hands each reader its chunks to cache and slice (``finish``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chute._sources.array_record.format import decode_chunks
from chute._sources.array_record.ranged import RangedArrayRecordReader

__all__ = ["read_together"]


def read_together(
    reads: list[tuple[RangedArrayRecordReader, Any]],
    on_error: Callable[[int, Exception], None],
) -> list[list[bytes]]:
    """The records ``positions`` of each ``(reader, positions)``, all fetched at once.

    Every reader's source must be ``on_io_loop``.  When a file's bytes are bad,
    ``on_error(i, exc)`` is told which read failed before ``exc`` propagates.
    """
    from chute._remote.ranged_object import read_many

    pendings = [reader.begin(positions) for reader, positions in reads]
    fetching = [i for i, pending in enumerate(pendings) if pending.plan]
    sources: list[Any] = [reads[i][0]._source for i in fetching]
    buffers = read_many([(source, pendings[i].ranges) for source, i in zip(sources, fetching)])
    pieces, names, counts = [], [], []
    for i, got in zip(fetching, buffers):
        reader = reads[i][0]
        try:
            mine = reader.pieces(pendings[i], got)
        except ValueError as exc:
            on_error(i, exc)
            raise
        pieces += mine
        names += [reader._name] * len(mine)
        counts.append(len(mine))
    try:
        decoded = decode_chunks(pieces, names, verify_data=reads[0][0]._verify if reads else True)
    except ValueError as exc:
        culprit = _culprit(reads, pendings, fetching, buffers)
        if culprit is not None:
            on_error(culprit, exc)
        raise
    out, at = [], 0
    per_read: dict[int, list[Any]] = {}
    for i, n in zip(fetching, counts):
        per_read[i], at = decoded[at : at + n], at + n
    for i, (reader, _) in enumerate(reads):
        out.append(reader.finish(pendings[i], per_read.get(i, [])))
    return out


def _culprit(
    reads: list[tuple[RangedArrayRecordReader, Any]],
    pendings: list[Any],
    fetching: list[int],
    buffers: list[list[bytes]],
) -> int | None:
    """Which read holds the bad chunk: each read's chunks decoded alone."""
    for i, got in zip(fetching, buffers):
        reader = reads[i][0]
        try:
            decode_chunks(reader.pieces(pendings[i], got), reader._name, verify_data=reader._verify)
        except ValueError:
            return i
    return None
