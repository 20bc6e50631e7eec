"""chute's column conversion equals pyarrow's ``to_numpy()`` and does not import pandas."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chute._sources.parquet.columns import to_numpy

NUMBERS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]


def columns() -> dict[str, pa.Array]:
    """Columns of every kind chute converts itself, and some it leaves to pyarrow."""
    rng = np.random.default_rng(0)
    n = 37
    out: dict[str, pa.Array] = {}
    for name in NUMBERS + FLOATS:
        values = rng.integers(0, 100, n).astype(name)
        out[name] = pa.array(values)
        out[f"{name}_nulls"] = pa.array(values, mask=rng.random(n) < 0.2)
    out["bool"] = pa.array(rng.random(n) < 0.5)
    out["bool_nulls"] = pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.2)
    words = [f"w{i}" * (i % 4) for i in range(n)]
    out["string"] = pa.array(words)
    out["string_nulls"] = pa.array([None if i % 5 == 0 else w for i, w in enumerate(words)])
    out["large_string"] = pa.array(words, pa.large_string())
    out["binary"] = pa.array([w.encode() for w in words], pa.binary())
    out["large_binary_nulls"] = pa.array(
        [None if i % 3 == 0 else w.encode() for i, w in enumerate(words)], pa.large_binary()
    )
    lists = [rng.integers(0, 9, i % 6).tolist() for i in range(n)]
    for item in ("int32", "int64", "float32", "uint8"):
        out[f"list_{item}"] = pa.array(lists, pa.list_(pa.from_numpy_dtype(np.dtype(item))))
    out["large_list_int32"] = pa.array(lists, pa.large_list(pa.int32()))
    out["list_nulls"] = pa.array([None if i % 7 == 0 else x for i, x in enumerate(lists)])
    out["list_inner_nulls"] = pa.array([[1, None], *lists[1:]], pa.list_(pa.int64()))
    out["list_strings"] = pa.array([[str(v) for v in x] for x in lists])
    out["list_lists"] = pa.array([[x, x] for x in lists], pa.list_(pa.list_(pa.int32())))
    out["timestamp"] = pa.array(np.arange(n).astype("datetime64[s]").astype("datetime64[us]"))
    out["date"] = pa.array(np.arange(n).astype("datetime64[D]"), pa.date32())
    out["struct"] = pa.array([{"a": i, "b": str(i)} for i in range(n)])
    out["dictionary"] = pa.array(words).dictionary_encode()
    out["nulls_only"] = pa.nulls(n)
    return out


def same(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Equal dtype, flags, values and (for object arrays) element types and flags."""
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    assert ours.flags.writeable == theirs.flags.writeable
    if ours.dtype != object:
        np.testing.assert_array_equal(ours, theirs)
        return
    for a, b in zip(ours, theirs, strict=True):
        assert type(a) is type(b)
        if isinstance(a, np.ndarray):
            same(a, b)
        elif isinstance(a, dict):
            assert a.keys() == b.keys()
            assert all(type(a[k]) is type(b[k]) and a[k] == b[k] for k in a)
        else:
            assert a == b or (a is None and b is None)


def read_back(table: pa.Table, tmp_path: Any, **kwargs: Any) -> pa.Table:
    path = os.path.join(tmp_path, "t.parquet")
    pq.write_table(table, path, **kwargs)
    return pq.ParquetFile(path).read_row_group(0)


@pytest.mark.parametrize("name", sorted(columns()))
def test_a_column_read_from_parquet_converts_as_pyarrow_does(name: str, tmp_path: Any) -> None:
    column = read_back(pa.table({name: columns()[name]}), tmp_path).column(0)
    same(to_numpy(column), column.to_numpy())


@pytest.mark.parametrize("name", sorted(columns()))
def test_a_sliced_array_converts_as_pyarrow_does(name: str) -> None:
    column = pa.chunked_array([columns()[name].slice(5, 20)])
    same(to_numpy(column), column.to_numpy())


def test_empty_and_several_chunk_columns_convert_as_pyarrow_does() -> None:
    for array in columns().values():
        empty = pa.chunked_array([array.slice(0, 0)])
        same(to_numpy(empty), empty.to_numpy())
        chunks = pa.chunked_array([array.slice(0, 10), array.slice(10)])
        same(to_numpy(chunks), chunks.to_numpy())


def test_the_views_of_a_list_column_share_its_values(tmp_path: Any) -> None:
    table = read_back(pa.table({"x": pa.array([[1, 2], [3]], pa.list_(pa.int32()))}), tmp_path)
    converted = to_numpy(table.column(0))
    assert converted[0].base is not None
    with pytest.raises(ValueError):
        converted[0][0] = 9  # read-only, as pyarrow's


def test_reading_text_and_token_rows_does_not_import_pandas(tmp_path: Any) -> None:
    """The point of the module: a Parquet pipeline's first row without pandas' import."""
    path = os.path.join(tmp_path, "docs.parquet")
    pq.write_table(
        pa.table(
            {
                "text": ["a b", "c"],
                "tokens": pa.array([[1, 2], [3]], pa.list_(pa.int32())),
                "id": pa.array([1, 2], pa.int64()),
                "flag": [True, False],
            }
        ),
        path,
    )
    code = textwrap.dedent(
        f"""
        import sys
        import chute
        rows = list(chute.experimental.ParquetIterDataset({path!r}))
        assert [r["text"] for r in rows] == ["a b", "c"], rows
        assert rows[0]["tokens"].tolist() == [1, 2], rows
        print("pandas" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
