"""The filters Spark pushes to the state reader (`DataSourceReader.pushFilters`, pyspark
4.1+): which partitions to restore at all, the key range a store's scan covers, and a row
mask per Arrow batch, so that rows a query drops are neither scanned nor sent to the JVM.

Every filter is still returned to Spark, which checks it again on what the reader sends:
a filter here may keep more rows than Spark would, never fewer. So a filter is used only
where Arrow computes what Spark does (integer, boolean, string and binary columns; floats
are left to Spark, whose NaN compares equal to itself and above every number), and a
filter this module cannot use is simply not used. Filters are matched by class name:
pyspark 4.0 has no filter classes (and never calls `pushFilters`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_statestore.serde import serde_for

_COMPARE = {
    "EqualTo": pc.equal,
    "GreaterThan": pc.greater,
    "GreaterThanOrEqual": pc.greater_equal,
    "LessThan": pc.less,
    "LessThanOrEqual": pc.less_equal,
}
_STRING_MATCH = {
    "StringStartsWith": pc.starts_with,
    "StringEndsWith": pc.ends_with,
    "StringContains": pc.match_substring,  # a literal substring, not a pattern
}
# key serdes whose stored bytes sort as Spark orders their column (a key range is a byte
# range), with the Python type of their column's literals
_ORDERED_KEYS = {"string": (str,), "bytes": (bytes, bytearray), "int64_key": (int,)}
_NOT_USABLE = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def _usable(kind: pa.DataType) -> bool:
    return (
        pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_string(kind)
        or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
    )


def _column(condition: Any) -> str | None:
    """The top-level column a filter is on (None: a nested field, not used)."""
    attribute = getattr(condition, "attribute", None)
    return attribute[0] if isinstance(attribute, tuple) and len(attribute) == 1 else None


def _literal(value: Any, kind: pa.DataType) -> pa.Scalar:
    """`value` as a scalar of the column's `kind`; TypeError for a literal of another Python
    type than the column's (Arrow would convert some: a float or Decimal to an integer by
    truncating it, so `value < 1.5` would become `value < 1`)."""
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if type(value) is not _python_type(kind):
        raise TypeError(f"{value!r} is not a literal of a {kind} column")
    return pa.scalar(value, kind)


def _python_type(kind: pa.DataType) -> type:
    """The Python type of a usable column's literals."""
    if pa.types.is_boolean(kind):
        return bool
    if pa.types.is_integer(kind):
        return int
    return bytes if pa.types.is_binary(kind) else str


def _leaf(condition: Any, values: pa.Array) -> pa.Array | None:
    """Spark's truth value of one filter on `values` (null where Spark's is null; `In`
    gives false where Spark gives null, which keeps more rows under `Not`), or None."""
    name = type(condition).__name__
    if name == "IsNull":
        return pc.is_null(values)
    if name == "IsNotNull":
        return pc.is_valid(values)
    value = getattr(condition, "value", None)
    if name == "EqualNullSafe":
        if value is None:
            return pc.is_null(values)
        return pc.fill_null(pc.equal(values, _literal(value, values.type)), False)
    if value is None:
        return None
    if name in _COMPARE:
        return _COMPARE[name](values, _literal(value, values.type))
    if name == "In":
        present = [v for v in value if v is not None]
        value_set = pa.array([_literal(v, values.type).as_py() for v in present], values.type)
        return pc.is_in(values, value_set=value_set)
    if name in _STRING_MATCH and isinstance(value, str) and pa.types.is_string(values.type):
        return _STRING_MATCH[name](values, pattern=value)
    return None


def _truth(condition: Any, batch: pa.RecordBatch) -> pa.Array | None:
    """A filter's truth value on the batch's rows, or None where it is not used."""
    if type(condition).__name__ == "Not":
        inner = _truth(condition.child, batch)
        return None if inner is None else pc.invert(inner)
    column = _column(condition)
    if column is None or column not in batch.schema.names:
        return None
    values = batch.column(column)
    if not _usable(values.type):
        return None
    try:
        return _leaf(condition, values)
    except _NOT_USABLE:  # a literal of another type than the column: Spark's own check decides
        return None


