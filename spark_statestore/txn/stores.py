"""The KIP-892 surface of persistent stores: `commit`, `committed_offset`, `rollback`,
`approximate_num_uncommitted_bytes`, `read_only`. A store's transaction is its
database's: stores opened in one `TransactionalDatabase` commit together."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

from spark_statestore.stores.kv_store import RocksDBKeyValueStore
from spark_statestore.stores.persistent_window import RocksDBWindowStore
from spark_statestore.stores.spec import WindowSpec
from spark_statestore.txn.isolation import IsolationLevel
from spark_statestore.txn.keyspace import TransactionalKeySpace
from spark_statestore.txn.metrics import TransactionMetrics
from spark_statestore.txn.views import ReadOnlyView


class Transaction(Protocol):
    """What a store needs of the database whose transaction it shares (a
    `TransactionalDatabase`)."""

    metrics: TransactionMetrics

    def commit(self, offsets: Mapping[str, int] | None = None) -> None: ...

    def committed_offset(self, name: str) -> int | None: ...

    def rollback(self) -> None: ...

    def view(self, store: Any, isolation: Any = IsolationLevel.READ_COMMITTED) -> ReadOnlyView: ...


class TransactionalStore:
    """Mixin for stores whose keyspace is a `TransactionalKeySpace`."""

    _database: Transaction
    _ks: TransactionalKeySpace
    _open: bool

    def _require_open(self) -> None:
        if not self._open:
            raise self._closed()  # type: ignore[attr-defined]

    @property
    def database(self) -> Transaction:
        return self._database

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        """Atomically persist every write since the last commit together with `offsets`."""
        self._require_open()
        self._database.commit(offsets)

    def committed_offset(self, name: str) -> int | None:
        """The offset committed last under `name`, or None."""
        self._require_open()
        return self._database.committed_offset(name)

    def rollback(self) -> None:
        """Discard every write since the last commit."""
        self._require_open()
        self._database.rollback()

    def approximate_num_uncommitted_bytes(self) -> int:
        """Uncommitted bytes of this store (key and value bytes plus CPython's per-record
        cost, `txn.budget.uncommitted_cost`; 0 after commit or rollback); overwrites of a
        pending key replace its cost."""
        self._require_open()
        return self._ks.uncommitted_bytes

    def read_only(self, isolation: Any = IsolationLevel.READ_COMMITTED) -> ReadOnlyView:
        """A read-only view with the same read methods, at the given isolation level."""
        self._require_open()
        return self._database.view(self, isolation)

    @property
    def transaction_metrics(self) -> TransactionMetrics:
        return self._database.metrics

    def after_rollback(self) -> None:
        """The database rolled the transaction back: drop what the store derived from it."""


class TransactionalKeyValueStore(TransactionalStore, RocksDBKeyValueStore):
    """A RocksDB key-value store with KIP-892 transactions."""

    def __init__(
        self,
        name: str,
        keyspace: TransactionalKeySpace,
        database: Transaction,
        on_close: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(name, keyspace, on_close)
        self._database = database


class TransactionalWindowStore(TransactionalStore, RocksDBWindowStore):
    """A RocksDB window store with KIP-892 transactions."""

    def __init__(
        self,
        name: str,
        keyspace: TransactionalKeySpace,
        database: Transaction,
        spec: WindowSpec,
        on_close: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(name, keyspace, spec, on_close)
        self._database = database

    def after_rollback(self) -> None:
        self._load_stream_state()  # the stream time and sequence were part of the transaction
