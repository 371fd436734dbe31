"""How a changelog's body holds its records: blocks of columns (format 3, written) or
interleaved records (format 2, still read).

Format 3 body: blocks, range deletions first (all integers big-endian)::

    u8 kind (0 = writes, 1 = range deletions) | u16 store index | u32 records |
    u32 key bytes | u32 value bytes | key lengths (u32 each) | value lengths (u32 each;
    DELETED = the key is deleted) | keys | values

A range-deletion block holds each range as a key (its start) and a value (its end). One
block holds records of one store. Columns let a writer build a block with C-level loops
(`map`, `accumulate`, `join`) and a reader make each column one binary Arrow array (offsets
from one cumulative sum of the lengths, the bytes shared), instead of Python work per
record. Measured on a 2-core VM with 10k changes: the writer alone 4.1 ms (the
transaction's whole change set written out took 17.7 ms before); applying one to 1M keys
17.5 ms against 46.7 ms for the same changes in format 2 (`benchmarks/partition_state.py`,
section 4). The change feed of one partition (275,000 changes in two changelogs, verified
and read as Arrow columns): 25 ms of CPU, against 128 to 136 ms when the blocks were cut
into Python bytes and joined again (`benchmarks/README.md`, state_reader.py).

Format 2 body: records ``u8 op (0 delete, 1 put, 2 delete range) | u16 store index |
u32 key length | u32 value length | key | value``.

Readers check what no writer makes (an unknown kind, op or store, a range deletion after a
write or with an end before its start, lengths that do not add up, a body that ends inside
a block or record, a record count other than the trailer's) and raise `CorruptStateError`.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from itertools import accumulate
from typing import BinaryIO, Iterator, Sequence

import numpy as np
import pyarrow as pa

from spark_statestore.errors import CorruptStateError

WRITES, RANGES = 0, 1
DELETED = 0xFFFFFFFF  # a value length that marks a deleted key
BLOCK = struct.Struct(">BHIII")
MAX_BLOCK_RECORDS = 1 << 16
MAX_BLOCK_BYTES = 1 << 20  # key and value bytes a writer puts in one block (one record may exceed it)
_READ_BYTES = 1 << 20
_RECORD_V2 = struct.Struct(">BHII")
_PUT_V2, _RANGE_V2 = 1, 2
_INT32_LIMIT = 1 << 31
_U32 = np.dtype(">u4")  # the lengths' type in the file
_SWAP = sys.byteorder == "little"  # the lengths are big-endian in the file
assert array("I").itemsize == 4, "length columns are arrays of 32-bit unsigned ints"

# kind, store, keys, values (None: deleted): binary Arrow arrays in format 3, lists in format 2
Block = tuple[int, str, "pa.Array | Sequence[bytes]", "pa.Array | Sequence[bytes | None]"]


def _u32s(values: Sequence[int] | map) -> bytes:
    column = array("I", values)
    if _SWAP:
        column.byteswap()
    return column.tobytes()


def encode_blocks(kind: int, store: int, keys: Sequence[bytes], values: Sequence[bytes | None]) -> Iterator[bytes]:
    """`keys` and `values` (`None`: deleted) of store index `store` as blocks of at most
    `MAX_BLOCK_RECORDS` records and about `MAX_BLOCK_BYTES` key and value bytes each."""
    key_lens = list(map(len, keys))
    if None in values:
        deleted = [i for i, v in enumerate(values) if v is None]
        values = [b"" if v is None else v for v in values]
    else:
        deleted = []
    value_lens = list(map(len, values))
    if max(key_lens, default=0) >= DELETED or max(value_lens, default=0) >= DELETED:
        raise ValueError("a changelog holds keys and values shorter than 4 GiB")
    ends = list(accumulate(map(int.__add__, key_lens, value_lens)))
    marked = value_lens
    if deleted:
        marked = value_lens.copy()
        for i in deleted:
            marked[i] = DELETED
    start = 0
    total = len(key_lens)
    while start < total:
        stop = min(total, start + MAX_BLOCK_RECORDS)
        base = ends[start - 1] if start else 0
        if ends[stop - 1] - base > MAX_BLOCK_BYTES:  # cut at the byte budget (at least one record)
            stop = max(start + 1, bisect_right(ends, base + MAX_BLOCK_BYTES, start, stop))
        key_bytes = sum(key_lens[start:stop])
        yield b"".join((
            BLOCK.pack(kind, store, stop - start, key_bytes, ends[stop - 1] - base - key_bytes),
            _u32s(key_lens[start:stop]),
            _u32s(marked[start:stop]),
            *keys[start:stop],
            *values[start:stop],
        ))
        start = stop


class _Body:
    """The body of a changelog file, read in order (bounded reads)."""

    def __init__(self, f: BinaryIO, start: int, end: int, where: str) -> None:
        f.seek(start)
        self.f = f
        self.remaining = end - start
        self.where = where

    def read(self, size: int, what: str) -> bytes:
        if size > self.remaining:
            raise CorruptStateError(f"{self.where} ends inside a {what}")
        data = self.f.read(size)
        if len(data) != size:
            raise CorruptStateError(f"{self.where} is truncated inside a {what}")
        self.remaining -= size
        return data


def _column(
    blob: memoryview, lens: np.ndarray, what: str, where: str, deleted: np.ndarray | None = None
) -> pa.Array:
    """A binary Arrow array of the items `lens` cut out of `blob` (null where `deleted`):
    offsets from one cumulative sum, the bytes shared with `blob` (no copy per item)."""
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] != len(blob):
        raise CorruptStateError(f"{where} holds a block whose {what} lengths do not add up to its {what} bytes")
    if offsets[-1] >= _INT32_LIMIT:  # beyond a binary array's offsets: let Arrow chunk it
        items = [bytes(blob[a:b]) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        if deleted is not None:
            items = [None if gone else item for item, gone in zip(items, deleted.tolist())]
        return pa.array(items, pa.binary())
    validity = None if deleted is None else pa.array(~deleted).buffers()[1]
    buffers = [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(blob)]
    return pa.Array.from_buffers(pa.binary(), len(lens), buffers)


def read_blocks(
    f: BinaryIO, start: int, end: int, stores: Sequence[str], records: int, where: str, ranges_only: bool = False
) -> Iterator[Block]:
    """The blocks of a format-3 body between offsets `start` and `end` of `f`, checked,
    with keys and values as binary Arrow arrays (deleted values are null; `ranges_only`:
    the range-deletion blocks, which come first; the first write block's header ends the walk)."""
    body = _Body(f, start, end, where)
    count = 0
    writes_seen = False
    while body.remaining:
        kind, store, n, key_bytes, value_bytes = BLOCK.unpack(body.read(BLOCK.size, "block header"))
        if kind > RANGES or store >= len(stores) or n == 0:
            raise CorruptStateError(f"{where} holds an invalid block (kind {kind}, store {store}, {n} records)")
        if ranges_only and kind != RANGES:
            return
        if kind == RANGES and writes_seen:
            raise CorruptStateError(f"{where} holds a range deletion after its writes")
        writes_seen = kind == WRITES
        columns = body.read(8 * n + key_bytes + value_bytes, "block")
        key_lens = np.frombuffer(columns, _U32, n)
        value_lens = np.frombuffer(columns, _U32, n, 4 * n)
        deleted = value_lens == DELETED
        if deleted.any():
            if kind == RANGES:
                raise CorruptStateError(f"{where} holds a range deletion without an end")
            value_lens = np.where(deleted, 0, value_lens)
        else:
            deleted = None
        view = memoryview(columns)
        keys = _column(view[8 * n : 8 * n + key_bytes], key_lens, "key", where)
        values = _column(view[8 * n + key_bytes :], value_lens, "value", where, deleted)
        if kind == RANGES:
            for lo, hi in zip(keys.to_pylist(), values.to_pylist()):
                if lo > hi:
                    raise CorruptStateError(
                        f"{where} holds a range deletion whose end {hi!r} comes before its start {lo!r}"
                    )
        count += n
        yield kind, stores[store], keys, values
    if count != records:
        raise CorruptStateError(f"{where} holds {count} records, but its trailer says {records}")


def read_records_v2(
    f: BinaryIO, start: int, end: int, stores: Sequence[str], records: int, where: str, ranges_only: bool = False
) -> Iterator[Block]:
    """The records of a format-2 body, checked, as blocks of one record each (`ranges_only`:
    up to the first write)."""
    unpack = _RECORD_V2.unpack_from
    head = _RECORD_V2.size
    writes_seen = False
    count = 0
    f.seek(start)
    remaining = end - start
    buf = b""
    pos = 0
    while True:
        size = len(buf)
        while pos + head <= size:
            op, store, key_len, value_len = unpack(buf, pos)
            key_start = pos + head
            mid = key_start + key_len
            stop = mid + value_len
            if stop > size:
                break
            pos = stop
            count += 1
            if store >= len(stores) or op > _RANGE_V2:
                raise CorruptStateError(f"{where} holds an invalid record (op {op}, store {store})")
            key, value = buf[key_start:mid], buf[mid:stop]
            if op != _RANGE_V2:
                if ranges_only:
                    return
                writes_seen = True
                yield WRITES, stores[store], (key,), (value if op == _PUT_V2 else None,)
                continue
            if writes_seen or key > value:
                raise CorruptStateError(
                    f"{where} holds a range deletion "
                    + ("after its writes" if writes_seen else f"whose end {value!r} comes before its start {key!r}")
                )
            yield RANGES, stores[store], (key,), (value,)
        if remaining <= 0:
            if pos != size:
                raise CorruptStateError(f"{where} ends inside a record")
            if count != records:
                raise CorruptStateError(f"{where} holds {count} records, but its trailer says {records}")
            return
        chunk = f.read(min(remaining, _READ_BYTES))
        if not chunk:
            raise CorruptStateError(f"{where} is truncated (it changed after it was verified)")
        remaining -= len(chunk)
        buf = buf[pos:] + chunk
        pos = 0
