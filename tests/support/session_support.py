"""Opening session stores for the session tests."""

from __future__ import annotations

from spark_statestore import Stores


def open_session_store(kind: str, path: str, retention: int, clock: str = "records"):
    """An in-memory (`memory`) or transactional RocksDB (`rocksdb`) session store."""
    if kind == "memory":
        return Stores.in_memory_session_store("s", retention, clock=clock)
    return Stores.persistent_session_store("s", path, retention, uncommitted_max_bytes=64, clock=clock)
