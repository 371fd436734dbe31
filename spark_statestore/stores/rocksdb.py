"""One RocksDB directory, opened in raw mode, holding a column family per store.

`RocksDatabase` owns everything that keeps the RocksDB lock alive (column-family objects,
handles, iterators), so `close()` really releases the directory for the next opener; in
rocksdict any live handle or iterator keeps the database open.

Facts this module works around (rocksdict 0.3): every existing column family must be
named at open; iterating a `Snapshot` ignores the
snapshot (plain iterators are consistent on their own). A manual `flush()` flushes only
one column family even with `atomic_flush` (measured: after a kill, the flushed family
had its data and the others had lost theirs), while creating a checkpoint flushes every
column family atomically; so `flush()` and `close()` flush through a checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import weakref
from typing import Any, Iterator

import rocksdict

from spark_statestore.errors import CorruptStateError, StoreClosedError, StoreLockedError
from spark_statestore.faults import fault_point
from spark_statestore.stores.damage import DAMAGE_MARKER, storage_error
from spark_statestore.stores.names import DEFAULT_COLUMN_FAMILY, META_COLUMN_FAMILY
from spark_statestore.stores.rocksdb_options import DEFAULT_WRITE_BUFFER_BYTES, RocksMemory, rocksdb_options
from spark_statestore.stores.rocksdb_scan import Seeker, scan_column_family
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.validation import check_bool, check_instance, check_int, check_path, check_seconds

def _is_lock_error(error: Exception) -> bool:
    text = str(error)
    return "LOCK" in text and ("lock" in text.lower())


class RocksDatabase:
    """A RocksDB database directory with named column families (created on first use).

    `wal=False` writes without the write-ahead log: a crash may lose the latest writes,
    but atomic flush keeps every column family at the same point (KIP-892's argument).
    `replayable=True` says a changelog can redo lost writes whose version is recorded in
    the metadata column family: then closing flushes the other column families first and
    the metadata last (after a crash the metadata is never ahead of the data), which costs
    less than an atomic flush through a checkpoint.
    A directory locked by another opener is retried for `lock_timeout` seconds, then
    `StoreLockedError` names it. With `memory`, the database's memtables and blocks count
    against that shared `RocksMemory` budget.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        wal: bool = True,
        lock_timeout: float = 0.0,
        write_buffer_bytes: int = DEFAULT_WRITE_BUFFER_BYTES,
        replayable: bool = False,
        memory: RocksMemory | None = None,
    ) -> None:
        self.path = check_path(path)
        self.wal = check_bool(wal, "wal")
        self.replayable = check_bool(replayable, "replayable")
        self.memory = check_instance(memory, RocksMemory, "rocks_memory")
        write_buffer_bytes = check_int(write_buffer_bytes, "write_buffer_bytes", 1 << 16)
        if memory is not None:
            write_buffer_bytes = min(write_buffer_bytes, memory.write_buffer_bytes)
        self._options = rocksdb_options(write_buffer_bytes, memory)
        self._cf_options = rocksdb_options(write_buffer_bytes, memory)
        self.write_options = rocksdict.WriteOptions()
        self.write_options.disable_wal = not wal
        self._db, self._names = self._open(check_seconds(lock_timeout, "lock_timeout"))
        self._db.set_write_options(self.write_options)
        self._cfs: dict[str, rocksdict.Rdict] = {}
        self._scans: weakref.WeakSet[Any] = weakref.WeakSet()
        self._open_flag = True

    # -- opening ------------------------------------------------------------------------

    def _existing_column_families(self) -> list[str]:
        path = self.path
        if not os.path.exists(path):
            return []
        if not os.path.isdir(path):
            raise CorruptStateError(f"state path {path} exists but is not a directory")
        if os.path.isdir(os.path.join(path, "LOCK")):  # RocksDB would say another opener holds it
            raise CorruptStateError(
                f"RocksDB database at {path} has a directory where its LOCK file should be"
            )
        entries = [e for e in os.listdir(path) if e != "LOCK"]
        if not entries:
            return []
        if DAMAGE_MARKER in entries:
            raise CorruptStateError(
                f"RocksDB database at {path} was reported damaged earlier: "
                f"{open(os.path.join(path, DAMAGE_MARKER)).read()[:300]}"
            )
        if not os.path.exists(os.path.join(path, "CURRENT")):
            raise CorruptStateError(
                f"RocksDB database at {path} is missing its CURRENT file "
                f"(found {sorted(entries)[:8]}); refusing to open it as an empty store"
            )
        try:
            return list(rocksdict.Rdict.list_cf(path, self._options))
        except Exception as e:
            raise CorruptStateError(f"cannot read the RocksDB database at {path}: {e}") from e

    def _open(self, lock_timeout: float) -> tuple[rocksdict.Rdict, set[str]]:
        if not os.path.lexists(self.path):
            try:
                os.makedirs(self.path)
            except OSError as e:  # a bad path, not damaged state
                raise ValueError(f"path {self.path!r} cannot hold a RocksDB database: {e}") from None
        deadline = time.monotonic() + lock_timeout
        delay = 0.01
        while True:
            names = self._existing_column_families()
            families = {n: self._cf_options for n in names if n != DEFAULT_COLUMN_FAMILY}
            try:
                db = rocksdict.Rdict(self.path, self._options, column_families=families)
                return db, set(families) | {DEFAULT_COLUMN_FAMILY}
            except Exception as e:
                if not _is_lock_error(e):
                    raise CorruptStateError(
                        f"cannot open the RocksDB database at {self.path}: {e}"
                    ) from e
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f"the RocksDB database at {self.path} is locked by another opener "
                        f"(waited {lock_timeout:.1f}s): {e}"
                    ) from e
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    # -- column families ----------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._open_flag

    def _check_open(self) -> None:
        if not self._open_flag:
            raise StoreClosedError(f"RocksDB database at {self.path} is closed")

    def column_family(self, name: str) -> rocksdict.Rdict:
        """The column family `name` as an `Rdict` (created if missing)."""
        self._check_open()
        cf = self._cfs.get(name)
        if cf is None:
            if name in self._names:
                cf = self._db.get_column_family(name)
            else:
                cf = self._db.create_column_family(name, self._cf_options)
                self._names.add(name)
            cf.set_write_options(self.write_options)
            self._cfs[name] = cf
        return cf

    def column_family_names(self) -> set[str]:
        self._check_open()
        return set(self._names)

    def register_store(self, spec: StoreSpec) -> None:
        """Record what kind of store column family `spec.name` holds (`spec.store_record()`);
        refuse to reopen it differently. A record without some of the spec's fields (written
        before they were recorded) is completed with them."""
        name, record = spec.name, spec.store_record()
        meta = self.column_family(META_COLUMN_FAMILY)
        key = b"store:" + name.encode("utf-8")
        stored = self.get(META_COLUMN_FAMILY, key)
        existing = {} if stored is None else self._store_record(name, stored)
        differs = any(existing.get(field, value) != value for field, value in record.items())
        if differs or existing.keys() - record.keys():
            raise ValueError(
                f"store {name!r} in {self.path} was created as {existing}; cannot open it as {record}: "
                f"keep the declaration, or open another path"
            )
        if existing != record:
            meta.put(key, json.dumps(record, sort_keys=True).encode("utf-8"))

    def _store_record(self, name: str, stored: bytes) -> dict:
        try:
            record = json.loads(stored)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise CorruptStateError(
                f"the record of store {name!r} in {self.path} is unreadable: {stored[:100]!r}"
            )
        return record

    def handle(self, name: str) -> Any:
        """A column-family handle for `WriteBatch` operations (do not keep it)."""
        self.column_family(name)
        return self._db.get_column_family_handle(name)

    # -- writes and reads ---------------------------------------------------------------

    def get(self, name: str, key: bytes) -> bytes | None:
        """The value of `key` in column family `name` (None: absent). Damaged data raises
        `CorruptStateError` naming the file and marks the database damaged, as every read
        of the stores does (`storage_error`)."""
        cf = self.column_family(name)
        try:
            return cf.get(key)
        except Exception as e:
            raise storage_error(e) from None

    @property
    def damaged(self) -> bool:
        """Whether RocksDB reported damaged data in this database (`DAMAGE_MARKER`): it is
        not flushed again, and the next open refuses it so that its owner rebuilds it."""
        return os.path.exists(os.path.join(self.path, DAMAGE_MARKER))

    def write(self, batch: rocksdict.WriteBatch) -> None:
        """Apply a batch atomically (across column families)."""
        self._check_open()
        self._db.write(batch, self.write_options)

    def scan(
        self, cf: rocksdict.Rdict, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with `lo <= key < hi` (None = open) from a consistent point in time."""
        gen = scan_column_family(cf, lo, hi, reverse)
        self._scans.add(gen)
        return gen

    def seeker(self, cf: rocksdict.Rdict, hi: bytes) -> Seeker:
        """A `Seeker` over keys below `hi`, released at `close()` like a scan."""
        self._check_open()
        seeker = Seeker(cf, hi)
        self._scans.add(seeker)
        return seeker

    def flush(self) -> None:
        """Flush the memtables of every column family to SST files, atomically."""
        self._check_open()
        scratch = tempfile.mkdtemp(prefix=".flush-", dir=os.path.dirname(os.path.abspath(self.path)))
        try:
            os.rmdir(scratch)  # the checkpoint directory must not exist yet
            self.checkpoint(scratch)
        except Exception as e:
            raise storage_error(e) from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def flush_in_order(self) -> None:
        """Flush the memtables of the data column families, then the metadata's (a
        `replayable` database: after a crash the metadata is never ahead of the data)."""
        self._check_open()
        try:
            for name in sorted(self._names - {META_COLUMN_FAMILY}):
                self.column_family(name).flush(True)
            fault_point("flush:after-data")
            self.column_family(META_COLUMN_FAMILY).flush(True)
        except Exception as e:
            raise storage_error(e) from None

    def checkpoint(self, destination: str) -> None:
        """A RocksDB checkpoint (hard-linked SSTs plus metadata) at `destination`; creating
        it flushes every column family atomically first."""
        self._check_open()
        rocksdict.Checkpoint(self._db).create_checkpoint(destination)

    def drop_column_family(self, name: str) -> None:
        """Remove a column family and its data (a metadata operation in RocksDB). The
        family is dropped before its handle goes: closing or releasing the handle of a live
        family flushes its memtable to an SST file first, most of the cost of ending a
        transaction that spilled; a dropped family's handle goes without a flush."""
        self._check_open()
        if name in self._names:
            self._db.drop_column_family(name)
            self._names.discard(name)
        self._cfs.pop(name, None)

    def property_int(self, name: str, cf: str | None = None) -> int:
        self._check_open()
        target = self._db if cf is None else self.column_family(cf)
        value = target.property_int_value(name)
        return int(value or 0)

    def close(self) -> None:
        """Release every handle and iterator, then the database (and its lock), whatever
        the final flush does. A database reported damaged is not flushed (its owner rebuilds
        it; rocksdict's own flush at close reports the same damage again, and is ignored);
        a flush that finds damaged data raises `CorruptStateError` once all is released."""
        if not self._open_flag:
            return
        for gen in list(self._scans):
            gen.close()
        self._scans = weakref.WeakSet()
        damaged = self.damaged
        failed: BaseException | None = None
        try:
            if not self.wal and not damaged:
                if self.replayable:
                    self.flush_in_order()
                else:
                    # closing flushes column families one by one; flush them together first
                    # so a kill during close cannot leave them at different points
                    self.flush()
        except Exception as e:  # damaged data, or the directory was deleted: raised below
            failed = e
        finally:  # released whatever the flush did
            self._open_flag = False
            handles = [*self._cfs.values(), self._db]
            self._cfs.clear()
            self._db = None  # type: ignore[assignment]
            for handle in handles:
                try:
                    handle.close()
                except Exception as e:  # the first failure is raised, after every handle closed
                    failed = failed or e
        if failed is not None and not damaged:
            raise storage_error(failed)

    def __enter__(self) -> "RocksDatabase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RocksDatabase {self.path} wal={self.wal} {'open' if self._open_flag else 'closed'}>"
