"""Read-only views of transactional stores at an isolation level.

A view is a second store object over a different keyspace, behind a facade that offers
only the read methods: READ_UNCOMMITTED views read the writer's transactional keyspace
(pending writes included); READ_COMMITTED views read the committed column family, under
the database's commit lock so that a commit applied in several batches is never seen
half done.

The writer changes its transaction buffer without a lock (a lock on every write would
cost its hot path for the sake of a rare reader), so a READ_UNCOMMITTED view may be read
only on the thread that created it, the writer's: a read from another thread, a read of
one of its iterators there included (which ends that iterator), raises `StateStoreError`
naming the store and both threads. Other threads read through READ_COMMITTED views.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

from spark_statestore.errors import StateStoreError
from spark_statestore.stores.keyspace import ColumnFamilyKeySpace, KeySeeker
from spark_statestore.stores.kinds import StoreKind
from spark_statestore.txn.isolation import IsolationLevel
from spark_statestore.txn.keyspace import TransactionalKeySpace

_get_ident = threading.get_ident

def _after(
    head: tuple[bytes, bytes] | None, rest: Iterator[tuple[bytes, bytes]]
) -> Iterator[tuple[bytes, bytes]]:
    """`head`, then `rest` (nothing if `head` is None): a generator, so that a store's
    `close()` ends a loop over it."""
    if head is None:
        return
    yield head
    yield from rest


class LockedKeySpace:
    """Committed data of a column family, read under the database's commit lock."""

    def __init__(self, inner: ColumnFamilyKeySpace, lock: threading.RLock) -> None:
        self._inner = inner
        self._lock = lock

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            return self._inner.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        with self._lock:
            return self._inner.get_many(keys)

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes] | None:
        with self._lock:
            return self._inner.first(lo, hi)

    def seeker(self, lo: bytes, hi: bytes) -> KeySeeker:
        """One iterator, created under the lock: every read of it sees one commit."""
        with self._lock:
            return self._inner.seeker(lo, hi)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes] | None:
        with self._lock:
            return self._inner.last(lo, hi)

    def scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            entries = self._inner.scan(lo, hi, reverse)
            head = next(entries, None)  # the RocksDB iterator is created here, under the lock
        return _after(head, entries)

    def scan_columns(self, lo: bytes | None, hi: bytes | None) -> tuple[list[bytes], list[bytes]]:
        with self._lock:
            return self._inner.scan_columns(lo, hi)

    def approximate_num_entries(self) -> int:
        return self._inner.approximate_num_entries()


class ThreadBoundKeySpace:
    """The writer's transactional keyspace, read on the thread that created the view
    only (see module docstring): every read, and every record an iterator draws, checks
    the thread first."""

    def __init__(self, inner: TransactionalKeySpace, store_name: str) -> None:
        self._inner = inner
        self._store_name = store_name
        self._owner = threading.current_thread()
        self._owner_id = threading.get_ident()

    def _check(self) -> None:
        if _get_ident() != self._owner_id:
            raise self._wrong_thread()

    def _wrong_thread(self) -> StateStoreError:
        return StateStoreError(
            f"the READ_UNCOMMITTED view of store {self._store_name!r} was read from thread "
            f"{threading.current_thread().name!r}, but it belongs to thread {self._owner.name!r}, which "
            f"created it: it reads the writer's uncommitted writes, which change without a lock; read "
            f"from other threads through a READ_COMMITTED view"
        )

    def get(self, key: bytes) -> bytes | None:
        if _get_ident() != self._owner_id:  # `_check`, inlined: the most frequent read
            raise self._wrong_thread()
        return self._inner.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self._check()
        return self._inner.get_many(keys)

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes] | None:
        if _get_ident() != self._owner_id:  # `_check`, inlined: each step of a skip-scan
            raise self._wrong_thread()
        return self._inner.first(lo, hi)

    def seeker(self, lo: bytes, hi: bytes) -> KeySeeker:
        self._check()
        return ThreadBoundSeeker(self._inner.seeker(lo, hi), self._check)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes] | None:
        self._check()
        return self._inner.last(lo, hi)

    def scan(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check()
        return self._bound(self._inner.scan(lo, hi, reverse))

    def _bound(self, entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        """`entries`, each drawn after a check of the thread (a generator runs on the
        thread that asks it for the next record)."""
        owner = self._owner_id
        if _get_ident() != owner:
            raise self._wrong_thread()
        for entry in entries:
            yield entry
            if _get_ident() != owner:
                raise self._wrong_thread()

    def scan_columns(self, lo: bytes | None, hi: bytes | None) -> tuple[list[bytes], list[bytes]]:
        self._check()
        return self._inner.scan_columns(lo, hi)

    def approximate_num_entries(self) -> int:
        self._check()
        return self._inner.approximate_num_entries()


class ThreadBoundSeeker:
    """A `KeySeeker` of a `ThreadBoundKeySpace`: each read checks the thread first."""

    __slots__ = ("_check", "_inner")

    def __init__(self, inner: KeySeeker, check: Any) -> None:
        self._inner = inner
        self._check = check

    def first(self, key: bytes) -> tuple[bytes, bytes] | None:
        self._check()
        return self._inner.first(key)

    def run(self, key: bytes, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        self._check()
        return self._inner.run(key, upper, limit)

    def more(self, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        self._check()
        return self._inner.more(upper, limit)


class ReadOnlyView:
    """The read methods of a store; everything that writes is absent."""

    def __init__(self, store: Any, isolation: IsolationLevel, kind: StoreKind) -> None:
        self._store = store
        self.isolation = isolation
        self._kind = kind
        self._allowed = kind.reads

    def __getattr__(self, name: str) -> Any:
        if name in self._allowed:
            return getattr(self._store, name)
        raise AttributeError(
            f"read-only view ({self.isolation.name}) of store {self._store.name!r} has no "
            f"attribute {name!r}: views cannot write"
        )

    def typed(self, key_serde: Any, value_serde: Any) -> Any:
        """A typed facade over the view (still read-only)."""
        return self._kind.typed(self, key_serde, value_serde)

    def close(self) -> None:
        """End the view's open iterators; the store itself stays open."""
        self._store.close()

    def __enter__(self) -> "ReadOnlyView":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<read-only {self.isolation.name} view of {self._store!r}>"
