"""Ordered byte keyspaces: what the persistent stores are written against.

A store encodes its records into keys of one keyspace and calls only the methods of
`KeySpace`. `MemoryKeySpace` keeps them in a `SortedMap`; `ColumnFamilyKeySpace` writes
straight to a RocksDB column family; the transaction layer (`spark_statestore.txn`)
provides a keyspace with the same methods that buffers writes until commit, so the stores
need not know which one they run on.
"""

from __future__ import annotations

from itertools import compress, islice
from operator import and_, itemgetter
from typing import Iterable, Iterator, Protocol, Sequence

import rocksdict

from spark_statestore.stores.rocksdb import RocksDatabase
from spark_statestore.stores.rocksdb_scan import first_in, last_in, scan_pairs
from spark_statestore.stores.sorted_map import SortedMap

_first, _second = itemgetter(0), itemgetter(1)
# a multi-get of at least this many keys first bounds them by two seeks (`get_many`)
_BOUNDED_GET_MIN = 64


class KeySpace(Protocol):
    """An ordered keyspace of bytes; ranges are `lo <= key < hi` (`None` = open end)."""

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def put_many(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply puts (`None` value = delete) atomically where the keyspace can."""

    def put_columns(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """`put_many` of checked columns of equal length (`None` value = delete); a
        keyspace that buffers writes takes them without building a pair per record."""
        self.put_many(zip(keys, values))

    def delete_range(self, lo: bytes, hi: bytes) -> None: ...

    def scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def scan_columns(self, lo: bytes | None, hi: bytes | None) -> tuple[list[bytes], list[bytes]]:
        """A forward `scan`, whole, as `(keys, values)` lists (a keyspace that can read
        them without a Python step per pair does)."""
        return columns_of(list(self.scan(lo, hi)))

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes] | None: ...

    def seeker(self, lo: bytes, hi: bytes) -> KeySeeker:
        """Repeated forward reads of [lo, hi) (`KeySeeker`): a keyspace that can reuse
        one iterator for them does; every read sees at least what was written before."""
        return KeySpaceSeeker(self, hi)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes] | None: ...

    def approximate_num_entries(self) -> int: ...

    def flush(self) -> None: ...


class KeySeeker(Protocol):
    """Forward reads that seek again and again inside one range (a skip-scan)."""

    def first(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The first pair at or after `key` in the range."""

    def run(self, key: bytes, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` pairs from `key` up to `upper` (exclusive, at most the range's
        end)."""

    def more(self, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` more pairs of the last `run` (the same `upper`)."""


class KeySpaceSeeker:
    """A `KeySeeker` made of a keyspace's own `first` and `scan`."""

    __slots__ = ("_hi", "_ks", "_run")

    def __init__(self, keyspace: KeySpace, hi: bytes) -> None:
        self._ks = keyspace
        self._hi = hi
        self._run: Iterator[tuple[bytes, bytes]] = iter(())

    def first(self, key: bytes) -> tuple[bytes, bytes] | None:
        return self._ks.first(key, self._hi)

    def run(self, key: bytes, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        self._run = self._ks.scan(key, min(upper, self._hi))
        return list(islice(self._run, limit))

    def more(self, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return list(islice(self._run, limit))


def columns_of(pairs: list[tuple[bytes, bytes]]) -> tuple[list[bytes], list[bytes]]:
    """`(key, value)` pairs as a keys list and a values list (C-level passes)."""
    return list(map(_first, pairs)), list(map(_second, pairs))


class MemoryKeySpace(KeySpace):
    """A keyspace in a `SortedMap`; its scans are live views (see `SortedMap.iter_keys`)."""

    def __init__(self) -> None:
        self._map = SortedMap()
        self.get = self._map.get
        self.put = self._map.set
        self.delete = self._map.pop

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        get = self._map.get
        return [get(key) for key in keys]

    def put_many(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in pairs:
            if value is None:
                self._map.pop(key)
            else:
                self._map.set(key, value)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        for key in list(self._map.iter_keys(lo, hi, True, False)):
            self._map.pop(key)

    def scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self._map.iter_items(lo, hi, True, False, reverse)

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes] | None:
        return next(self._map.iter_items(lo, hi, True, False), None)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes] | None:
        return next(self._map.iter_items(lo, hi, True, False, True), None)

    def approximate_num_entries(self) -> int:
        return len(self._map)

    def flush(self) -> None:
        """Nothing to persist."""

    def clear(self) -> None:
        self._map.clear()


class ColumnFamilyKeySpace(KeySpace):
    """A keyspace that writes straight to one RocksDB column family.

    Point operations are the column family's own methods, bound once, so a store's
    `get` reaches RocksDB without another Python frame.
    """

    def __init__(self, db: RocksDatabase, name: str) -> None:
        self.db = db
        self.name = name
        cf = db.column_family(name)
        self._cf = cf
        self.get = cf.get
        self.put = cf.put
        self.delete = cf.delete

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """One `get` per key, mapped at C level: rocksdict's multi-get (`get` of a list)
        measured 1.3 to 2.5 times slower per key, for present and absent keys alike.

        Many keys are first bounded by two seeks: the first and the last stored key
        between the smallest and the largest of them. Keys outside that span are absent
        without a lookup (a window store's new windows lie past every stored one, and an
        absent key costs RocksDB as much as a present one)."""
        get = self.get
        if len(keys) < _BOUNDED_GET_MIN:
            return list(map(get, keys))
        smallest, largest = min(keys), max(keys)
        end = largest + b"\x00"  # the least key above `largest`
        low = first_in(self._cf, smallest, end)
        if low is None:
            return [None] * len(keys)
        high = last_in(self._cf, low[0], end)
        high_key = low[0] if high is None else high[0]
        if low[0] == smallest and high_key == largest:
            return list(map(get, keys))
        inside = list(compress(keys, map(and_, map(low[0].__le__, keys), map(high_key.__ge__, keys))))
        return list(map(dict(zip(inside, map(get, inside))).get, keys))

    def put_many(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        handle = self.db.handle(self.name)
        for key, value in pairs:
            if value is None:
                batch.delete(key, handle)
            else:
                batch.put(key, value, handle)
        del handle
        self.db.write(batch)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        self._cf.delete_range(lo, hi)

    def scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self.db.scan(self._cf, lo, hi, reverse)

    def scan_columns(self, lo: bytes | None, hi: bytes | None) -> tuple[list[bytes], list[bytes]]:
        return columns_of(scan_pairs(self._cf, lo, hi))

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes] | None:
        return first_in(self._cf, lo, hi)

    def seeker(self, lo: bytes, hi: bytes) -> KeySeeker:
        """One iterator reseeked for every read (`rocksdb_scan.Seeker`)."""
        return self.db.seeker(self._cf, hi)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes] | None:
        return last_in(self._cf, lo, hi)

    def approximate_num_entries(self) -> int:
        return self.db.property_int("rocksdb.estimate-num-keys", self.name)

    def flush(self) -> None:
        self.db.flush()
