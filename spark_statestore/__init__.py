"""spark_statestore: Kafka-Streams-grade state stores for PySpark Structured Streaming.

Key-value, window (KIP-428) and session stores, transactional RocksDB storage (KIP-892) and a
record cache (KIP-63) that live in the Python worker. See README.md and API.md.
"""

import spark_statestore.kinds  # noqa: F401 - registers the store kinds (`stores/kinds.py`) first
from spark_statestore.cache import Change, ThreadCache
from spark_statestore.errors import (
    CorruptStateError,
    MissingStateError,
    StateStoreError,
    StoreClosedError,
    StoreLockedError,
)
from spark_statestore.factories import Stores
from spark_statestore.serde import Serdes
from spark_statestore.stores.session_api import SessionStore, SessionWindow
from spark_statestore.stores import (
    KeyValueStore,
    StoreIterator,
    Window,
    Windowed,
    WindowStore,
)
from spark_statestore.txn import IsolationLevel, TransactionalDatabase

__version__ = "0.1.0"

__all__ = [
    "Change",
    "ThreadCache",
    "CorruptStateError",
    "IsolationLevel",
    "KeyValueStore",
    "MissingStateError",
    "Serdes",
    "SessionStore",
    "SessionWindow",
    "StateStoreError",
    "StoreClosedError",
    "StoreIterator",
    "StoreLockedError",
    "Stores",
    "TransactionalDatabase",
    "Window",
    "WindowStore",
    "Windowed",
]
