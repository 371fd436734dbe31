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
from typing import Any, Iterable, Mapping, Sequence

import rocksdict

from spark_statestore.faults import fault_point
from spark_statestore.stores.rocksdb import META_COLUMN_FAMILY, RocksDatabase

DEFAULT_CHUNK_BYTES = 1 << 20


def apply_changes(
    db: RocksDatabase,
    ranges: Mapping[str, Sequence[tuple[bytes, bytes]]],
    entries: Iterable[tuple[str, bytes, bytes | None]],
    final: Mapping[bytes, bytes | None],
    chunk_bytes: float = math.inf,
) -> int:
    """Apply `ranges` (per column family), `entries` `(family, key, value or None)` and the
    metadata updates `final`; returns the number of batches written."""
    handles: dict[str, Any] = {}

    def handle(name: str) -> Any:
        h = handles.get(name)
        if h is None:
            h = handles[name] = db.handle(name)
        return h

    batches = 0
    batch = rocksdict.WriteBatch(raw_mode=True)
    size = 0
    try:
        for name, spans in ranges.items():
            for lo, hi in spans:
                batch.delete_range(lo, hi, handle(name))
                size += len(lo) + len(hi)
        for name, key, value in entries:
            if value is None:
                batch.delete(key, handle(name))
                size += len(key)
            else:
                batch.put(key, value, handle(name))
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
        handles.clear()
