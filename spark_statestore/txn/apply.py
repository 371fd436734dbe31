"""Writing a change set into a RocksDB database: range deletions, then entries, then a
final set of metadata updates.

When everything fits in one `WriteBatch` the change set lands atomically. A larger one is
written in bounded chunks with the metadata last; the caller then needs a redo record (a
commit marker, a changelog file) so that a crash between chunks is repaired by applying
the same change set again. Applying is idempotent: range deletions come first and every
entry is a final value, so a second application gives the same result.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import islice, repeat
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import rocksdict

from spark_statestore.faults import fault_point
from spark_statestore.stores.names import META_COLUMN_FAMILY
from spark_statestore.stores.rocksdb import RocksDatabase
from spark_statestore.validation import (
    check_items,
    check_iterable,
    check_key,
    check_pair,
    columns_are_bytes,
    describe,
)

DEFAULT_CHUNK_BYTES = 1 << 20


Block = tuple[str, Sequence[bytes], Sequence["bytes | None"]]  # store, keys, values (None: delete)
BLOCK_RECORDS = 4096  # entries a block made of single entries holds


def blocks_of(
    entries: Iterable[tuple[str, bytes, bytes | None]], check_store: Callable[[Any], str] | None = None
) -> Iterator[Block]:
    """`(store, key, value)` entries as blocks of consecutive entries of one store; each
    entry is checked as it comes (a malformed one raises naming `entries[index]`), and
    with `check_store` each store name the first time it comes up."""
    checked: set[str] = set()
    name: Any = None
    keys: list[bytes] = []
    values: list[bytes | None] = []
    for index, entry in enumerate(check_iterable(entries, "entries", "(store, key, value) tuples")):
        try:
            store, key, value = entry
        except (TypeError, ValueError):
            raise TypeError(f"entries[{index}] must be a (store, key, value) tuple, got {describe(entry)}") from None
        if type(key) is not bytes or (value is not None and type(value) is not bytes):
            try:
                key, value = check_pair(key, value)
            except TypeError as e:
                raise TypeError(f"entries[{index}]: {e}") from None
        if store != name or len(keys) >= BLOCK_RECORDS:
            try:
                if store not in checked:
                    if check_store is not None:
                        check_store(store)
                    checked.add(store)
            except (TypeError, ValueError) as e:
                raise type(e)(f"entries[{index}]: {e}") from None
            if keys:
                yield name, keys, values
            name, keys, values = store, [], []
        keys.append(key)
        values.append(value)
    if keys:
        yield name, keys, values


def pair_columns(pairs: Iterable[tuple[bytes, bytes | None]]) -> Iterator[tuple[Sequence[bytes], Sequence[bytes | None]]]:
    """`(key, value)` pairs as `(keys, values)` columns of up to `BLOCK_RECORDS` entries."""
    pairs = iter(pairs)
    while chunk := list(islice(pairs, BLOCK_RECORDS)):
        keys, values = zip(*chunk)
        yield keys, values


def check_blocks(blocks: Iterable[Block], check_store: Callable[[Any], str]) -> Iterator[Block]:
    """Blocks from outside, checked a column at a time: store names (once each), keys of
    type bytes, values of type bytes or None, as many values as keys."""
    checked: set[str] = set()
    for index, block in enumerate(check_iterable(blocks, "blocks", "(store, keys, values) tuples")):
        try:
            name, keys, values = block
            if name not in checked:
                check_store(name)
                checked.add(name)
            if len(keys) != len(values):
                raise ValueError(f"{len(keys)} keys and {len(values)} values")
            if not columns_are_bytes(keys, values):
                raise TypeError("keys must be bytes and values bytes or None")
        except (TypeError, ValueError) as e:
            raise type(e)(f"blocks[{index}]: {e}") from None
        yield name, keys, values


def _check_range(lo: Any, hi: Any) -> tuple[bytes, bytes]:
    return check_key(lo, "lo"), check_key(hi, "hi")


def check_ranges(ranges: Any, check_store: Callable[[Any], str]) -> dict[str, list[tuple[bytes, bytes]]]:
    """Range deletions to apply: store name (checked by `check_store`) to `(lo, hi)` byte pairs."""
    if not isinstance(ranges, Mapping):
        raise TypeError(f"ranges must be a mapping of store name to (lo, hi) pairs, got {describe(ranges)}")
    return {
        check_store(name): check_items(spans, f"ranges[{name!r}]", ("lo", "hi"), _check_range)
        for name, spans in ranges.items()
    }


def apply_changes(
    db: RocksDatabase,
    ranges: Mapping[str, Sequence[tuple[bytes, bytes]]],
    blocks: Iterable[Block],
    final: Mapping[bytes, bytes | None],
    chunk_bytes: float = math.inf,
) -> int:
    """Apply `ranges` (per column family), the writes of `blocks` `(family, keys, values)`
    (`None`: delete) and the metadata updates `final`; returns the number of batches
    written. A block whose entries fit in the current chunk is written in one tight loop
    (a restore applies every change of every changelog through here)."""
    handles: dict[str, Any] = {}

    def handle(name: str) -> Any:
        h = handles.get(name)
        if h is None:
            h = handles[name] = db.handle(name)
        return h

    batches = 0
    batch = rocksdict.WriteBatch(raw_mode=True)
    size = 0
    unchunked = chunk_bytes == math.inf  # a commit's blocks: one batch, no sizes needed
    try:
        for name, spans in ranges.items():
            for lo, hi in spans:
                batch.delete_range(lo, hi, handle(name))
                size += len(lo) + len(hi)
        for name, keys, values in blocks:
            h = handle(name)
            put, delete = batch.put, batch.delete
            block_bytes = 0 if unchunked else sum(map(len, keys)) + sum(map(len, filter(None, values)))
            if unchunked or size + block_bytes < chunk_bytes:
                if None in values:
                    for key, value in zip(keys, values):
                        if value is None:
                            delete(key, h)
                        else:
                            put(key, value, h)
                else:  # puts only (a commit's usual block): mapped at C level, no Python step per record
                    deque(map(put, keys, values, repeat(h, len(keys))), maxlen=0)
                size += block_bytes
                continue
            for key, value in zip(keys, values):
                if value is None:
                    batch.delete(key, h)
                    size += len(key)
                else:
                    batch.put(key, value, h)
                    size += len(key) + len(value)
                if size >= chunk_bytes:
                    db.write(batch)
                    batches += 1
                    fault_point("apply:after-chunk")
                    batch = rocksdict.WriteBatch(raw_mode=True)
                    size = 0
        meta = handle(META_COLUMN_FAMILY)
        for key, value in final.items():
            if value is None:
                batch.delete(key, meta)
            else:
                batch.put(key, value, meta)
        db.write(batch)
        return batches + 1
    finally:
        # a raised error's traceback keeps this frame alive: column-family handles left in
        # its variables would keep the database open (and locked) after `close()`
        handles.clear()
        h = meta = batch = put = delete = None  # noqa: F841
