"""Store protocols and implementations, and `StoreSpec` (`spec`), the one description of
a store that the layers above record and check (knows nothing of Spark, transactions or
caching)."""

from spark_statestore.stores.api import KeyValueStore, StateStore
from spark_statestore.stores.iterators import StoreIterator
from spark_statestore.stores.kv_store import InMemoryKeyValueStore, RocksDBKeyValueStore
from spark_statestore.stores.memory_window import InMemoryWindowStore
from spark_statestore.stores.persistent_window import RocksDBWindowStore
from spark_statestore.stores.rocksdb import RocksDatabase
from spark_statestore.stores.window_api import WindowStore, WindowStoreMetrics
from spark_statestore.stores.windowed import Window, Windowed

__all__ = [
    "InMemoryKeyValueStore",
    "InMemoryWindowStore",
    "KeyValueStore",
    "RocksDBKeyValueStore",
    "RocksDBWindowStore",
    "RocksDatabase",
    "StateStore",
    "StoreIterator",
    "Window",
    "WindowStore",
    "WindowStoreMetrics",
    "Windowed",
]
