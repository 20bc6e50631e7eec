"""How ``chute convert`` turns rows into record bytes.

Rows that already are ``bytes`` (TFRecord records) are stored unchanged.
Every other row is serialized with the chosen serializer:

* ``pickle`` (default): ``pickle.dumps(row, protocol=5)``.  Keeps every
  Python and NumPy type exactly; read back with ``pickle.loads(record)``.
* ``json``: compact UTF-8 JSON, for readers in any language.  NumPy arrays
  become (nested) lists, NumPy scalars numbers, dates and times ISO strings,
  ``Decimal`` a string, and ``bytes`` the object ``{"__bytes__": "<base64>"}``;
  read back with ``json.loads(record, object_hook=json_object_hook)``, whose
  hook turns those objects back into bytes.
* ``msgpack``: ``msgpack.packb(row, use_bin_type=True)`` with the same
  conversions as JSON except that bytes stay bytes; needs ``pip install msgpack``.

>>> encode = encoder("json")
>>> encode({"a": 1, "raw": b"hi"})
b'{"a":1,"raw":{"__bytes__":"aGk="}}'
>>> import json
>>> json.loads(encode({"raw": b"hi"}), object_hook=json_object_hook)
{'raw': b'hi'}
>>> encoder("pickle")(b"already bytes")
b'already bytes'
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from chute._cli.errors import CliError, need

__all__ = ["SERIALIZERS", "encoder", "json_object_hook", "plain"]

SERIALIZERS = ("pickle", "json", "msgpack")
PICKLE_PROTOCOL = 5
_BYTES_KEY = "__bytes__"


def plain(value: Any) -> Any:
    """``value`` as a type JSON and msgpack can hold (the ``default`` hook of both)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not supported")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {_BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    return plain(value)


def json_object_hook(obj: dict[str, Any]) -> Any:
    """Undoes the JSON serializer's ``{"__bytes__": "<base64>"}`` objects."""
    if len(obj) == 1 and isinstance(obj.get(_BYTES_KEY), str):
        return base64.b64decode(obj[_BYTES_KEY])
    return obj


def _to_json(row: Any) -> bytes:
    text = json.dumps(row, default=_json_default, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def _to_pickle(row: Any) -> bytes:
    return pickle.dumps(row, protocol=PICKLE_PROTOCOL)


def _msgpack_packer() -> Callable[[Any], bytes]:
    msgpack = need("msgpack", "--serializer msgpack", "msgpack")
    packer = msgpack.Packer(default=plain, use_bin_type=True)
    return packer.pack


def encoder(serializer: str) -> Callable[[Any], bytes]:
    """The function that turns one row into record bytes for ``serializer``.

    Bytes pass through unchanged; a row the serializer cannot hold raises a
    ``CliError`` that suggests the pickle serializer.
    """
    dump: Callable[[Any], bytes]
    if serializer == "pickle":
        dump = _to_pickle
    elif serializer == "json":
        dump = _to_json
    elif serializer == "msgpack":
        dump = _msgpack_packer()
    else:
        raise CliError(f"unknown serializer {serializer!r}; use one of {', '.join(SERIALIZERS)}")

    def encode(row: Any) -> bytes:
        if isinstance(row, bytes):
            return row
        try:
            return dump(row)
        except (TypeError, ValueError, OverflowError, pickle.PicklingError) as exc:
            raise CliError(
                f"a row cannot be written with --serializer {serializer} ({exc}); "
                "use --serializer pickle, which holds any Python object"
            ) from None

    return encode
