"""Order-preserving key encodings.

Stores order keys by unsigned byte order. These serdes map Python values to bytes so
that byte order equals value order, which makes `range`, `prefix_scan` and window
fetches over typed keys mean what they say:

* `str`: UTF-8 (UTF-8 byte order is code-point order).
* signed 64-bit `int`: big-endian with the sign bit flipped, so negatives sort first.
* tuples: each component in a self-delimiting form, so a tuple prefix is a byte prefix
  (prefix scans over leading components work) and `("a",)` sorts before `("a", ...)`.
  Variable-length components escape `0x00` as `0x00 0xff` and end with `0x00 0x01`.
"""

from __future__ import annotations

from typing import Any, Sequence

from spark_statestore.serde.values import Serde, _int64_array, check_width, malformed, wrong_type

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_SIGN = 2**63
_TERMINATOR = b"\x00\x01"


def _check_int64(value: Any, name: str) -> int:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_type(name, "an int", value)
        value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name} must fit in a signed 64-bit integer, got {value}")
    return value


class Int64KeySerde(Serde):
    """Signed 64-bit ints, 8 bytes big-endian with the sign bit flipped."""

    ordered = True
    builtin = True
    identity = "int64_key"  # type: ignore[assignment]

    def encode(self, value: int, name: str = "key") -> bytes:
        return (_check_int64(value, name) + _SIGN).to_bytes(8, "big")

    def decode(self, data: bytes) -> int:
        return int.from_bytes(check_width(data, 8, self), "big") - _SIGN

    def encode_many(self, values: Any, name: str = "key") -> list[bytes]:
        array = _int64_array(values)
        if array is None:
            return super().encode_many(values, name)
        return (array.view("u8") ^ (1 << 63)).astype(">u8").view("V8").tolist()

    def decode_many(self, data: list) -> list:
        if None in data or any(len(d) != 8 for d in data):
            return super().decode_many(data)
        import numpy as np

        return (np.frombuffer(b"".join(data), ">u8") ^ (1 << 63)).view("i8").tolist()


def escape(data: bytes) -> bytes:
    """Self-delimiting, order-preserving form of a byte string."""
    return data.replace(b"\x00", b"\x00\xff") + _TERMINATOR


def unescape(data: bytes, start: int = 0) -> tuple[bytes, int]:
    """Inverse of `escape` for the component starting at `start`; returns (bytes, next offset)."""
    # Inside an escaped component every 0x00 is followed by 0xff, so the first `00 01`
    # is the terminator.
    end = data.find(_TERMINATOR, start)
    if end < 0:
        raise ValueError(f"malformed tuple key component at offset {start}: {data!r}")
    return data[start:end].replace(b"\x00\xff", b"\x00"), end + 2


class TupleKeySerde(Serde):
    """Tuples of str, int and bytes components, ordered component by component.

    `prefix(*leading)` encodes the first components only, for `prefix_scan`.
    """

    ordered = True

    builtin = True

    def __init__(self, *component_types: type) -> None:
        if not component_types:
            raise ValueError("component_types must name at least one of str, int, bytes, got ()")
        for t in component_types:
            if t not in (str, int, bytes):
                raise TypeError(f"component_types may only hold str, int and bytes, got {t!r}")
        self.component_types = tuple(component_types)

    def _encode_parts(self, values: Sequence[Any], name: str = "key") -> bytes:
        parts = []
        for i, (t, v) in enumerate(zip(self.component_types, values, strict=False)):
            if t is int:
                parts.append((_check_int64(v, f"{name}[{i}]") + _SIGN).to_bytes(8, "big"))
            elif t is str:
                if type(v) is not str:
                    raise TypeError(f"{name}[{i}] must be a str, got {type(v).__name__}: {v!r}")
                try:
                    parts.append(escape(v.encode("utf-8")))
                except UnicodeEncodeError:
                    raise ValueError(f"{name}[{i}] must be valid Unicode text, got {v!r}") from None
            else:
                if not isinstance(v, bytes):
                    raise TypeError(f"{name}[{i}] must be bytes, got {type(v).__name__}: {v!r}")
                parts.append(escape(v))
        return b"".join(parts)

    @property
    def identity(self) -> str:
        return "tuple(" + ",".join(t.__name__ for t in self.component_types) + ")"

    def encode(self, value: tuple, name: str = "key") -> bytes:
        if value is None:
            raise TypeError(f"{name} cannot be None")
        if not isinstance(value, tuple) or len(value) != len(self.component_types):
            raise TypeError(f"{name} must be a tuple of {len(self.component_types)} components, got {value!r}")
        return self._encode_parts(value, name)

    def prefix(self, *leading: Any) -> bytes:
        """Encoding of the leading components: every key starting with them has it as prefix."""
        if len(leading) > len(self.component_types):
            raise ValueError(
                f"prefix takes at most {len(self.component_types)} components, got {len(leading)}"
            )
        return self._encode_parts(leading)

    def decode(self, data: bytes) -> tuple:
        out = []
        pos = 0
        try:
            for t in self.component_types:
                if t is int:
                    if len(data) - pos < 8:
                        raise ValueError(f"an int component at offset {pos} is cut short")
                    out.append(int.from_bytes(data[pos : pos + 8], "big") - _SIGN)
                    pos += 8
                else:
                    raw, pos = unescape(data, pos)
                    out.append(raw.decode("utf-8") if t is str else raw)
            if pos != len(data):
                raise ValueError(f"{len(data) - pos} bytes after its components")
        except ValueError as e:  # UnicodeDecodeError too
            raise malformed(self, data, e) from None
        return tuple(out)
