"""A snapshot's columns file standing in for its restored copy, for a reader of every
record of a store: what the reader asks a restored database (its partition metadata, a
store's bookkeeping keys: TTL clock, window stream time) answered from the columns, so
the snapshot's RocksDB files are neither downloaded nor opened (opening and closing a
database is about 30 ms, several times that under load, per partition and read).

Nothing can be written to it: a read that would write changelogs into its copy (more
than it merges in memory) raises `NeedsCopy`, and is made again from a restored copy."""

from __future__ import annotations

from spark_statestore.checkpoint.snapshot_columns import SnapshotColumns
from spark_statestore.errors import StateStoreError
from spark_statestore.stores.names import META_COLUMN_FAMILY
from spark_statestore.stores.persistent_window import STREAM_TIME_KEY
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.txn.meta_entries import decode_offset, offset_key, property_key


class NeedsCopy(StateStoreError):
    """A read from a snapshot's columns needs a restored copy after all (it writes)."""


class ColumnsCopy:
    """The parts of a `TransactionalDatabase` a `PartitionMetadata`, `Recovery`'s checks and
    `store_columns` read, over a snapshot's verified columns. The stores' kinds are not
    looked up: `Recovery` checks the layout the snapshot recorded against the state's."""

    def __init__(self, columns: SnapshotColumns) -> None:
        self.columns = columns
        self.path = columns.source

    def get(self, family: str, key: bytes) -> bytes | None:
        return self.columns.get(family, key)

    def get_property(self, name: str) -> str | None:
        raw = self.get(META_COLUMN_FAMILY, property_key(name))
        return None if raw is None else raw.decode("utf-8")

    def committed_offset(self, name: str) -> int | None:
        raw = self.get(META_COLUMN_FAMILY, offset_key(name))
        return None if raw is None else decode_offset(raw)

    def open_store(self, spec: StoreSpec) -> ColumnsStore:
        return ColumnsStore(self, spec)

    def close(self) -> None:
        pass


class ColumnsStore:
    """A store of a `ColumnsCopy`: its stored keys, and the bookkeeping its kind's
    `StoreKind.live_keys` reads (a window store's stream time), as a freshly opened store
    of the restored copy reads them."""

    def __init__(self, copy: ColumnsCopy, spec: StoreSpec) -> None:
        self._copy, self._name = copy, spec.name

    def get(self, key: bytes) -> bytes | None:
        return self._copy.get(self._name, key)

    @property
    def observed_stream_time(self) -> int:
        raw = self.get(STREAM_TIME_KEY)
        return -1 if raw is None else int.from_bytes(raw, "big", signed=True)
