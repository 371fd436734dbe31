"""`Stores`: the factories users build stores with (API.md).

This module sits above the layers it composes (stores, transactions, caching), so the
layers themselves stay independent of each other.

Persistent stores are transactional (KIP-892): writes become durable at `commit()`;
`close()` discards what was not committed.
"""

from __future__ import annotations

import os
from typing import Any

from spark_statestore.cache.caching import OnFlush
from spark_statestore.cache.caching_kv import CachingKeyValueStore
from spark_statestore.cache.caching_window import CachingWindowStore
from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.stores.api import KeyValueStore, StateStore, WindowStore
from spark_statestore.stores.kv_store import InMemoryKeyValueStore
from spark_statestore.stores.memory_window import InMemoryWindowStore
from spark_statestore.stores.rocksdb import check_store_name
from spark_statestore.txn.database import DEFAULT_UNCOMMITTED_MAX_BYTES, TransactionalDatabase
from spark_statestore.validation import check_name, window_segment_interval, window_store_parameters


def _check_path(path: Any) -> str:
    if path is None:
        raise TypeError("path cannot be None")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}: {path!r}")
    return os.fspath(path)


class Stores:
    """Factories for key-value and window stores."""

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueStore:
        """A sorted in-memory key-value store."""
        return InMemoryKeyValueStore(check_name(name))

    @staticmethod
    def persistent_key_value_store(
        name: str,
        path: str | os.PathLike[str],
        *,
        wal: bool = True,
        uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
    ) -> KeyValueStore:
        """A transactional RocksDB key-value store in its own database directory `path`."""
        name = check_store_name(check_name(name))
        db = Stores.persistent_database(path, wal=wal, uncommitted_max_bytes=uncommitted_max_bytes)
        try:
            return db.key_value_store(name, on_close=db.close)
        except BaseException:
            db.close()
            raise

    @staticmethod
    def persistent_database(
        path: str | os.PathLike[str],
        *,
        wal: bool = True,
        uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
        lock_timeout: float = 0.0,
    ) -> TransactionalDatabase:
        """A RocksDB directory for several stores that commit together
        (`db.key_value_store(name)`, `db.window_store(...)`, `db.commit(offsets)`)."""
        return TransactionalDatabase(
            _check_path(path), wal=wal, uncommitted_max_bytes=uncommitted_max_bytes, lock_timeout=lock_timeout
        )

    @staticmethod
    def in_memory_window_store(
        name: str,
        retention_period: Any,
        window_size: Any,
        retain_duplicates: bool = False,
        *,
        clock: str = "records",
    ) -> WindowStore:
        """A KIP-428 in-memory window store (`clock`: see `WindowStore`)."""
        name, retention, size, dups = window_store_parameters(
            name, retention_period, window_size, retain_duplicates
        )
        return InMemoryWindowStore(name, retention, size, dups, clock)

    @staticmethod
    def persistent_window_store(
        name: str,
        path: str | os.PathLike[str],
        retention_period: Any,
        window_size: Any,
        retain_duplicates: bool = False,
        segment_interval: Any = None,
        *,
        wal: bool = True,
        uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
        clock: str = "records",
    ) -> WindowStore:
        """A transactional RocksDB window store in its own database directory `path`
        (`clock`: see `WindowStore`)."""
        name, retention, size, dups = window_store_parameters(
            name, retention_period, window_size, retain_duplicates
        )
        check_store_name(name)
        interval = window_segment_interval(segment_interval)
        db = Stores.persistent_database(path, wal=wal, uncommitted_max_bytes=uncommitted_max_bytes)
        try:
            return db.window_store(name, retention, size, dups, interval, on_close=db.close, clock=clock)
        except BaseException:
            db.close()
            raise

    @staticmethod
    def caching(
        store: StateStore,
        cache: ThreadCache,
        on_flush: OnFlush | None = None,
        send_old_values: bool = False,
        *,
        namespace: str | None = None,
    ) -> StateStore:
        """`store` behind the record cache `cache` (KIP-63): a store of the same kind whose
        writes reach `store`, and `on_flush` as `Change` records, at flush or eviction.

        `namespace` names the store's cache inside `cache`; give one to find the cached
        entries again after reopening the store (the default is private to this wrapper).
        """
        if isinstance(store, WindowStore):
            return CachingWindowStore(store, cache, on_flush, send_old_values, namespace)
        if isinstance(store, KeyValueStore):
            return CachingKeyValueStore(store, cache, on_flush, send_old_values, namespace)
        raise TypeError(
            f"store must be a KeyValueStore or WindowStore of bytes (cache before calling "
            f"typed()), got {type(store).__name__}: {store!r}"
        )