def _successor(prefix: bytes) -> bytes | None:
    """The first byte string after every one starting with `prefix` (None: there is none)."""
    trimmed = prefix.rstrip(b"\xff")
    return None if not trimmed else trimmed[:-1] + bytes([trimmed[-1] + 1])


@dataclass(frozen=True)
class PushedFilters:
    """The filters Spark pushed, as the reader uses them (picklable: it goes to the tasks)."""

    filters: tuple = ()

    def keeps(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of `batch` that every usable filter may keep."""
        mask = None
        for condition in self.filters:
            truth = _truth(condition, batch)
            if truth is not None:
                mask = truth if mask is None else pc.and_kleene(mask, truth)
        return batch if mask is None else batch.filter(mask)

    def partitions(self, numbers: Sequence[int]) -> list[int]:
        """The partitions among `numbers` that the filters on `partition` may keep."""
        kept = self.keeps(pa.record_batch([pa.array(numbers, pa.int32())], names=["partition"]))
        return kept.column(0).to_pylist()

    def key_range(self, key_serde: str) -> tuple[bytes | None, bytes | None]:
        """The stored-key bytes `lo <= key < hi` (None: open) the filters on `key` allow, for
        key serdes whose bytes sort as Spark orders the column."""
        lo: bytes | None = None
        hi: bytes | None = None
        if key_serde not in _ORDERED_KEYS:
            return lo, hi
        encode = _encoder(key_serde)
        for condition in self.filters:
            if _column(condition) != "key":
                continue
            try:
                bounds = _bounds(condition, encode)
            except _NOT_USABLE:
                continue
            lo = bounds[0] if lo is None or (bounds[0] is not None and bounds[0] > lo) else lo
            hi = bounds[1] if hi is None or (bounds[1] is not None and bounds[1] < hi) else hi
        return lo, hi


def _encoder(key_serde: str) -> Any:
    """The serde's bytes of a literal of its column's type (TypeError for another type)."""
    serde, types = serde_for(key_serde), _ORDERED_KEYS[key_serde]

    def encode(value: Any) -> bytes:
        if not isinstance(value, types) or isinstance(value, bool):
            raise TypeError(f"{value!r} is not a {key_serde} key")
        return serde.encode(bytes(value) if isinstance(value, bytearray) else value)

    return encode


def _bounds(condition: Any, encode: Any) -> tuple[bytes | None, bytes | None]:
    """The byte range one filter on the key allows (a byte string's first successor is
    itself plus a zero byte)."""
    name, value = type(condition).__name__, getattr(condition, "value", None)
    if value is None:
        return None, None
    if name in ("EqualTo", "EqualNullSafe"):
        exact = encode(value)
        return exact, exact + b"\x00"
    if name == "In":
        present = [encode(v) for v in value if v is not None]
        return (min(present), max(present) + b"\x00") if present else (None, None)
    if name in ("GreaterThan", "GreaterThanOrEqual"):
        return encode(value) + (b"\x00" if name == "GreaterThan" else b""), None
    if name in ("LessThan", "LessThanOrEqual"):
        return None, encode(value) + (b"\x00" if name == "LessThanOrEqual" else b"")
    if name == "StringStartsWith" and isinstance(value, str):
        prefix = encode(value)  # TypeError unless the keys are strings (text is no prefix of other keys)
        return prefix, _successor(prefix)
    return None, None


class TakesFilters:
    """`pushFilters` for a batch reader: it keeps Spark's filters in `pushed` and hands
    every one back for Spark to check (see the module's docstring)."""

    pushed: PushedFilters = PushedFilters()

    @staticmethod
    def pruned(partition: Any) -> bool:
        """Whether an input partition is the one pyspark reads when `partitions()` kept none
        (None up to 4.2, `InputPartition(None)` from 4.3): it has no rows."""
        return partition is None or partition.value is None

    def pushFilters(self, filters: Iterable[Any]) -> Iterable[Any]:  # noqa: N802 (pyspark's name)
        given = list(filters)
        self.pushed = PushedFilters(tuple(given))
        return given
