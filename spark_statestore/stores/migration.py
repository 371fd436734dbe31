"""Rewriting a record store's values once, when its schema's newest version is a migration.

The driver records a migration as a schema version that takes effect in a batch
(`RecordSchema.migrated_since`, see `serde/evolution.py`). The first time a partition is
opened at or after that batch on state from before it, `migrate_if_due` rewrites every
value written before the migration through the serde (which runs the declared `migrate`
function), in chunks, as ordinary writes of that batch (an entry of a TTL store keeps its
expiry): they reach the durable state in that batch's changelog, atomically with it, and
a failed or killed attempt leaves the state as it was for the retry to do again.
Versions before the batch keep the old values (time travel reads them in the old
shape); from it on, every value has the new one.
"""

from __future__ import annotations

from typing import Any

from spark_statestore.faults import fault_point
from spark_statestore.serde.records import RecordSerde, _last_migration
from spark_statestore.stores.kinds import kind_of_store
from spark_statestore.stores.ttl import TtlKeyValueStore

CHUNK = 4096


def migration_batch(serde: Any) -> int | None:
    """The batch the newest migration of `serde`'s schema takes effect in (None: none)."""
    if not isinstance(serde, RecordSerde):
        return None
    index = _last_migration(serde.history)
    return None if index is None else serde.history[index].migrated_since


def migrate_if_due(store: Any, serde: Any, loaded_version: int, batch_id: int) -> int:
    """Rewrite the values of `store` (a bytes store) written before the newest migration of
    `serde`, if the state was loaded at a version before it (`loaded_version`) for a batch
    at or after it (`batch_id`); returns how many values were rewritten."""
    since = migration_batch(serde)
    if since is None or not loaded_version < since <= batch_id:
        return 0
    kind = kind_of_store(store)
    if kind is None:
        raise TypeError(f"store must be a store of a known kind, got {type(store).__name__}: {store!r:.100}")
    return kind.migrate(store, serde)


def migrate_windows(store: Any, serde: RecordSerde) -> int:
    """A window store's migration: its live records, rewritten in one chunk."""
    entries = [(w.key, w.window.start, v) for w, v in store.all()]
    stale = [e for e in entries if serde.written_before_migration(e[2])]
    new = serde.encode_many(serde.decode_many([e[2] for e in stale]))
    for (key, start, _), value in zip(stale, new):
        store.put(key, value, start)
    fault_point("migration:after-chunk")
    return len(stale)


def migrate_key_values(store: Any, serde: RecordSerde) -> int:
    """A key-value store's migration, in key order, `CHUNK` entries at a time."""
    done, start = 0, None
    while True:
        chunk = []
        with store.range(start, None) as entries:
            for key, value in entries:
                if start is not None and key == start:
                    continue
                chunk.append((key, value))
                if len(chunk) >= CHUNK:
                    break
        if not chunk:
            return done
        stale = [(k, v) for k, v in chunk if serde.written_before_migration(v)]
        new = serde.encode_many(serde.decode_many([v for _, v in stale]))
        rewritten = list(zip((k for k, _ in stale), new))
        if isinstance(store, TtlKeyValueStore):
            store.replace_values(rewritten)  # each entry keeps its expiry
        else:
            store.put_all(rewritten)
        done += len(stale)
        fault_point("migration:after-chunk")
        start = chunk[-1][0]
