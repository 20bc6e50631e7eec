"""A Parquet column as a NumPy array, without pyarrow's pandas bridge where it can.

``pyarrow.ChunkedArray.to_numpy()`` is the conversion Grain's Parquet readers use, and
chute's records equal its output.  It goes through pyarrow's pandas bridge, which
imports pandas the first time it runs in a process (~0.2 s on this kind of machine)
when pandas is installed, whatever the column's type: that import was most of the time
to a Parquet pipeline's first batch.  ``to_numpy`` here builds the same array from the
column's Arrow buffers for the kinds that make up most training data, and leaves the
rest to pyarrow:

* numbers (``int8`` to ``uint64``, ``float16`` to ``float64``) without nulls: a
  read-only view of the Arrow buffer, as pyarrow's zero-copy result;
* ``bool`` without nulls: a writable array;
* strings and binary (also ``large_``, nulls allowed): an ``object`` array of ``str`` /
  ``bytes`` (``None`` for nulls);
* lists (also ``large_``) of such numbers, without nulls at either level: an
  ``object`` array of read-only views of the values, one per row.

Everything else (nulls in numbers, which pyarrow turns into ``nan``; dates, times,
decimals, structs, dictionaries, columns in several chunks) goes to pyarrow's
``to_numpy()``.  ``tests/sources/test_parquet_columns.py`` compares both for every kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_NUMBERS = {
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "halffloat": np.float16,
    "float": np.float32,
    "double": np.float64,
}
_TEXT = ("string", "large_string", "binary", "large_binary")  # as str() names them


def to_numpy(column: Any) -> np.ndarray:
    """``column`` (a ``pyarrow.ChunkedArray``) as ``column.to_numpy()`` makes it."""
    if column.num_chunks == 1:
        converted = _own(column.chunk(0))
        if converted is not None:
            return converted
    out: np.ndarray = column.to_numpy()
    return out


def _own(array: Any) -> np.ndarray | None:
    """``array`` converted from its buffers, or None to leave it to pyarrow."""
    kind = str(array.type)
    if kind in _NUMBERS:
        return None if array.null_count else _numbers(array, _NUMBERS[kind])
    if kind == "bool":
        return None if array.null_count else _bools(array)
    if kind in _TEXT:
        out = np.empty(len(array), dtype=object)
        out[:] = array.to_pylist()
        return out
    return _lists(array)


def _numbers(array: Any, dtype: Any) -> np.ndarray:
    data = array.buffers()[1]
    values = np.frombuffer(data, dtype=dtype) if data is not None else np.empty(0, dtype)
    values.flags.writeable = False  # a view of Arrow's memory, read-only as pyarrow's
    return values[array.offset : array.offset + len(array)]


def _bools(array: Any) -> np.ndarray:
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.zeros(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    return bits[array.offset : array.offset + len(array)].astype(bool)


def _lists(array: Any) -> np.ndarray | None:
    """A list column of numbers without nulls, else None."""
    kind = array.type
    import pyarrow as pa

    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or array.null_count:
        return None
    values = array.values
    dtype = _NUMBERS.get(str(values.type))
    if dtype is None or values.null_count:
        return None
    flat = _numbers(values, dtype)
    width = np.int64 if pa.types.is_large_list(kind) else np.int32
    offsets_buffer = array.buffers()[1]
    n = len(array)
    out = np.empty(n, dtype=object)
    if n == 0:
        return out
    offsets = np.frombuffer(offsets_buffer, dtype=width)[array.offset : array.offset + n + 1]
    bounds = offsets.tolist()
    for i in range(n):
        out[i] = flat[bounds[i] : bounds[i + 1]]
    return out
