"""Transactions for the persistent stores (KIP-892): a write buffer with read-your-writes,
atomic commits with offsets, isolation levels for readers, bounded uncommitted memory."""

from spark_statestore.txn.database import DEFAULT_UNCOMMITTED_MAX_BYTES, TransactionalDatabase
from spark_statestore.txn.isolation import IsolationLevel
from spark_statestore.txn.metrics import TransactionMetrics
from spark_statestore.txn.stores import (
    TransactionalKeyValueStore,
    TransactionalStore,
    TransactionalWindowStore,
)
from spark_statestore.txn.views import ReadOnlyView

__all__ = [
    "DEFAULT_UNCOMMITTED_MAX_BYTES",
    "IsolationLevel",
    "ReadOnlyView",
    "TransactionMetrics",
    "TransactionalDatabase",
    "TransactionalKeyValueStore",
    "TransactionalStore",
    "TransactionalWindowStore",
]
