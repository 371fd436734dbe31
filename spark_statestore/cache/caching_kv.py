"""A key-value store fronted by a record cache (KIP-63)."""

from __future__ import annotations

from itertools import takewhile
from typing import Any, Iterable, Iterator, Sequence

from spark_statestore.cache.caching import CachingLayer, Entry, OnFlush, past
from spark_statestore.cache.change import Change
from spark_statestore.cache.thread_cache import MISSING, ThreadCache
from spark_statestore.stores.api import KeyValueStore, prefix_end
from spark_statestore.stores.merge import merge_sorted
from spark_statestore.validation import check_iterable, check_key, check_pairs, check_value


class CachingKeyValueStore(CachingLayer, KeyValueStore):
    """Reads check the cache, then the store (filling the cache with what they find);
    writes are dirty cache entries; ranges merge both in key order."""

    def __init__(
        self,
        inner: KeyValueStore,
        cache: ThreadCache,
        on_flush: OnFlush | None = None,
        send_old_values: bool = False,
        namespace: str | None = None,
    ) -> None:
        KeyValueStore.__init__(self, inner.name, on_close=self._close_inner)
        self._attach(inner, cache, on_flush, send_old_values, namespace)

    def put(self, key: bytes, value: bytes | None) -> None:
        if not self._open:
            raise self._closed()
        if type(key) is not bytes:
            key = check_key(key)
        if value is not None and type(value) is not bytes:
            value = check_value(value)
        self._named.put(key, value, True)

    def get(self, key: bytes) -> bytes | None:
        if not self._open:
            raise self._closed()
        if type(key) is not bytes:
            key = check_key(key)
        value = self._named.get(key)
        if value is not MISSING:
            return value
        value = self._inner.get(key)
        if value is not None:
            self._named.put(key, value, False)
        return value

    def get_all(self, keys: Iterable[bytes]) -> list[bytes | None]:
        """Cached values where present; one `get_all` of the store for the rest (filling
        the cache with what it finds)."""
        if not self._open:
            raise self._closed()
        if self._passes_by():  # the cache holds no writes: the store has every latest value
            return self._inner.get_all(keys)
        keys = [k if type(k) is bytes else check_key(k) for k in check_iterable(keys, "keys", "bytes keys")]
        return self._read_through(keys, lambda missing: self._inner.get_all([keys[i] for i in missing]))

    def put_all(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        if not self._open:
            raise self._closed()
        if not self._passes_by():
            self._named.put_many(check_pairs(pairs), True)
            return
        if self._named:  # entries read earlier would hide these writes
            pairs = check_pairs(pairs)
            self._named.remove_many(key for key, _ in pairs)
        self._named.moved()
        self._inner.put_all(pairs)  # which checks every pair before it writes any

    def put_columns(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """`put_all` of two columns; straight to the store as columns (no pairs built)
        where the cache cannot help and holds no entry that could hide them."""
        if not self._open:
            raise self._closed()
        if self._named or not self._passes_by():
            super().put_columns(keys, values)  # `put_all`: through the cache, or by it
            return
        self._named.moved()
        self._inner.put_columns(keys, values)

    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        named, inner = self._named, self._inner

        def open_(after: bytes | None) -> Iterator[Entry]:
            if after is None:
                cached = named.items(key_from, key_to, True, reverse)
                stored = (inner.reverse_range if reverse else inner.range)(key_from, key_to)
            elif reverse:
                cached = named.items(key_from, after, False, True)
                stored = past(after, inner.reverse_range(key_from, after))
            else:
                cached = named.items(after + b"\x00", key_to, True, False)  # the least key after `after`
                stored = past(after, inner.range(after, key_to))
            return merge_sorted(cached, stored, reverse)

        return self._held(open_)

    def _read_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        named, inner, end = self._named, self._inner, prefix_end(prefix)

        def open_(after: bytes | None) -> Iterator[Entry]:
            if after is None:
                return merge_sorted(named.items(prefix, end, False), inner.prefix_scan(prefix), False)
            stored = takewhile(lambda entry: entry[0].startswith(prefix), past(after, inner.range(after, None)))
            return merge_sorted(named.items(after + b"\x00", end, False), stored, False)

        return self._held(open_)

    def approximate_num_entries(self) -> int:
        if not self._open:
            raise self._closed()
        return self._inner.approximate_num_entries() + len(self._named.dirty)

    def _write_to_store(self, entries: list[tuple[Any, bytes | None]]) -> list[Change]:
        """One `get_all` of the store for the old values it needs (the keys are distinct,
        so reading them all before writing reads what per-entry reads would), then one
        `put_all`. Without a listener no `Change` is made."""
        inner = self._inner
        send_old = self._send_old_values
        forward = self._on_flush is not None
        olds = iter(inner.get_all([key for key, new in entries if send_old or new is None]))
        writes = []
        changes = []
        for key, new in entries:
            old = next(olds) if send_old or new is None else None
            if new is None and old is None:
                continue  # written and deleted again: the store never had it
            writes.append((key, new))
            if forward:
                changes.append(Change(key, new, old if send_old else None))
        inner.put_all(writes)
        return changes
