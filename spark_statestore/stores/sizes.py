"""What CPython really spends to hold the bytes objects of buffered records, so that the
memory budgets of the record cache and the transaction buffer count real memory
(`benchmarks/memory.py` measures them against RSS)."""

from __future__ import annotations

import sys

_HEADER = sys.getsizeof(b"")  # 33 bytes of object header on 64-bit CPython
_SMALL = 512  # objects up to this size come from pymalloc, in 16-byte steps (CPython 3.8+)


def bytes_cost(length: int) -> int:
    """Memory of a `bytes` object of `length` bytes."""
    size = _HEADER + length
    if size <= _SMALL:
        return (size + 15) & ~15
    return size + 16  # malloc's own header


def record_cost(key: bytes, value: bytes | None, container: int) -> int:
    """Memory of one buffered record: its key, its value (None costs nothing) and the
    `container`'s per-entry share (dict slots, links, sorted index)."""
    return bytes_cost(len(key)) + (0 if value is None else bytes_cost(len(value))) + container
