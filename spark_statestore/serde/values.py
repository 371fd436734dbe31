"""Value serdes: how typed values become the bytes a store holds.

A serde has `encode(obj) -> bytes` and `decode(data) -> obj`. `ordered` says whether
byte order equals value order (only then do ranges over encoded keys follow value
order). Value serdes need not be ordered.
"""

from __future__ import annotations

import json
import pickle
import struct
from typing import Any


class Serde:
    """Base of all serdes: `encode(obj) -> bytes`, `decode(bytes) -> obj`."""

    ordered = False

    def encode(self, value: Any) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSerde(Serde):
    """Identity: values are already bytes."""

    ordered = True

    def encode(self, value: bytes) -> bytes:
        if not isinstance(value, bytes):
            raise TypeError(f"value must be bytes, got {type(value).__name__}: {value!r}")
        return value

    def decode(self, data: bytes) -> bytes:
        return data


class StrSerde(Serde):
    """UTF-8 text."""

    ordered = True

    def encode(self, value: str) -> bytes:
        if type(value) is not str:
            raise TypeError(f"value must be a str, got {type(value).__name__}: {value!r}")
        return value.encode("utf-8")

    def decode(self, data: bytes) -> str:
        return data.decode("utf-8")


class IntSerde(Serde):
    """Signed 64-bit ints, 8 bytes big-endian (two's complement)."""

    def encode(self, value: int) -> bytes:
        if type(value) is not int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"value must be an int, got {type(value).__name__}: {value!r}")
            value = int(value)
        try:
            return value.to_bytes(8, "big", signed=True)
        except OverflowError:
            raise ValueError(f"value must fit in a signed 64-bit integer, got {value}") from None

    def decode(self, data: bytes) -> int:
        return int.from_bytes(data, "big", signed=True)


_DOUBLE = struct.Struct(">d")


class FloatSerde(Serde):
    """IEEE-754 doubles, 8 bytes big-endian."""

    def encode(self, value: float) -> bytes:
        if not isinstance(value, (float, int)) or isinstance(value, bool):
            raise TypeError(f"value must be a float, got {type(value).__name__}: {value!r}")
        return _DOUBLE.pack(value)

    def decode(self, data: bytes) -> float:
        return _DOUBLE.unpack(data)[0]


class JsonSerde(Serde):
    """JSON documents (compact separators, UTF-8)."""

    def encode(self, value: Any) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise TypeError(f"value is not JSON serializable: {value!r} ({e})") from None

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


class PickleSerde(Serde):
    """Any picklable object (highest protocol). Only read state you wrote yourself."""

    def encode(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, data: bytes) -> Any:
        return pickle.loads(data)


class ArrowSerde(Serde):
    """`pyarrow.RecordBatch` or `Table` values as Arrow IPC streams (decoded as Tables)."""

    def encode(self, value: Any) -> bytes:
        import pyarrow as pa

        if not isinstance(value, (pa.RecordBatch, pa.Table)):
            raise TypeError(
                f"value must be a pyarrow RecordBatch or Table, got {type(value).__name__}"
            )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write(value)
        return sink.getvalue().to_pybytes()

    def decode(self, data: bytes) -> Any:
        import pyarrow as pa

        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
