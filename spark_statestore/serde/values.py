"""Value serdes: how typed values become the bytes a store holds.

A serde has `encode(obj) -> bytes` and `decode(data) -> obj`. `ordered` says whether
byte order equals value order (only then do ranges over encoded keys follow value
order). Value serdes need not be ordered.

A serde has an `identity`: a short name for the built-in ones (`"string"`, `"int64"`,
`"tuple(str,int)"`, ...), `module:QualifiedName` for others. The partition state records
the identities of its stores' serdes, so a reader decodes the state without the processor
and a query cannot reopen it with other serdes. The built-in serdes' `encode` takes the
role of what it encodes (`name`: "value" or "key"), for error messages.
"""

from __future__ import annotations

import functools
import json
import pickle
import struct
from collections.abc import Callable
from typing import Any


class Serde:
    """Base of all serdes: `encode(obj) -> bytes`, `decode(bytes) -> obj`."""

    ordered = False
    builtin = False  # built-in serdes take `name` in encode() and have a short identity

    def encode(self, value: Any) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def encode_many(self, values: Any, name: str = "value") -> list[bytes]:
        """Encode a column (a list, numpy array, pandas Series or Arrow array); the built-in
        serdes do it without a Python call per value where they can."""
        return list(map(self.encoder(name), as_list(values)))

    def decode_many(self, data: list) -> list:
        """Decode a list of stored values (`None` stays `None`)."""
        decode = self.decode
        return [None if d is None else decode(d) for d in data]

    def encoder(self, name: str = "value", nullable: bool = False) -> Callable[[Any], bytes | None]:
        """`encode` as one callable for a per-record path (errors name `name`); with
        `nullable`, `None` encodes to `None` (a delete). The string and int64 serdes inline
        their common case and hand the rest to `encode` (same results, same errors)."""
        encode = functools.partial(self.encode, name=name) if self.builtin else self.encode
        if not nullable:
            return encode
        return lambda value: None if value is None else encode(value)

    def decoder(self, nullable: bool = False) -> Callable[[Any], Any]:
        """`decode` as one callable for a per-record path; with `nullable`, `None` decodes
        to `None` (a missing value)."""
        decode = self.decode
        if not nullable:
            return decode
        return lambda data: None if data is None else decode(data)

    @property
    def identity(self) -> str:
        """What the state records about this serde (see module docstring)."""
        cls = type(self)
        return f"{cls.__module__}:{cls.__qualname__}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def as_list(values: Any) -> list:
    """A Python list from a list, tuple, numpy array, pandas Series or pyarrow array."""
    if isinstance(values, list):
        return values
    to_pylist = getattr(values, "to_pylist", None)
    if to_pylist is not None:
        return to_pylist()
    tolist = getattr(values, "tolist", None)
    if tolist is not None:
        return tolist()
    return list(values)


def _arrow_strings(values: Any) -> Any:
    """`values` as an Arrow string array when it is one (or a chunked one), else None."""
    import pyarrow as pa

    if isinstance(values, (pa.Array, pa.ChunkedArray)) and (
        pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
    ):
        return values
    return None


def _all_of_type(values: Any, kind: type) -> bool:
    """Whether `values` is a non-empty list of exactly `kind` (no subclass), checked at C level."""
    return type(values) is list and bool(values) and set(map(type, values)) == {kind}


def _int64_array(values: Any) -> Any:
    """`values` as a numpy int64 array when it holds integers only (no nulls), else None."""
    import numpy as np

    if isinstance(values, list):
        return None  # Python ints: `IntSerde.encode_many` checks their types first
    try:
        if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):
            if getattr(values, "null_count", 0):
                return None
            values = values.to_numpy()
        array = np.asarray(values)
    except (TypeError, ValueError):
        return None
    if array.dtype.kind not in "iu" or array.ndim != 1:
        return None
    if array.dtype.kind == "u" and array.size and int(array.max()) >= 1 << 63:
        return None
    return array.astype(np.int64, copy=False)


def _typename(value: Any) -> str:
    return f"{type(value).__name__}: {value!r}"


