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
from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.cache.wrapping import cached
from spark_statestore.kinds.build import build_store, wrap_layers
from spark_statestore.kinds.session import SESSION
from spark_statestore.stores.api import KeyValueStore, StateStore
from spark_statestore.stores.session_api import SessionSpec, SessionStore
from spark_statestore.stores.spec import KEY_VALUE, WINDOW, Clock, StoreSpec, WindowSpec
from spark_statestore.stores.ttl import TtlKeyValueStore
from spark_statestore.stores.ttl_spec import TtlSpec
from spark_statestore.stores.window_api import WindowStore
from spark_statestore.txn.database import DEFAULT_UNCOMMITTED_MAX_BYTES, TransactionalDatabase
from spark_statestore.validation import check_name


class Stores:
    """Factories for key-value and window stores."""

    @staticmethod
    def in_memory_key_value_store(name: str, *, ttl: Any = None, ttl_clock: Any = "processing_time") -> KeyValueStore:
        """A sorted in-memory key-value store (`ttl`: entries expire, see `TtlKeyValueStore`)."""
        ttl_spec = None if ttl is None else TtlSpec.of(ttl, ttl_clock)
        return build_store(StoreSpec(check_name(name), KEY_VALUE, ttl=ttl_spec))  # any name: no column family

    @staticmethod
    def persistent_key_value_store(
        name: str,
        path: str | os.PathLike[str],
        *,
        wal: bool = True,
        uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
        ttl: Any = None,
        ttl_clock: Any = "processing_time",
    ) -> KeyValueStore:
        """A transactional RocksDB key-value store in its own database directory `path`
        (`ttl`: entries expire, see `TtlKeyValueStore`)."""
        spec = StoreSpec.key_value(name, ttl=ttl, ttl_clock=ttl_clock)
        db = Stores.persistent_database(path, wal=wal, uncommitted_max_bytes=uncommitted_max_bytes)
        try:
            return build_store(spec, db, on_close=db.close)
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
            path, wal=wal, uncommitted_max_bytes=uncommitted_max_bytes, lock_timeout=lock_timeout
        )

    @staticmethod
    def in_memory_window_store(
        name: str,
        retention_period: Any,
        window_size: Any,
        retain_duplicates: bool = False,
        *,
        clock: Clock | str = Clock.RECORDS,
    ) -> WindowStore:
        """A KIP-428 in-memory window store (`clock`: see `WindowSpec`)."""
        window = WindowSpec.of(name, retention_period, window_size, retain_duplicates, clock=clock)
        return build_store(StoreSpec(name, WINDOW, window))  # any name: no column family

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
        clock: Clock | str = Clock.RECORDS,
    ) -> WindowStore:
        """A transactional RocksDB window store in its own database directory `path`
        (`clock`: see `WindowSpec`)."""
        spec = StoreSpec.window(name, retention_period, window_size, retain_duplicates, segment_interval, clock=clock)
        db = Stores.persistent_database(path, wal=wal, uncommitted_max_bytes=uncommitted_max_bytes)
        try:
            return build_store(spec, db, on_close=db.close)
        except BaseException:
            db.close()
            raise

    @staticmethod
    def in_memory_session_store(
        name: str, retention_period: Any, *, clock: Clock | str = Clock.RECORDS
    ) -> SessionStore:
        """An in-memory session store (Kafka Streams' `SessionStore`; `clock`: see `WindowSpec`)."""
        return build_store(StoreSpec(name, SESSION, SessionSpec.of(name, retention_period, clock)))

    @staticmethod
    def persistent_session_store(
        name: str,
        path: str | os.PathLike[str],
        retention_period: Any,
        *,
        wal: bool = True,
        uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
        clock: Clock | str = Clock.RECORDS,
    ) -> SessionStore:
        """A transactional RocksDB session store in its own database directory `path`."""
        spec = StoreSpec.of(SESSION, name, SessionSpec.of(name, retention_period, clock))
        db = Stores.persistent_database(path, wal=wal, uncommitted_max_bytes=uncommitted_max_bytes)
        try:
            return build_store(spec, db, on_close=db.close)
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
        A TTL store is cached below its expiry (the cache holds its entries' expiries).
        """
        if isinstance(store, TtlKeyValueStore):
            spec = StoreSpec(store.name, KEY_VALUE, ttl=store.ttl)
            return wrap_layers(
                spec, store.inner, cache=cache, on_flush=on_flush, send_old_values=send_old_values, namespace=namespace
            ).store
        return cached(store, cache, on_flush, send_old_values, namespace)
