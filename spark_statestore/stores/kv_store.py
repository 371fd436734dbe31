"""Key-value stores: one implementation over any `KeySpace`.

User keys are the keyspace's keys, unchanged. `InMemoryKeyValueStore` runs it on a
`MemoryKeySpace` (whose iterators are live views), `RocksDBKeyValueStore` on a RocksDB
column family or a transaction over one.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

from spark_statestore.stores.api import KeyValueStore, prefix_end
from spark_statestore.stores.keyspace import KeySpace, MemoryKeySpace
from spark_statestore.stores.damage import storage_error
from spark_statestore.validation import check_iterable, check_key, check_pairs, check_value, columns_are_bytes


class KeySpaceKeyValueStore(KeyValueStore):
    """A key-value store whose records are the entries of a `KeySpace`."""

    def __init__(
        self, name: str, keyspace: KeySpace, on_close: Callable[[], Any] | None = None
    ) -> None:
        super().__init__(name, on_close)
        self._ks = keyspace

    @property
    def keyspace(self) -> KeySpace:
        return self._ks

    def put(self, key: bytes, value: bytes | None) -> None:
        if not self._open:
            raise self._closed()
        if type(key) is not bytes:
            key = check_key(key)
        if value is None:
            self._ks.delete(key)
        else:
            if type(value) is not bytes:
                value = check_value(value)
            self._ks.put(key, value)

    def get(self, key: bytes) -> bytes | None:
        if not self._open:
            raise self._closed()
        if type(key) is not bytes:
            key = check_key(key)
        try:
            return self._ks.get(key)
        except Exception as e:
            raise storage_error(e) from None

    def get_all(self, keys: Iterable[bytes]) -> list[bytes | None]:
        if not self._open:
            raise self._closed()
        keys = check_iterable(keys, "keys", "bytes keys")
        checked = [k if type(k) is bytes else check_key(k) for k in keys]
        try:
            return self._ks.get_many(checked) if checked else []
        except Exception as e:
            raise storage_error(e) from None

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        if not self._open:
            raise self._closed()
        key = check_key(key)
        value = check_value(value)
        previous = self.get(key)
        if previous is None and value is not None:
            self._ks.put(key, value)
        return previous

    def put_all(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        if not self._open:
            raise self._closed()
        self._ks.put_many(check_pairs(pairs))

    def put_columns(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Lists of bytes keys and bytes-or-None values go to the keyspace as columns;
        anything else takes `put_all`'s path (its checks and errors)."""
        if not self._open:
            raise self._closed()
        lists = type(keys) is list and type(values) is list and len(keys) == len(values)
        if lists and columns_are_bytes(keys, values):
            self._ks.put_columns(keys, values)
        else:
            super().put_columns(keys, values)

    def delete(self, key: bytes) -> bytes | None:
        if not self._open:
            raise self._closed()
        key = check_key(key)
        previous = self.get(key)
        if previous is not None:
            self._ks.delete(key)
        return previous

    def _read_range(
        self, key_from: bytes | None, key_to: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        hi = None if key_to is None else key_to + b"\x00"
        return self._ks.scan(key_from, hi, reverse)

    def _read_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._ks.scan(prefix, prefix_end(prefix), False)

    def approximate_num_entries(self) -> int:
        if not self._open:
            raise self._closed()
        return self._ks.approximate_num_entries()

    def flush(self) -> None:
        if not self._open:
            raise self._closed()
        self._ks.flush()


class InMemoryKeyValueStore(KeySpaceKeyValueStore):
    """Sorted in-memory key-value store; closing it drops its data."""

    persistent = False

    def __init__(self, name: str) -> None:
        keyspace = MemoryKeySpace()
        super().__init__(name, keyspace, on_close=keyspace.clear)


class RocksDBKeyValueStore(KeySpaceKeyValueStore):
    """Key-value store on a RocksDB column family (or a transaction over one)."""

    persistent = True
