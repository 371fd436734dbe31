"""A partition's stores as its tasks use them: behind the worker's record cache when the
store is cached, and behind its TTL wrapper when it has one.

The record cache of a worker outlives a partition's open/close: a store's cached entries
are kept in a named cache keyed by the identity of the version they are valid for
(`<local root>/<store>@<version>`), so a cache filled by one attempt is never used at a
version another attempt produced.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from spark_statestore.cache.change import Change
from spark_statestore.kinds.build import build_layers
from spark_statestore.partition.metadata import VersionId
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.txn.database import TransactionalDatabase

OnChanges = Callable[[str, "list[Change]"], Any]


def _prefix(root: str, name: str) -> str:
    """The start of the named caches of store `name` of the partition whose local root is `root`."""
    return f"{root}/{name}@"


def open_stores(
    db: TransactionalDatabase,
    specs: Sequence[StoreSpec],
    cache: Any,
    root: str,
    committed: VersionId,
    on_changes: OnChanges | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stores of `db` by name as tasks use them, and the cached ones among them (by
    name, unwrapped: what flushes); caches of the store filled at another version than
    `committed` are dropped."""
    stores: dict[str, Any] = {}
    cached_stores: dict[str, Any] = {}
    for spec in specs:
        namespace = None
        if cache is not None and spec.cached:
            prefix = _prefix(root, spec.name)
            namespace = f"{prefix}{committed}"
            for stale in cache.namespaces:  # filled at another version or by another attempt
                if stale.rpartition("@")[0] == prefix[:-1] and stale != namespace:  # not store "name@..."'s
                    cache.drop(stale)
        listener = None if on_changes is None else _forwarder(spec.name, on_changes)
        layers = build_layers(
            spec, db, cache=cache, on_flush=listener, send_old_values=listener is not None, namespace=namespace
        )
        stores[spec.name] = layers.store
        if layers.caching is not None:
            cached_stores[spec.name] = layers.caching
    return stores, cached_stores


def _forwarder(name: str, on_changes: OnChanges) -> Callable[[list[Change]], Any]:
    return lambda changes: on_changes(name, list(changes))


def rename_caches(
    cache: Any, root: str, names: Iterable[str], committed: VersionId, prepared: VersionId
) -> None:
    """The caches of stores `names`, valid at `committed`, are valid at `prepared` once the
    batch's changelog holds what they hold."""
    for name in names:
        cache.rename(f"{_prefix(root, name)}{committed}", f"{_prefix(root, name)}{prepared}")
