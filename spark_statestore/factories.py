"""`Stores`: the factories users build stores with (API.md).

This module sits above the layers it composes (stores, transactions, caching), so the
layers themselves stay independent of each other.
"""

from __future__ import annotations

import os
from typing import Any

from spark_statestore.stores.api import KeyValueStore, WindowStore
from spark_statestore.stores.keyspace import ColumnFamilyKeySpace
from spark_statestore.stores.kv_store import InMemoryKeyValueStore, RocksDBKeyValueStore
from spark_statestore.stores.memory_window import InMemoryWindowStore
from spark_statestore.stores.persistent_window import RocksDBWindowStore
from spark_statestore.stores.rocksdb import RocksDatabase, check_store_name
from spark_statestore.validation import check_int, check_name, to_millis


def window_store_parameters(
    name: Any, retention_period: Any, window_size: Any, retain_duplicates: Any
) -> tuple[str, int, int, bool]:
    """Validate window-store parameters in the order and with the messages of API.md."""
    if name is None:
        raise TypeError("name cannot be None")
    name = check_name(name)
    retention = to_millis(retention_period, "retention_period")
    if retention < 0:
        raise ValueError("retention_period cannot be negative")
    size = to_millis(window_size, "window_size")
    if size < 0:
        raise ValueError("window_size cannot be negative")
    if size > retention:
        raise ValueError(
            f"The retention period of the window store {name} must be no smaller than its "
            f"window size. Got size=[{size}], retention=[{retention}]"
        )
    if not isinstance(retain_duplicates, bool):
        raise TypeError(
            f"retain_duplicates must be a bool, got {type(retain_duplicates).__name__}: "
            f"{retain_duplicates!r}"
        )
    return name, retention, size, retain_duplicates


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
    def persistent_key_value_store(name: str, path: str | os.PathLike[str]) -> KeyValueStore:
        """A RocksDB key-value store in its own database directory `path`."""
        name = check_store_name(check_name(name))
        db = RocksDatabase(_check_path(path))
        try:
            db.register_store(name, {"kind": "key_value"})
            return RocksDBKeyValueStore(name, ColumnFamilyKeySpace(db, name), on_close=db.close)
        except BaseException:
            db.close()
            raise

    @staticmethod
    def in_memory_window_store(
        name: str, retention_period: Any, window_size: Any, retain_duplicates: bool = False
    ) -> WindowStore:
        """A KIP-428 in-memory window store."""
        name, retention, size, dups = window_store_parameters(
            name, retention_period, window_size, retain_duplicates
        )
        return InMemoryWindowStore(name, retention, size, dups)

    @staticmethod
    def persistent_window_store(
        name: str,
        path: str | os.PathLike[str],
        retention_period: Any,
        window_size: Any,
        retain_duplicates: bool = False,
        segment_interval: Any = None,
    ) -> WindowStore:
        """A RocksDB window store in its own database directory `path`."""
        name, retention, size, dups = window_store_parameters(
            name, retention_period, window_size, retain_duplicates
        )
        check_store_name(name)
        interval = None
        if segment_interval is not None:
            interval = check_int(to_millis(segment_interval, "segment_interval"), "segment_interval", 1)
        db = RocksDatabase(_check_path(path))
        try:
            db.register_store(name, {"kind": "window", "retain_duplicates": dups, "window_size": size})
            return RocksDBWindowStore(
                name, ColumnFamilyKeySpace(db, name), retention, size, dups, interval, on_close=db.close
            )
        except BaseException:
            db.close()
            raise
