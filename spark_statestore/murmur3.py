"""Spark's hash partitioning, in Python without Spark: where Spark sends a grouping key.

Spark's `HashPartitioning(columns, n)` puts a row in partition `pmod(hash(columns), n)`,
where `hash()` is SQL's Murmur3 hash (`Murmur3_x86_32`, seed 42): each column's value is
hashed with the previous column's hash as the seed (a null column leaves it unchanged).
Per type, as Spark's `HashExpression` does: boolean, byte, short, int and date hash as an
int; long and timestamp as a long; float as the int of its bits and double as the long
of its bits (-0.0 as 0.0); string (UTF-8) and binary with Spark's `hashUnsafeBytes`,
whose tail bytes are mixed one by one as signed ints (not the standard Murmur3 tail).

Python values map to Spark types as `spark_type_of` says (an `int` is a `bigint`, as
`LongType`); `Int32(v)` marks an `int` column. `hash_longs`/`hash_ints` hash a numpy array
at once.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

SEED = 42
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class Int32:
    """A value of an `int` (32-bit) column: hashed as Spark hashes `IntegerType`."""

    value: int


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    return (_rotl(k1, 15) * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def hash_int(value: int, seed: int = SEED) -> int:
    """Spark's `Murmur3_x86_32.hashInt` (a signed 32-bit result)."""
    return _signed(_fmix(_mix_h1(seed & _MASK, _mix_k1(value & _MASK)), 4))


def hash_long(value: int, seed: int = SEED) -> int:
    """Spark's `Murmur3_x86_32.hashLong`: the low word, then the high word."""
    h1 = _mix_h1(seed & _MASK, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1((value >> 32) & _MASK))
    return _signed(_fmix(h1, 8))


def hash_bytes(data: bytes, seed: int = SEED) -> int:
    """Spark's `hashUnsafeBytes` (strings and binary): 4-byte little-endian words, then
    each remaining byte as a signed int."""
    h1 = seed & _MASK
    aligned = len(data) - len(data) % 4
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    return _signed(_fmix(h1, len(data)))


def spark_type_of(value: Any) -> str:
    """The Spark type a Python value of a grouping key is hashed as."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, Int32):
        return "int"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    raise TypeError(
        f"a grouping key value must be None, bool, int (bigint), Int32 (int), float (double), str or bytes, "
        f"got {type(value).__name__}: {value!r:.100}"
    )


def hash_value(value: Any, seed: int) -> int:
    """One column's value hashed with `seed` (a null returns the seed, as Spark does)."""
    kind = spark_type_of(value)
    if kind == "null":
        return seed
    if kind == "boolean":
        return hash_int(1 if value else 0, seed)
    if kind == "int":
        return hash_int(_check_range(value.value, 32), seed)
    if kind == "bigint":
        return hash_long(_check_range(value, 64), seed)
    if kind == "double":
        bits = 0 if value == 0.0 else struct.unpack("<q", struct.pack("<d", math.nan if value != value else value))[0]
        return hash_long(bits, seed)
    if kind == "string":
        return hash_bytes(value.encode("utf-8", "surrogatepass"), seed)
    return hash_bytes(bytes(value), seed)


def _check_range(value: int, bits: int) -> int:
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise ValueError(f"a grouping key value must fit in a signed {bits}-bit integer, got {value}")
    return value


def spark_hash(values: Sequence[Any], seed: int = SEED) -> int:
    """SQL's `hash(c1, c2, ...)` of one row's column values."""
    h = seed
    for value in values:
        h = hash_value(value, h)
    return h


def pmod(h: int, n: int) -> int:
    """Spark's `pmod`: a non-negative remainder (Python's `%` already is one)."""
    return h % n


def partition_of(values: Sequence[Any], partitions: int) -> int:
    """The partition `HashPartitioning(columns, partitions)` sends a row with these values to."""
    return pmod(spark_hash(values), partitions)


# -- vectorised: numpy arrays of one column -------------------------------------------------


def _np_mix_k1(k1: np.ndarray) -> np.ndarray:
    k1 = k1 * np.uint32(_C1)
    k1 = (k1 << np.uint32(15)) | (k1 >> np.uint32(17))
    return k1 * np.uint32(_C2)


def _np_mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    h1 = h1 ^ k1
    h1 = (h1 << np.uint32(13)) | (h1 >> np.uint32(19))
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _np_fmix(h1: np.ndarray, length: int) -> np.ndarray:
    h1 = h1 ^ np.uint32(length)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    return (h1 ^ (h1 >> np.uint32(16))).view(np.int32)


def _seeds(seed: int | np.ndarray, size: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(seed, dtype=np.int64).astype(np.uint32), (size,))


def hash_ints(values: np.ndarray, seed: int | np.ndarray = SEED) -> np.ndarray:
    """`hash_int` of every element of an int32 array (seed: one, or one per element)."""
    words = np.asarray(values, dtype=np.int32).view(np.uint32)
    with np.errstate(over="ignore"):
        return _np_fmix(_np_mix_h1(_seeds(seed, len(words)), _np_mix_k1(words)), 4)


def hash_longs(values: np.ndarray, seed: int | np.ndarray = SEED) -> np.ndarray:
    """`hash_long` of every element of an int64 array (seed: one, or one per element)."""
    longs = np.asarray(values, dtype=np.int64).view(np.uint64)
    low = (longs & np.uint64(_MASK)).astype(np.uint32)
    high = (longs >> np.uint64(32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        h1 = _np_mix_h1(_seeds(seed, len(longs)), _np_mix_k1(low))
        return _np_fmix(_np_mix_h1(h1, _np_mix_k1(high)), 8)


def pmod_array(hashes: np.ndarray, partitions: int) -> np.ndarray:
    """`pmod` of an array of hashes (int64 results, in `0..partitions-1`)."""
    return np.mod(hashes.astype(np.int64), partitions)
