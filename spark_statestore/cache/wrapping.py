"""Putting a store behind the record cache: its kind picks the wrapper (`StoreKind.caching`)."""

from __future__ import annotations

from typing import Any

from spark_statestore.cache.caching import OnFlush
from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.stores.kinds import KINDS, kind_of_store


def cached(
    store: Any,
    cache: ThreadCache,
    on_flush: OnFlush | None = None,
    send_old_values: bool = False,
    namespace: str | None = None,
) -> Any:
    """`store` behind `cache`: a caching store of the same kind (see `Stores.caching`)."""
    kind = kind_of_store(store)
    if kind is None:
        kinds = " or ".join(kind.store_type.__name__ for kind in KINDS.values())
        raise TypeError(
            f"store must be a {kinds} of bytes (cache before calling typed()), got {type(store).__name__}: {store!r}"
        )
    return kind.caching(store, cache, on_flush, send_old_values, namespace)
