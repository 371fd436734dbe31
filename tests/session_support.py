"""Opening session stores for the session tests."""

from __future__ import annotations

from spark_statestore.factories import Stores
from spark_statestore.stores.memory_session import InMemorySessionStore
from spark_statestore.stores.session_api import SessionSpec
from spark_statestore.txn.session_store import TransactionalSessionStore


def open_session_store(kind: str, path: str, retention: int, clock: str = "records"):
    """An in-memory (`memory`) or transactional RocksDB (`rocksdb`) session store."""
    spec = SessionSpec.of("s", retention, clock)
    if kind == "memory":
        return InMemorySessionStore("s", spec)
    db = Stores.persistent_database(path, uncommitted_max_bytes=64)
    kv = db.key_value_store("s")
    db._stores["s"] = store = TransactionalSessionStore("s", kv.keyspace, db, spec, on_close=db.close)
    return store
