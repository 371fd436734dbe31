"""The record cache (KIP-63): a byte budget shared by named caches that de-duplicate
writes to their stores and to downstream consumers (`Change` records on flush)."""

from spark_statestore.cache.caching_kv import CachingKeyValueStore
from spark_statestore.cache.caching_window import CachingWindowStore
from spark_statestore.cache.change import Change
from spark_statestore.cache.thread_cache import ENTRY_OVERHEAD, NamedCache, ThreadCache, entry_size
from spark_statestore.cache.wrapping import cached

__all__ = [
    "ENTRY_OVERHEAD",
    "CachingKeyValueStore",
    "CachingWindowStore",
    "Change",
    "NamedCache",
    "ThreadCache",
    "cached",
    "entry_size",
]