def wrong_type(name: str, expected: str, value: Any) -> TypeError:
    """The error for a value of the wrong type (`None` gets the API's own message)."""
    if value is None:
        return TypeError(f"{name} cannot be None")
    return TypeError(f"{name} must be {expected}, got {_typename(value)}")


class BytesSerde(Serde):
    """Identity: values are already bytes."""

    builtin = True
    identity = "bytes"  # type: ignore[assignment]

    ordered = True

    def encode(self, value: bytes, name: str = "value") -> bytes:
        if not isinstance(value, bytes):
            raise wrong_type(name, "bytes", value)
        return value

    def decode(self, data: bytes) -> bytes:
        return data


class StrSerde(Serde):
    """UTF-8 text."""

    builtin = True
    identity = "string"  # type: ignore[assignment]

    ordered = True

    def encode(self, value: str, name: str = "value") -> bytes:
        if type(value) is not str:
            raise wrong_type(name, "a str", value)
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name} must be valid Unicode text, got {value!r}") from None

    def encode_many(self, values: Any, name: str = "value") -> list[bytes]:
        strings = _arrow_strings(values)
        if strings is not None and not strings.null_count:
            import pyarrow as pa

            return strings.cast(pa.binary()).to_pylist()  # Arrow strings are UTF-8 already
        if type(self).encode is StrSerde.encode and _all_of_type(values, str):
            try:
                return list(map(str.encode, values))  # UTF-8, at C level
            except UnicodeEncodeError:
                pass  # a lone surrogate: the per-value path names it
        return super().encode_many(values, name)

    def decode(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise malformed(self, data, e) from None

    def decode_many(self, data: list) -> list:
        if type(self).decode is StrSerde.decode and _all_of_type(data, bytes):
            try:
                return list(map(bytes.decode, data))  # UTF-8, at C level
            except UnicodeDecodeError:
                pass  # bytes this serde did not write: the per-value path names them
        return super().decode_many(data)

    def encoder(self, name: str = "value", nullable: bool = False) -> Callable[[Any], bytes | None]:
        if type(self).encode is not StrSerde.encode:
            return super().encoder(name, nullable)
        encode = self.encode

        def encode_str(value: Any) -> bytes | None:
            if type(value) is str:
                try:
                    return value.encode("utf-8")
                except UnicodeEncodeError:
                    pass
            elif value is None and nullable:
                return None
            return encode(value, name)  # the error, or a str subclass

        return encode_str

    def decoder(self, nullable: bool = False) -> Callable[[Any], Any]:
        if type(self).decode is not StrSerde.decode:
            return super().decoder(nullable)
        decode = self.decode

        def decode_str(data: Any) -> Any:
            if type(data) is bytes:
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            elif data is None and nullable:
                return None
            return decode(data)  # the error, or another buffer type

        return decode_str


def malformed(serde: Serde, data: bytes, problem: object) -> ValueError:
    """The error for stored bytes that `serde` did not write: names the serde and the bytes."""
    return ValueError(f"serde {serde.identity} cannot decode data {bytes(data)[:40]!r}: {problem}")


def check_width(data: bytes, width: int, serde: Serde) -> bytes:
    """`data` if it is `width` bytes long: stored bytes of another width were not written by `serde`."""
    if len(data) != width:
        raise malformed(serde, data, f"it must be {width} bytes, got {len(data)}")
    return data


class IntSerde(Serde):
    """Signed 64-bit ints, 8 bytes big-endian (two's complement)."""

    builtin = True
    identity = "int64"  # type: ignore[assignment]

    def encode(self, value: int, name: str = "value") -> bytes:
        if type(value) is not int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise wrong_type(name, "an int", value)
            value = int(value)
        try:
            return value.to_bytes(8, "big", signed=True)
        except OverflowError:
            raise ValueError(f"{name} must fit in a signed 64-bit integer, got {value}") from None

    def decode(self, data: bytes) -> int:
        return int.from_bytes(check_width(data, 8, self), "big", signed=True)

    def encode_many(self, values: Any, name: str = "value") -> list[bytes]:
        array = _int64_array(values)
        if array is None and type(self).encode is IntSerde.encode and _all_of_type(values, int):
            import numpy as np

            try:
                array = np.array(values, dtype=np.int64)
            except OverflowError:
                pass  # out of range: the per-value path names the value
        if array is None:
            return super().encode_many(values, name)
        return array.astype(">i8").view("V8").tolist()

    def decode_many(self, data: list) -> list:
        present = [d for d in data if d is not None] if None in data else data
        if type(self).decode is not IntSerde.decode or not (
            set(map(type, present)) <= {bytes} and set(map(len, present)) <= {8}
        ):
            return super().decode_many(data)  # the per-value path names what is wrong
        import numpy as np

        decoded = np.frombuffer(b"".join(present), ">i8").tolist()
        if present is data:
            return decoded
        found = iter(decoded)  # the missing ones stay None
        return [None if d is None else next(found) for d in data]

    def encoder(self, name: str = "value", nullable: bool = False) -> Callable[[Any], bytes | None]:
        if type(self).encode is not IntSerde.encode:
            return super().encoder(name, nullable)
        encode = self.encode

        def encode_int(value: Any) -> bytes | None:
            if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
                return value.to_bytes(8, "big", signed=True)
            if value is None and nullable:
                return None
            return encode(value, name)  # the error, or an int subclass

        return encode_int

    def decoder(self, nullable: bool = False) -> Callable[[Any], Any]:
        if type(self).decode is not IntSerde.decode:
            return super().decoder(nullable)
        decode = self.decode
        from_bytes = int.from_bytes

        def decode_int(data: Any) -> Any:
            if type(data) is bytes and len(data) == 8:
                return from_bytes(data, "big", signed=True)
            if data is None and nullable:
                return None
            return decode(data)  # the error, or another buffer type

        return decode_int


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


_DOUBLE = struct.Struct(">d")


class FloatSerde(Serde):
    """IEEE-754 doubles, 8 bytes big-endian."""

    builtin = True
    identity = "float64"  # type: ignore[assignment]

    def encode(self, value: float, name: str = "value") -> bytes:
        if not isinstance(value, (float, int)) or isinstance(value, bool):
            raise wrong_type(name, "a float", value)
        return _DOUBLE.pack(value)

    def decode(self, data: bytes) -> float:
        return _DOUBLE.unpack(check_width(data, 8, self))[0]


class JsonSerde(Serde):
    """JSON documents (compact separators, UTF-8)."""

    builtin = True
    identity = "json"  # type: ignore[assignment]

    def encode(self, value: Any, name: str = "value") -> bytes:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
        except TypeError as e:
            raise TypeError(f"{name} is not JSON serializable: {value!r:.100} ({e})") from None
        except ValueError as e:  # NaN or infinity (not JSON), a circular reference
            raise ValueError(f"{name} cannot be written as JSON: {value!r:.100} ({e})") from None

    def decode(self, data: bytes) -> Any:
        try:
            return json.loads(data)
        except ValueError as e:
            raise malformed(self, data, e) from None


class PickleSerde(Serde):
    """Any picklable object (highest protocol). Only read state you wrote yourself."""

    builtin = True
    identity = "pickle"  # type: ignore[assignment]

    def encode(self, value: Any, name: str = "value") -> bytes:
        try:
            return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise TypeError(f"{name} cannot be pickled: {_typename(value)} ({e})") from None

    def decode(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except (pickle.UnpicklingError, EOFError) as e:
            raise malformed(self, data, e) from None


class ArrowSerde(Serde):
    """`pyarrow.RecordBatch` or `Table` values as Arrow IPC streams (decoded as Tables)."""

    builtin = True
    identity = "arrow"  # type: ignore[assignment]

    def encode(self, value: Any, name: str = "value") -> bytes:
        import pyarrow as pa

        if not isinstance(value, (pa.RecordBatch, pa.Table)):
            raise TypeError(f"{name} must be a pyarrow RecordBatch or Table, got {type(value).__name__}")
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write(value)
        return sink.getvalue().to_pybytes()

    def decode(self, data: bytes) -> Any:
        import pyarrow as pa

        try:
            return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        except pa.ArrowInvalid as e:
            raise malformed(self, data, e) from None
