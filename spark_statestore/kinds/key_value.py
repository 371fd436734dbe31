"""The key-value kind: a sorted map of keys to values, optionally with a TTL per entry.

Its stored key is the user key; a TTL store's are `0x00 | key` (an entry), `0x01 | expiry
(8 bytes) | key` (the entry's index entry, which goes with it) and its clock (bookkeeping):
see `stores/ttl.py`. A TTL store records another kind for its column family, so that
neither opens the other.
"""

from __future__ import annotations

from typing import Any, Callable

from spark_statestore.cache.caching_kv import CachingKeyValueStore
from spark_statestore.stores.api import KeyValueStore
from spark_statestore.stores.kinds import StoreKind
from spark_statestore.stores.kv_store import InMemoryKeyValueStore, RocksDBKeyValueStore
from spark_statestore.stores.migration import migrate_key_values
from spark_statestore.stores.protocol import KindSpec
from spark_statestore.stores.spec import KEY_VALUE
from spark_statestore.stores.ttl import ENTRY, INDEX
from spark_statestore.stores.typed import TypedKeyValueStore
from spark_statestore.txn.stores import TransactionalKeyValueStore

KEY_VALUE_TTL = "key_value_ttl"  # a RocksDB record's kind only (see store_record)


class KeyValueKind(StoreKind):
    """Key-value stores (API.md `KeyValueStore`)."""

    name = KEY_VALUE
    store_type = KeyValueStore
    takes_ttl = True
    reads = frozenset(
        {
            "get",
            "get_all",
            "range",
            "reverse_range",
            "all",
            "reverse_all",
            "prefix_scan",
            "approximate_num_entries",
            "name",
            "persistent",
            "is_open",
        }
    )

    def store_record(self, spec: KindSpec) -> dict[str, Any]:
        if spec.ttl is None:
            return {"kind": self.name}
        # entries of a TTL store carry their expiry: another kind, so neither opens the
        # other; another duration or clock is another declaration, as in a layout
        return {"kind": KEY_VALUE_TTL, "ttl": spec.ttl.as_dict()}

    def describe(self, recorded: dict[str, Any]) -> str:
        return "key-value store"

    def user_key(self, spec: KindSpec, raw: bytes) -> bytes | None:
        if spec.ttl is None:
            return raw
        if raw[:1] == ENTRY:  # an entry, its expiry index entry, or the clock (see `ttl`)
            return raw[len(ENTRY) :]
        return raw[len(INDEX) + 8 :] if raw[:1] == INDEX else None

    def in_memory(self, spec: KindSpec) -> InMemoryKeyValueStore:
        return InMemoryKeyValueStore(spec.name)

    def on_keyspace(self, spec: KindSpec, keyspace: Any, database: Any, on_close: Any) -> TransactionalKeyValueStore:
        return TransactionalKeyValueStore(spec.name, keyspace, database, on_close)

    def view_store(self, spec: KindSpec, keyspace: Any) -> RocksDBKeyValueStore:
        return RocksDBKeyValueStore(spec.name, keyspace)

    def caching(
        self, store: Any, cache: Any, on_flush: Callable | None, send_old_values: bool, namespace: str | None
    ) -> CachingKeyValueStore:
        return CachingKeyValueStore(store, cache, on_flush, send_old_values, namespace)

    def typed(self, store: Any, key_serde: Any, value_serde: Any) -> TypedKeyValueStore:
        return TypedKeyValueStore(store, key_serde, value_serde)

    def migrate(self, store: Any, serde: Any) -> int:
        return migrate_key_values(store, serde)
