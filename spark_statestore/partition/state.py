"""`PartitionState`: the partition-state protocol of DESIGN.md, free of Spark.

One local RocksDB per (checkpoint location, partition) holds a column family per store
and the metadata; the durable copy lives under `<checkpointLocation>/statestore/<partition>/`.
Version N is the state after batch N.

* `open(N)` loads version N-1 (`Recovery`), checks the stores against the recorded
  layout, takes a snapshot when one is due, and opens the stores (behind the record cache
  when the partition has one). Writes go to the transaction buffer of the database.
* `prepare()` flushes the record caches, has the database write this batch's change set
  into changelog N, locally, and publishes it durably (atomically). Nothing is applied:
  changelog N commits when a later `open` applies it, after Spark committed batch N. An
  attempt that prepares after Spark's commit log holds batch N (a zombie) is refused.
* `close()` releases the partition; what was not prepared is discarded. With
  `open_copies`, a prepared partition's database stays open instead, for this process's
  next `open` of the partition, and the prepared batch is applied to it ahead of Spark's
  commit while it waits (see `open_copies.py`: the local copy may run ahead of the
  committed version; `Recovery` never uses a copy that is not on the durable history).

The stores are behind the worker's record cache, kept across open/close by version
(`cached_stores.py`).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future
from enum import Enum
from typing import Any, Callable, Sequence, cast

import pyarrow.fs as pafs

from spark_statestore.checkpoint.snapshot_columns import verify_and_write_columns, verify_database
from spark_statestore.checkpoint.changelog import ChangelogWriter, publish_changelog
from spark_statestore.checkpoint.changelog_header import ChangelogHeader
from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import commit_name, commits_dir, partition_dir
from spark_statestore.errors import AttemptSupersededError, StateStoreError
from spark_statestore.faults import fault_point
from spark_statestore.partition.cached_stores import OnChanges, open_stores, rename_caches
from spark_statestore.partition.generations import local_key
from spark_statestore.partition.layout import Layout, current_generation
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.metadata import EMPTY, PartitionMetadata, VersionId
from spark_statestore.partition.open_copies import OpenCopy
from spark_statestore.partition.options import PartitionOptions, WorkerResources
from spark_statestore.partition.place import PartitionPlace
from spark_statestore.partition.recovery import Recovery
from spark_statestore.stores.api import StateStore
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.partition.task_records import write_task_record
from spark_statestore.partition.uploads import SnapshotSchedule, Uploader
from spark_statestore.stores.ttl import advance_clocks
from spark_statestore.txn.database import TransactionalDatabase
from spark_statestore.validation import check_instance, check_int, check_iterable


class Lifecycle(Enum):
    """Where a `PartitionState` is: `open` moves CLOSED to OPEN, `prepare` OPEN to
    PREPARED, `close` either back to CLOSED."""

    CLOSED = "closed"
    OPEN = "open"
    PREPARED = "prepared"


class PartitionState:
    """The durable, versioned state of one partition (see module docstring).

    `resources`: what the process shares between partitions (its local directory among
    them); `options`: the protocol's settings (None: the defaults); `filesystem`: the `pyarrow.fs` filesystem of
    the checkpoint location (None: resolved from the location); `on_changes(store, changes)`
    receives what each cached store forwards when its cache flushes; `query_run`: the id of
    the query's run (None: unknown): the query's layout file is read once per run and
    process (`layout.query_layout_of_run`)."""

    def __init__(
        self,
        checkpoint_location: str,
        partition: int,
        stores: Sequence[StoreSpec],
        resources: WorkerResources,
        options: PartitionOptions | None = None,
        *,
        filesystem: pafs.FileSystem | None = None,
        on_changes: OnChanges | None = None,
        query_run: str | None = None,
    ) -> None:
        self.partition = check_int(partition, "partition", 0)
        self.resources = check_instance(resources, WorkerResources, "resources", optional=False)
        self.options = check_instance(options, PartitionOptions, "options") or PartitionOptions()
        layout = Layout.of(list(check_iterable(stores, "stores", "StoreSpec")), self.options.partitions)
        if layout.partitions is not None and self.partition >= layout.partitions:
            raise ValueError(f"partition {self.partition} is out of range for {layout.partitions} partitions")
        check_instance(filesystem, pafs.FileSystem, "filesystem")
        if on_changes is not None and not callable(on_changes):
            raise TypeError(f"on_changes must be callable or None, got {type(on_changes).__name__}")
        fs, root = resolve_location(checkpoint_location, filesystem)
        check_instance(query_run, str, "query_run")
        generation = current_generation(checkpoint_location, self.partition, filesystem, query_run)
        self._commit_log = DurableDir(fs, commits_dir(root))  # Spark's: which batches the driver committed
        self._local_key = local_key(checkpoint_location, generation)
        self.place = PartitionPlace(
            checkpoint_location,
            self.partition,
            layout,
            DurableDir(fs, partition_dir(root, self.partition, generation)),
            LocalPartitionDir(resources.local_dir, self._local_key, self.partition),
        )
        self.cache = resources.cache
        self.on_changes = on_changes
        self.open_copies = resources.open_copies
        self.snapshots = SnapshotSchedule(
            self.place,
            interval=self.options.snapshot_interval,
            min_batches_to_retain=self.options.min_batches_to_retain,
            retention_grace_seconds=self.options.retention_grace_seconds,
            verify=verify_and_write_columns if self.options.snapshot_columns else verify_database,
        )
        self._own_uploader = resources.uploader is None
        self.uploader = resources.uploader or Uploader()
        self.metrics = PartitionMetrics()
        self.lifecycle = Lifecycle.CLOSED
        self.batch_id: int | None = None
        self.committed: VersionId = EMPTY  # the version the open state was loaded at
        self._db: TransactionalDatabase | None = None
        self._stores: dict[str, Any] = {}
        self._cached: dict[str, Any] = {}
        self._prepared: VersionId | None = None
        self._uploads: list[Future] = []

    @property
    def durable(self) -> DurableDir:
        return self.place.durable

    @property
    def local(self) -> LocalPartitionDir:
        """The local directory (a kept copy's handle on it after an `open` that took one)."""
        return self.place.local

    def __repr__(self) -> str:
        state = "closed" if self.lifecycle is Lifecycle.CLOSED else f"{self.lifecycle.value} for batch {self.batch_id}"
        return f"<PartitionState {self.partition} of {self.place.location} {state}>"

    @property
    def specs(self) -> tuple[StoreSpec, ...]:
        return self.place.layout.stores

    @property
    def version(self) -> int:
        """The version of the loaded state (-1: empty)."""
        return self.committed.version

    def _require_open(self) -> TransactionalDatabase:
        """The open database; `StateStoreError` when the partition is closed."""
        if self.lifecycle is Lifecycle.CLOSED:
            raise StateStoreError(f"partition {self.partition} is not open")
        return cast(TransactionalDatabase, self._db)

    # -- open ---------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self.lifecycle is not Lifecycle.CLOSED

    def open(self, batch_id: int) -> None:
        """Load the state after batch `batch_id - 1`, ready to process batch `batch_id`."""
        batch_id = check_int(batch_id, "batch_id", 0)
        if self.lifecycle is not Lifecycle.CLOSED:
            raise StateStoreError(
                f"partition {self.partition} is already open for batch {self.batch_id} ({self.lifecycle.value})"
            )
        started = time.perf_counter()
        self.metrics = PartitionMetrics()
        kept = self._take_kept_copy()
        try:
            recovery = Recovery(
                self.place,
                self._open_db,
                self.metrics,
                every_batch=self.options.every_batch,
                chunk_bytes=self.options.apply_chunk_bytes,
                kept=kept,
            )
            db, committed = recovery.load(batch_id - 1)
            try:
                self._forget_local_changelogs()
                meta = PartitionMetadata(db)
                recorded = meta.layout()
                layout = self.place.layout.merged_with(recorded)
                if recorded is None or recorded.to_json() != layout.to_json():
                    meta.record_layout(layout)
                if self.snapshots.due(meta, committed):
                    self.metrics.snapshot_version = committed.version
                    self._uploads.append(self.snapshots.take(db, meta, committed, self.uploader))
                self._open_stores(db, committed)
            except BaseException:
                db.close()
                raise
        except BaseException:
            self.local.unlock()
            raise
        self._db = db
        self.batch_id = batch_id
        self.committed = committed
        self._prepared = None
        self.lifecycle = Lifecycle.OPEN
        self.metrics.open_seconds = time.perf_counter() - started

    def _take_kept_copy(self) -> tuple[TransactionalDatabase, VersionId | None] | None:
        """Lock the partition: take the copy this process kept open (its database and the
        version its transaction prepared, if it was opened the way this state opens it),
        or take the lock (asking a keeper elsewhere to let go)."""
        copy = self.open_copies.take(self.local.root) if self.open_copies is not None else None
        if copy is not None and not copy.local.lock_is_current():
            self.open_copies.discard(copy, "its directory was deleted or replaced")
            copy = None
        elif copy is not None and copy.db.db.damaged:  # rebuilt below, never reused
            self.open_copies.discard(copy, "RocksDB reported damaged data in it")
            copy = None
        if copy is None:
            fresh = LocalPartitionDir(self.resources.local_dir, self._local_key, self.partition)
            self.place = self.place.with_local(fresh)
            self.local.lock(self.options.lock_timeout)
            return None
        self.place = self.place.with_local(copy.local)  # holds the lock
        if copy.options == self._db_options():
            self.metrics.kept_open = True
            return copy.db, copy.pending
        try:
            copy.db.close()  # opened with other options: open it again below
        except BaseException:
            self.local.unlock()
            raise
        return None

    def _db_options(self) -> tuple:
        # what a kept database must have been opened with (and for) to be reused as it is
        return (self.options.uncommitted_max_bytes, self.resources.rocks_memory, self.place.layout.to_json())

    def _open_db(self) -> TransactionalDatabase:
        # changelogs redo what a crash loses: no WAL, and an ordered (not atomic) flush
        return TransactionalDatabase(
            self.local.db_path,
            wal=False,
            uncommitted_max_bytes=self.options.uncommitted_max_bytes,
            replayable=True,
            rocks_memory=self.resources.rocks_memory,
        )

    def _forget_local_changelogs(self) -> None:
        """Once the state is loaded, every local changelog copy was either applied or belongs
        to an attempt that never committed (or is being redone now)."""
        for version in self.local.prepared_versions():
            self.local.remove_changelog(version)

    # -- stores -------------------------------------------------------------------------

    def _open_stores(self, db: TransactionalDatabase, committed: VersionId) -> None:
        self._stores, self._cached = open_stores(
            db, self.specs, self.cache, self.local.root, committed, self.on_changes
        )

    def store(self, name: str) -> StateStore:
        """The bytes store `name` (behind the record cache when the partition has one)."""
        self._require_open()
        try:
            return self._stores[name]
        except KeyError:
            raise KeyError(f"partition {self.partition} has no store {name!r}; it has {list(self._stores)}") from None

    @property
    def stores(self) -> dict[str, StateStore]:
        return dict(self._stores)

    def advance_clocks(self, processing_time: int | None, watermark: int | None) -> int:
        """Move every TTL store's clock to this batch's time on it, its processing time or
        its watermark (None: it stays), and delete at most `options.ttl_expiry_limit`
        expired entries per store, before any write (the same times give every attempt the
        same state); returns the deletions."""
        self._require_open()
        started = time.perf_counter()
        expired = advance_clocks(self._stores.values(), processing_time, watermark, self.options.ttl_expiry_limit)
        self.metrics.rows_expired += expired
        self.metrics.expiry_seconds += time.perf_counter() - started
        return expired

    def flush_caches(self) -> None:
        """Write every dirty cache entry to its store now, forwarding the changes."""
        for store in self._cached.values():
            store.flush_cache()

    def watch_uncommitted(self, threshold: int, watcher: Callable[[int], None] | None) -> None:
        """Call `watcher(total bytes)` once when this batch's uncommitted bytes pass `threshold`."""
        self._require_open().budget.watch(threshold, watcher)

    # -- prepare and close --------------------------------------------------------------

    def prepare(self) -> PartitionMetrics:
        """Write this batch's change set as a changelog, locally and durably."""
        db = self._require_open()
        if self.lifecycle is Lifecycle.PREPARED:
            raise StateStoreError(f"batch {self.batch_id} of partition {self.partition} is already prepared")
        started = time.perf_counter()
        self.flush_caches()
        version = cast(int, self.batch_id)  # set by open() with the lifecycle
        self.metrics.uncommitted_bytes_peak = db.uncommitted_bytes_peak
        self.metrics.spills = db.metrics.spills
        os.makedirs(self.local.changelog_dir, exist_ok=True)
        path = self.local.changelog(version)
        temp = path + ".tmp"
        header = ChangelogHeader(
            self.partition, version, self.committed.version, self.committed.id, tuple(db.stores),
            self.place.layout.as_dict(),
        )
        with open(temp, "wb") as out:
            writer = ChangelogWriter(out, header)
            db.write_changes(writer)
            prepared = VersionId(version, writer.finish())
        os.replace(temp, path)
        fault_point("prepare:after-local-write")
        if self._commit_log.exists(commit_name(version)):
            raise AttemptSupersededError(
                f"batch {version} of partition {self.partition} was already committed by another attempt "
                f"({self._commit_log.uri(commit_name(version))} exists): this attempt's changes are discarded"
            )
        info = publish_changelog(self.durable, version, path, prepared.id, self.local.changelog_dir)
        fault_point("prepare:after-publish")
        PartitionMetadata(db).record_prepared(prepared)
        if self.cache is not None:
            rename_caches(self.cache, self.local.root, self._cached, self.committed, prepared)
        self._prepared = prepared
        self.lifecycle = Lifecycle.PREPARED
        self.metrics.rows_written = writer.records
        self.metrics.changelog_bytes = info.size
        self.metrics.prepare_seconds = time.perf_counter() - started
        return self.metrics

    def _keep_open(self, db: TransactionalDatabase) -> bool:
        """Hand the prepared database (and the lock) to `open_copies`; False if not kept."""
        if self.open_copies is None or db.db.damaged:  # a damaged copy is rebuilt at the next open
            return False
        db.close_stores()
        copy = OpenCopy(self.local, db, self._prepared, self._db_options())
        return self.open_copies.keep(copy)

    def keep_metrics(self, record: dict) -> None:
        """Keep `record` durably as what the attempt of this prepared changelog measured
        (`task_records`: read back by the version's durable changelog's id)."""
        prepared = self._prepared
        if prepared is None:
            raise StateStoreError(f"partition {self.partition} keeps metrics only after prepare()")
        write_task_record(self.durable, self.partition, prepared.version, prepared.id, record)

    @property
    def prepared(self) -> VersionId | None:
        """The version this batch prepared (None before `prepare()`)."""
        return self._prepared

    def close(self) -> None:
        """Release the partition; writes that were not prepared are discarded."""
        if self.lifecycle is Lifecycle.CLOSED:
            return
        db = cast(TransactionalDatabase, self._db)
        prepared = self.lifecycle is Lifecycle.PREPARED
        self._db = None
        self.lifecycle = Lifecycle.CLOSED
        kept = False
        try:
            if not prepared:
                for store in self._cached.values():
                    store.clear_cache()  # may hold writes of the failed attempt
            else:
                kept = self._keep_open(db)
        finally:
            self._stores = {}
            self._cached = {}
            try:
                if not kept:
                    db.close()
            finally:
                if not kept:
                    self.local.unlock()
            if self._own_uploader:
                self.uploader.shutdown(wait=False)  # queued uploads still run

    def wait_for_snapshots(self, timeout: float | None = None) -> list[dict]:
        """Wait for this object's snapshot uploads; returns their manifests (raises if one failed)."""
        uploads, self._uploads = self._uploads, []
        return [future.result(timeout) for future in uploads]

    def __enter__(self) -> "PartitionState":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
