"""The commit marker of a spilled transaction: its commit point, and what completes it.

A transaction that spilled to staging column families commits by writing one marker to
the metadata column family (its offsets, range deletions and staged stores), then
applying the staged changes in bounded batches; the marker is deleted in the last one.
Opening a database that holds a marker applies it again (idempotent: every staged entry
is a final value), so a crash anywhere after the marker ends at the new version.
"""

from __future__ import annotations

import json
from typing import Mapping

from spark_statestore.errors import CorruptStateError
from spark_statestore.faults import fault_point
from spark_statestore.stores.keyspace import ColumnFamilyKeySpace
from spark_statestore.stores.names import META_COLUMN_FAMILY
from spark_statestore.stores.rocksdb import RocksDatabase
from spark_statestore.txn.apply import apply_changes, pair_columns
from spark_statestore.txn.keyspace import STAGING_PREFIX, decode_staged

MARKER_KEY = b"txn:commit-marker"
_FIELDS = (("offsets", dict), ("ranges", dict), ("staged", list))


def write_marker(
    db: RocksDatabase,
    final: Mapping[bytes, bytes | None],
    ranges: Mapping[str, list[tuple[bytes, bytes]]],
    staged: list[str],
) -> dict:
    """Write the commit point of a spilled transaction: `final` metadata entries (its
    offsets), its range deletions and the stores with staged changes; returns the marker."""
    marker = {
        "offsets": {k.hex(): v.hex() for k, v in final.items() if v is not None},
        "ranges": {n: [[lo.hex(), hi.hex()] for lo, hi in r] for n, r in ranges.items()},
        "staged": staged,
    }
    db.column_family(META_COLUMN_FAMILY).put(MARKER_KEY, json.dumps(marker).encode("utf-8"))
    return marker


def apply_marker(db: RocksDatabase, marker: dict, chunk_bytes: float) -> None:
    """Apply a committed, staged transaction (again, if a crash interrupted it)."""
    ranges = {
        name: [(bytes.fromhex(lo), bytes.fromhex(hi)) for lo, hi in spans]
        for name, spans in marker["ranges"].items()
    }
    blocks = (
        (name, keys, values)
        for name in marker["staged"]
        for keys, values in pair_columns(
            decode_staged(ColumnFamilyKeySpace(db, STAGING_PREFIX + name).scan(None, None))
        )
    )
    final: dict[bytes, bytes | None] = {bytes.fromhex(k): bytes.fromhex(v) for k, v in marker["offsets"].items()}
    final[MARKER_KEY] = None
    apply_changes(db, ranges, blocks, final, chunk_bytes)
    fault_point("commit:after-apply")
    if not db.wal:
        # Dropping the staging column families is durable at once, while without the
        # WAL the last batches (the marker's deletion among them) live in memtables: an
        # automatic flush may already have made the marker durable, and a crash would
        # then redo it from emptied staging families. Flush every family first.
        db.flush()
        fault_point("commit:after-flush")


def recover(db: RocksDatabase, chunk_bytes: float) -> None:
    """Finish a commit a crash interrupted; drop leftover staging column families."""
    raw = db.get(META_COLUMN_FAMILY, MARKER_KEY)
    if raw is not None:
        try:
            marker = json.loads(raw)
        except ValueError as e:
            raise CorruptStateError(f"database {db.path} holds an unreadable commit marker: {e}") from e
        if not isinstance(marker, dict) or not all(isinstance(marker.get(k), t) for k, t in _FIELDS):
            raise CorruptStateError(f"database {db.path} holds a commit marker of an unknown shape")
        apply_marker(db, marker, chunk_bytes)
    for name in db.column_family_names():
        if name.startswith(STAGING_PREFIX):
            db.drop_column_family(name)
