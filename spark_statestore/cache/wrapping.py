"""Putting a store behind the record cache: the one place that picks the wrapper."""

from __future__ import annotations

from typing import Any

from spark_statestore.cache.caching import OnFlush
from spark_statestore.cache.caching_kv import CachingKeyValueStore
from spark_statestore.cache.caching_window import CachingWindowStore
from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.stores.api import KeyValueStore
from spark_statestore.stores.window_api import WindowStore


def cached(
    store: Any,
    cache: ThreadCache,
    on_flush: OnFlush | None = None,
    send_old_values: bool = False,
    namespace: str | None = None,
) -> Any:
    """`store` behind `cache`: a caching store of the same kind (see `Stores.caching`)."""
    if isinstance(store, WindowStore):
        return CachingWindowStore(store, cache, on_flush, send_old_values, namespace)
    if isinstance(store, KeyValueStore):
        return CachingKeyValueStore(store, cache, on_flush, send_old_values, namespace)
    raise TypeError(
        f"store must be a KeyValueStore or WindowStore of bytes (cache before calling "
        f"typed()), got {type(store).__name__}: {store!r}"
    )
