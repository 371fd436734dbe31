"""Offsets and properties as entries of a database's metadata column family.

An offset is a signed 64-bit int under `offset:<name>`; a property is a small UTF-8
string under `property:<name>`. Names and values are checked before anything is written.
"""

from __future__ import annotations

from typing import Any, Mapping

from spark_statestore.validation import describe

OFFSET_PREFIX = b"offset:"
_PROPERTY_PREFIX = b"property:"


def _utf8(name: str, what: str) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {describe(name)}")
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode text, got {name!r}") from None


def offset_key(name: str) -> bytes:
    return OFFSET_PREFIX + _utf8(name, "offset name")


def decode_offset(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def property_key(name: Any, what: str = "property name") -> bytes:
    return _PROPERTY_PREFIX + _utf8(name, what)


def check_offsets(offsets: Any) -> dict[str, int]:
    """`offsets` as a dict of str to int (`None` = no offsets)."""
    if offsets is None:
        return {}
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a mapping of str to int, got {type(offsets).__name__}: {offsets!r}")
    out = {}
    for name, value in offsets.items():
        if not isinstance(name, str):
            raise TypeError(f"offsets keys must be str, got {type(name).__name__}: {name!r}")
        _utf8(name, "offsets key")
        if type(value) is not int or not -(2**63) <= value < 2**63:
            raise TypeError(f"offsets[{name!r}] must be a 64-bit int, got {type(value).__name__}: {value!r}")
        out[name] = value
    return out


def offset_entries(offsets: Any) -> dict[bytes, bytes | None]:
    """`offsets` (checked, `None` = none) as metadata entries."""
    return {offset_key(n): v.to_bytes(8, "big", signed=True) for n, v in check_offsets(offsets).items()}


def property_entries(properties: Any) -> dict[bytes, bytes]:
    """`properties` (a mapping of str to str) as metadata entries, every one checked first."""
    if not isinstance(properties, Mapping):
        raise TypeError(f"properties must be a mapping of str to str, got {describe(properties)}")
    entries = {}
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"properties must map str to str, got {name!r}: {describe(value)}")
        entries[property_key(name, "properties key")] = _utf8(value, f"properties[{name!r}]")
    return entries
