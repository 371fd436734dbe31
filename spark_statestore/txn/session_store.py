"""The transactional session store: a RocksDB session store with KIP-892 transactions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_statestore.stores.persistent_session import RocksDBSessionStore
from spark_statestore.stores.session_api import SessionSpec
from spark_statestore.txn.keyspace import TransactionalKeySpace
from spark_statestore.txn.stores import Transaction, TransactionalStore


class TransactionalSessionStore(TransactionalStore, RocksDBSessionStore):
    """A RocksDB session store whose writes commit with its database's transaction."""

    def __init__(
        self,
        name: str,
        keyspace: TransactionalKeySpace,
        database: Transaction,
        spec: SessionSpec,
        on_close: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(name, keyspace, spec, on_close)
        self._database = database

    def after_rollback(self) -> None:
        self._load_stream_state()  # the stream time was part of the transaction
