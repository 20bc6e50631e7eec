"""Page checksums of Parquet files: verified on every read, and found missing.

A Parquet writer may store a CRC-32 of each page in the page's header (pyarrow:
``pq.write_table(table, path, write_page_checksum=True)``).  chute's Parquet
readers (``ParquetDataSource``, ``ParquetIterDataset``, ``chute convert`` and
``chute inspect``) ask pyarrow to check them (``page_checksum_verification=True``;
pass ``page_checksum_verification=False`` to a source to skip the check), so a
damaged page raises an ``OSError`` naming the file and the row group instead of
coming back as other values.

A file written without checksums cannot be checked: a flipped byte in its pages
is read back as other values as often as not, without an error.  pyarrow's
metadata does not say whether a file has them, so ``has_page_checksums`` reads
the header of the file's first page; ``chute inspect`` names the files that lack
them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "VERIFY",
    "corrupt_page",
    "has_page_checksums",
    "is_checksum_error",
    "local_has_page_checksums",
    "rows",
    "unchecked_note",
    "verified",
]

VERIFY = "page_checksum_verification"  # the ParquetFile keyword
_HEADER_BYTES = 64  # enough for a page header's first four fields
_I32 = 5  # the type of an i32 field in Thrift's compact protocol
_CRC_FIELD = 4  # PageHeader: 1 type, 2 uncompressed size, 3 compressed size, 4 crc


def verified(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for ``ParquetFile`` with page checksums verified unless they say otherwise."""
    return {VERIFY: True, **kwargs}


def is_checksum_error(exc: BaseException) -> bool:
    """Whether ``exc`` is pyarrow's error for a page whose CRC does not match its bytes.

    pyarrow raises a plain ``OSError`` for it, told apart only by its text.
    """
    return isinstance(exc, OSError) and "crc checksum" in str(exc).lower()


def corrupt_page(owner: str, path: str, group: int | None, exc: BaseException) -> str:
    """The message for a page whose checksum does not match: the file, the row group, what to do."""
    where = f"row group {group} of {path!r}" if group is not None else repr(path)
    return (
        f"{owner}: {where} is damaged: a page's checksum does not match its bytes ({exc}). "
        "The file changed after it was written (on disk, in a copy or in the bucket); copy "
        "it again from where it came from or write it again, or read without it."
    )


def rows(pf: Any, path: str, owner: str, batch_size: int = 1024) -> Iterator[dict[str, Any]]:
    """``pf``'s rows as dicts (``to_pylist``), read a row group at a time.

    A damaged page, or bytes that do not decode, raise an ``OSError`` or a
    ``ValueError`` that names ``path`` and the row group.
    """
    from pyarrow import ArrowException

    for group in range(pf.num_row_groups):
        batches = iter(pf.iter_batches(batch_size=batch_size, row_groups=[group]))
        while True:
            try:
                batch = next(batches, None)
                converted = None if batch is None else batch.to_pylist()
            except (OSError, ValueError, ArrowException) as exc:
                if is_checksum_error(exc):
                    raise OSError(corrupt_page(owner, path, group, exc)) from exc
                kind = OSError if isinstance(exc, OSError) else ValueError
                raise kind(f"{owner}: cannot read row group {group} of {path!r}: {exc}") from exc
            if converted is None:
                break
            yield from converted


def _varint_end(data: bytes, pos: int) -> int | None:
    """Where the varint at ``pos`` ends, or ``None`` if ``data`` ends first."""
    while pos < len(data):
        pos += 1
        if not data[pos - 1] & 0x80:
            return pos
    return None


def _header_has_crc(header: bytes) -> bool | None:
    """Whether a page header (Thrift compact protocol) holds its ``crc`` field.

    ``None`` when the bytes do not read as a page header.
    """
    pos, field = 0, 0
    while pos < len(header):
        byte = header[pos]
        pos += 1
        kind, delta = byte & 0x0F, byte >> 4
        if kind == 0:  # the end of the struct
            return False
        if delta == 0:  # the field id follows as a zigzag varint
            end = _varint_end(header, pos)
            if end is None:
                return None
            raw = int.from_bytes(header[pos:end], "little")  # only small ids are expected
            field, pos = (raw >> 1) ^ -(raw & 1), end
        else:
            field += delta
        if field >= _CRC_FIELD:
            return field == _CRC_FIELD and kind == _I32
        if kind != _I32:
            return None
        end = _varint_end(header, pos)
        if end is None:
            return None
        pos = end
    return None


def has_page_checksums(metadata: Any, read_at: Callable[[int, int], bytes]) -> bool | None:
    """Whether the file's pages carry checksums, judged by its first page.

    Args:
        metadata: The file's ``pyarrow.parquet.FileMetaData``.
        read_at: Reads ``length`` bytes at ``offset`` of the file.

    Returns:
        ``None`` when the file has no page, or its first page header does not parse.
    """
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns if group.num_rows else 0):
            chunk = group.column(c)
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            return _header_has_crc(read_at(int(start), _HEADER_BYTES))
    return None


def local_has_page_checksums(path: str, metadata: Any) -> bool | None:
    """``has_page_checksums`` of a local file."""
    with open(path, "rb") as file:

        def read_at(offset: int, length: int) -> bytes:
            file.seek(offset)
            return file.read(length)

        return has_page_checksums(metadata, read_at)


def unchecked_note(unchecked: list[str], total: int) -> str | None:
    """One line naming the files (of ``total``) whose pages carry no checksums, if any."""
    if not unchecked:
        return None
    shown = ", ".join(unchecked[:3]) + (", ..." if len(unchecked) > 3 else "")
    return (
        f"note: {len(unchecked)} of {total} Parquet file(s) carry no page checksums "
        f"({shown}): a damaged byte in their pages can be read back as other values without "
        "an error; write them with page checksums (pyarrow: pq.write_table(table, path, "
        "write_page_checksum=True)) so that reads detect damage"
    )
