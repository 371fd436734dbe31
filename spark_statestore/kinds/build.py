"""`build_store`: the one place a store's layers are put together.

As Kafka Streams' store builders do (`Metered(Caching(ChangeLogging(inner)))`), a store is
its kind's layers composed from the inside out:

    inner          the kind's in-memory store, or its transactional store on a keyspace of
                   a `TransactionalDatabase` (writes become durable at `commit`)
    caching        behind the record cache (KIP-63), when a cache is given and the spec is
                   cached; its flushes forward `Change` records
    ttl            expiring entries, when the spec has a TTL (above the cache, which holds
                   the entries' expiries)
    typed          the typed facade, when serdes other than bytes are given

Factories, partition state, the state readers and Spark's declarations all build here.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from spark_statestore.cache.caching import OnFlush
from spark_statestore.serde import BytesSerde
from spark_statestore.stores.api import StateStore
from spark_statestore.stores.protocol import Store
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.stores.ttl import user_changes, with_ttl


class StoreLayers(NamedTuple):
    """A built store (`store`: the outermost layer) and its caching layer (None: not
    cached), which the owner of the cache flushes."""

    store: Any
    caching: Any


def build_layers(
    spec: StoreSpec, database: Any = None, *, on_close: Callable[[], Any] | None = None, **layers: Any
) -> StoreLayers:
    """The store `spec` describes, in `database` (None: in memory; `on_close`: see
    `TransactionalDatabase.open_store`), with the layers `wrap_layers` puts above it."""
    inner = spec.store_kind.in_memory(spec) if database is None else database.open_store(spec, on_close)
    return wrap_layers(spec, inner, **layers)


def build_store(spec: StoreSpec, database: Any = None, **layers: Any) -> Store:
    """`build_layers(...).store`: the store as its user works on it."""
    return build_layers(spec, database, **layers).store


def wrap_layers(
    spec: StoreSpec,
    inner: StateStore,
    *,
    cache: Any = None,
    on_flush: OnFlush | None = None,
    send_old_values: bool = False,
    namespace: str | None = None,
    serdes: tuple[Any, Any] | None = None,
) -> StoreLayers:
    """The layers above `inner`, a bytes store of `spec`'s kind (see module docstring);
    `on_flush` gets the changes as the store's user sees them."""
    caching = None
    store: Any = inner
    if cache is not None and spec.cached:
        if spec.ttl is not None and on_flush is not None:
            forward = on_flush
            on_flush = lambda changes: forward(user_changes(changes))  # noqa: E731
        store = caching = spec.store_kind.caching(inner, cache, on_flush, send_old_values, namespace)
    store = with_ttl(store, spec.ttl)
    if serdes is not None:
        store = typed_layer(spec, store, *serdes)
    return StoreLayers(store, caching)


def typed_layer(spec: StoreSpec, store: Any, key_serde: Any, value_serde: Any) -> Any:
    """`store` (or a read-only view of it) through the serdes: its kind's typed facade, or
    the store itself for bytes keys and values."""
    if isinstance(key_serde, BytesSerde) and isinstance(value_serde, BytesSerde):
        return store
    return spec.store_kind.typed(store, key_serde, value_serde)
