"""`PartitionState`: the partition-state protocol of DESIGN.md, free of Spark.

One local RocksDB per (checkpoint location, partition) holds a column family per store
and the metadata column family; the durable copy lives under
`<checkpointLocation>/statestore/<partition>/`. Version N is the state after batch N.

* `open(N)` loads version N-1: the local copy if it is at or behind it, else (missing,
  corrupt, ahead) the newest durable snapshot at or below it. Changelogs of versions up
  to N-1 are committed (the caller runs batch N only after batch N-1 committed, as Spark
  does), so they are applied in order, each in batches that end by recording the version
  (re-applying one after a crash is harmless). Changelogs of N and above belong to
  failed attempts: ignored, and replaced by this attempt's.
* Writes go to the transaction buffer of `TransactionalDatabase` (WAL off).
* `prepare()` flushes the record caches, writes the change set of every store as
  changelog N locally and publishes it durably (atomically). Nothing is applied yet.
* `close()` releases the local directory; what was not prepared is discarded.

Every `snapshot_interval` versions, `open` takes a RocksDB checkpoint that a background
thread uploads as a snapshot, then applies retention (`min_batches_to_retain`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

import pyarrow.fs as pafs

from spark_statestore import faults
from spark_statestore.cache.caching_kv import CachingKeyValueStore
from spark_statestore.cache.caching_window import CachingWindowStore
from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.checkpoint.changelog import Changelog, ChangelogWriter
from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.local import LocalPartitionDir
from spark_statestore.checkpoint.snapshots import (
    changelog_name,
    changelog_versions,
    restore_snapshot,
    retain,
    snapshot_versions,
    upload_snapshot,
)
from spark_statestore.errors import CorruptStateError, MissingStateError, StateStoreError
from spark_statestore.stores.rocksdb import META_COLUMN_FAMILY, check_store_name
from spark_statestore.txn.apply import DEFAULT_CHUNK_BYTES, apply_changes
from spark_statestore.txn.database import DEFAULT_UNCOMMITTED_MAX_BYTES, TransactionalDatabase
from spark_statestore.validation import check_int, check_name, window_segment_interval, window_store_parameters

log = logging.getLogger("spark_statestore.checkpoint")

_VERSION_KEY = b"partition:committed_version"
_SNAPSHOT_KEY = b"partition:snapshot_version"
_PARTITIONS_KEY = b"partition:count"
_STALE_SNAPSHOT_SECONDS = 3600.0


@dataclass(frozen=True)
class StoreSpec:
    """A store of a partition: its kind, name and parameters (validated like `Stores`)."""

    name: str
    kind: str = "key_value"
    retention_period: int = 0
    window_size: int = 0
    retain_duplicates: bool = False
    segment_interval: int | None = None
    cached: bool = True
    clock: str = "records"

    @staticmethod
    def key_value(name: str, cached: bool = True) -> "StoreSpec":
        return StoreSpec(check_store_name(check_name(name)), "key_value", cached=cached)

    @staticmethod
    def window(
        name: str,
        retention_period: Any,
        window_size: Any,
        retain_duplicates: bool = False,
        segment_interval: Any = None,
        cached: bool = True,
        clock: str = "records",
    ) -> "StoreSpec":
        name, retention, size, dups = window_store_parameters(
            name, retention_period, window_size, retain_duplicates
        )
        if clock not in ("records", "external"):
            raise ValueError(f"clock must be 'records' or 'external', got {clock!r}")
        return StoreSpec(
            check_store_name(name),
            "window",
            retention,
            size,
            dups,
            window_segment_interval(segment_interval),
            cached and not dups,
            clock,
        )


@dataclass
class PartitionMetrics:
    """What one open/prepare cycle did (seconds, counts, bytes)."""

    open_seconds: float = 0.0
    restored: bool = False
    restore_seconds: float = 0.0
    changelogs_applied: int = 0
    changelogs_downloaded: int = 0
    prepare_seconds: float = 0.0
    changelog_bytes: int = 0
    changelog_records: int = 0
    uncommitted_bytes: int = 0
    spills: int = 0
    snapshot_version: int | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "extra"}
        out.update(self.extra)
        return out


class _ChainBroken(Exception):
    """The local copy cannot be brought to the wanted version from changelogs."""


_uploader_lock = threading.Lock()
_uploader: ThreadPoolExecutor | None = None


def _background() -> ThreadPoolExecutor:
    """The process's snapshot uploader (one thread: uploads and retention run in order)."""
    global _uploader
    with _uploader_lock:
        if _uploader is None:
            _uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="statestore-snapshots")
        return _uploader


def _encode_version(version: int) -> bytes:
    return version.to_bytes(8, "big", signed=True)


class PartitionState:
    """The durable, versioned state of one partition (see module docstring)."""

    def __init__(
        self,
        checkpoint_location: str,
        partition: int,
        stores: Sequence[StoreSpec],
        *,
        local_dir: str,
        filesystem: pafs.FileSystem | None = None,
        snapshot_interval: int = 10,
        min_batches_to_retain: int = 100,
        uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES,
        cache: ThreadCache | None = None,
        lock_timeout: float = 60.0,
        retention_grace_seconds: float = 600.0,
        apply_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        partitions: int | None = None,
    ) -> None:
        self.partition = check_int(partition, "partition", 0)
        self.snapshot_interval = check_int(snapshot_interval, "snapshot_interval", 1)
        self.min_batches_to_retain = check_int(min_batches_to_retain, "min_batches_to_retain", 1)
        self.uncommitted_max_bytes = check_int(uncommitted_max_bytes, "uncommitted_max_bytes", -1)
        self.specs = list(stores)
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise ValueError(f"stores must have distinct names, got {names}")
        self.checkpoint_location = checkpoint_location
        fs, root = resolve_location(checkpoint_location, filesystem)
        self.durable = DurableDir(fs, f"{root}/statestore/{self.partition}")
        self.local = LocalPartitionDir(local_dir, checkpoint_location, self.partition)
        self.cache = cache
        self.lock_timeout = lock_timeout
        self.retention_grace_seconds = retention_grace_seconds
        self.apply_chunk_bytes = check_int(apply_chunk_bytes, "apply_chunk_bytes", 1)
        # how many partitions the state is split into, when the caller fixes it (kept in the
        # state: a query cannot come back with another count)
        self.partitions = None if partitions is None else check_int(partitions, "partitions", 1)
        if self.partitions is not None and self.partition >= self.partitions:
            raise ValueError(f"partition {self.partition} is out of range for {self.partitions} partitions")
        self.metrics = PartitionMetrics()
        self.batch_id: int | None = None
        self.version: int | None = None  # the version of the loaded state
        self._db: TransactionalDatabase | None = None
        self._stores: dict[str, Any] = {}
        self._prepared = False
        self._uploads: list[Future] = []

    def __repr__(self) -> str:
        state = f"batch {self.batch_id}" if self._db is not None else "closed"
        return f"<PartitionState {self.partition} of {self.checkpoint_location} {state}>"

    # -- open ---------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._db is not None

    def open(self, batch_id: int) -> None:
        """Load the state after batch `batch_id - 1`, ready to process batch `batch_id`."""
        batch_id = check_int(batch_id, "batch_id", 0)
        if self._db is not None:
            raise StateStoreError(f"partition {self.partition} is already open for batch {self.batch_id}")
        started = time.perf_counter()
        self.metrics = PartitionMetrics()
        self.local.lock(self.lock_timeout)
        try:
            db, committed = self._load(batch_id - 1)
            try:
                self._check_partition_count(db)
                self._snapshot_if_due(db, committed)
                self._open_stores(db, committed)
            except BaseException:
                db.close()
                raise
        except BaseException:
            self.local.unlock()
            raise
        self._db = db
        self.batch_id = batch_id
        self.version = committed
        self._prepared = False
        self.metrics.open_seconds = time.perf_counter() - started

    def _open_db(self) -> TransactionalDatabase:
        # changelogs redo what a crash loses: no WAL, and an ordered (not atomic) flush
        return TransactionalDatabase(
            self.local.db_path, wal=False, uncommitted_max_bytes=self.uncommitted_max_bytes, replayable=True
        )

    @staticmethod
    def _meta_int(db: TransactionalDatabase, key: bytes) -> int:
        raw = db.db.column_family(META_COLUMN_FAMILY).get(key)
        return -1 if raw is None else int.from_bytes(raw, "big", signed=True)

    def _load(self, target: int) -> tuple[TransactionalDatabase, int]:
        durable = changelog_versions(self.durable)
        if not os.path.exists(os.path.join(self.local.db_path, "CURRENT")):
            return self._loaded(*self._restore(target, durable))  # a new executor: no local copy
        db = None
        try:
            db = self._open_db()
            committed = self._meta_int(db, _VERSION_KEY)
            if committed > target:
                raise _ChainBroken(f"the local copy is at version {committed}, ahead of {target}")
            committed = self._catch_up(db, committed, target, durable)
            if committed < target:
                # versions without changelogs: no batch changed them, or retention removed
                # changelogs that a newer snapshot covers (then this copy is stale)
                newer = [v for v in snapshot_versions(self.durable) if committed < v <= target]
                if newer:
                    raise _ChainBroken(f"the local copy is at version {committed}; snapshot {newer[-1]} is newer")
        except (CorruptStateError, _ChainBroken) as reason:
            log.info("partition %d: restoring from %s: %s", self.partition, self.durable, reason)
            if db is not None:
                db.close()
            db, committed = self._restore(target, durable)
        return self._loaded(db, committed)

    def _loaded(self, db: TransactionalDatabase, committed: int) -> tuple[TransactionalDatabase, int]:
        self._forget_local_changelogs()
        return db, committed

    def _catch_up(self, db: TransactionalDatabase, committed: int, target: int, durable: dict) -> int:
        """Apply the durable changelogs after `committed` up to `target`, in order."""
        for version in sorted(v for v in durable if committed < v <= target):
            changelog = self._changelog(version, durable[version])
            recorded = changelog.header.get("partitions")
            if self.partitions is not None and recorded is not None and recorded != self.partitions:
                raise StateStoreError(_partition_count_message(self.checkpoint_location, recorded, self.partitions))
            if changelog.base_version != committed:
                raise _ChainBroken(
                    f"changelog {self.durable.uri(changelog_name(version))} (version {version}) builds on "
                    f"version {changelog.base_version}, but the state is at version {committed}"
                )
            final = {_VERSION_KEY: _encode_version(version)}
            if recorded is not None:
                final[_PARTITIONS_KEY] = _encode_version(recorded)
            apply_changes(db.db, changelog.ranges(), changelog.entries(), final, self.apply_chunk_bytes)
            faults.point("open:after-apply")
            committed = version
            self.metrics.changelogs_applied += 1
        return committed

    def _changelog(self, version: int, info: pafs.FileInfo) -> Changelog:
        """A verified changelog of `version`: the local copy when it is the one published
        durably, else a fresh download. A damaged durable copy raises `CorruptStateError`."""
        path = self.local.changelog(version)
        published = _published_marker(info)
        try:
            with open(self.local.published_marker(version)) as f:
                if json.load(f) == published:
                    return Changelog(path, version)
        except (OSError, ValueError, CorruptStateError):
            pass
        os.makedirs(self.local.changelog_dir, exist_ok=True)
        try:
            self.durable.download(changelog_name(version), path)
        except FileNotFoundError as e:
            raise _ChainBroken(f"changelog {self.durable.uri(changelog_name(version))} disappeared") from e
        self.metrics.changelogs_downloaded += 1
        try:
            changelog = Changelog(path, version)
        except CorruptStateError as e:
            os.remove(path)
            raise CorruptStateError(
                f"changelog {self.durable.uri(changelog_name(version))} (version {version}) is damaged: {e}"
            ) from e
        with open(self.local.published_marker(version), "w") as f:
            json.dump(published, f)
        return changelog

    def _restore(self, target: int, durable: dict) -> tuple[TransactionalDatabase, int]:
        """Rebuild the local copy: newest usable snapshot at or below `target`, then changelogs."""
        started = time.perf_counter()
        self.local.wipe_db()
        problems = []
        db = None
        committed = -1
        for version in reversed([v for v in snapshot_versions(self.durable) if v <= target]):
            try:
                restore_snapshot(self.durable, version, self.local.db_path)
                db = self._open_db()
                committed = self._meta_int(db, _VERSION_KEY)
                break
            except (CorruptStateError, MissingStateError) as e:
                problems.append(str(e))
                if db is not None:
                    db.close()
                    db = None
                self.local.wipe_db()
        if db is None:
            self._check_history_starts_empty(target, durable, problems)
            db = self._open_db()
        try:
            committed = self._catch_up(db, committed, target, durable)
        except (_ChainBroken, CorruptStateError) as e:
            db.close()
            detail = f"; snapshots that could not serve: {problems}" if problems else ""
            raise MissingStateError(
                f"cannot restore version {target} of partition {self.partition} from {self.durable}: {e}{detail}"
            ) from e
        self.metrics.restored = True
        self.metrics.restore_seconds = time.perf_counter() - started
        return db, committed

    def _check_partition_count(self, db: TransactionalDatabase) -> None:
        if self.partitions is None:
            return
        meta = db.db.column_family(META_COLUMN_FAMILY)
        raw = meta.get(_PARTITIONS_KEY)
        if raw is None:
            meta.put(_PARTITIONS_KEY, _encode_version(self.partitions))
            return
        recorded = int.from_bytes(raw, "big", signed=True)
        if recorded != self.partitions:
            raise StateStoreError(_partition_count_message(self.checkpoint_location, recorded, self.partitions))

    def _check_history_starts_empty(self, target: int, durable: dict, problems: list[str]) -> None:
        """Rebuilding from nothing is right only if the durable history starts from nothing:
        the oldest changelog builds on version -1. Otherwise the versions before the oldest
        snapshot were removed by retention (or lost), and `target` cannot be restored."""
        if not durable:
            return
        oldest = min(durable)
        changelog = self._changelog(oldest, durable[oldest])
        if changelog.base_version != -1:
            snapshots = snapshot_versions(self.durable)
            raise MissingStateError(
                f"version {target} of partition {self.partition} cannot be restored from {self.durable}: "
                f"the oldest changelog ({oldest}) builds on version {changelog.base_version} and there is "
                f"no usable snapshot at or below {target} (snapshots: {snapshots}"
                + (f"; could not serve: {problems}" if problems else "")
                + "). Versions older than min_batches_to_retain are not kept."
            )

    def _forget_local_changelogs(self) -> None:
        """Once the state is loaded, every local changelog copy was either applied or belongs
        to an attempt that never committed (or is being redone now)."""
        for version in self.local.prepared_versions():
            self.local.remove_changelog(version)

    # -- snapshots ----------------------------------------------------------------------

    def _snapshot_if_due(self, db: TransactionalDatabase, committed: int) -> None:
        last = self._meta_int(db, _SNAPSHOT_KEY)
        if committed < 0 or committed - last < self.snapshot_interval:
            return
        os.makedirs(self.local.snapshot_dir, exist_ok=True)
        now = time.time()
        for name in os.listdir(self.local.snapshot_dir):
            stale = os.path.join(self.local.snapshot_dir, name)
            if now - os.path.getmtime(stale) > _STALE_SNAPSHOT_SECONDS:
                shutil.rmtree(stale, ignore_errors=True)
        destination = os.path.join(self.local.snapshot_dir, str(committed))
        shutil.rmtree(destination, ignore_errors=True)
        # recorded first, so the snapshot itself says it was taken (no second snapshot of the
        # same version after a restore from it)
        db.db.column_family(META_COLUMN_FAMILY).put(_SNAPSHOT_KEY, _encode_version(committed))
        db.db.checkpoint(destination)
        self.metrics.snapshot_version = committed
        self._uploads.append(_background().submit(self._upload, destination, committed))

    def _upload(self, local_checkpoint: str, version: int) -> dict:
        try:
            manifest = upload_snapshot(self.durable, local_checkpoint, version, self.partition)
            manifest["retention"] = retain(
                self.durable, version, self.min_batches_to_retain, self.retention_grace_seconds
            )
            return manifest
        except BaseException:
            log.warning("partition %d: snapshot %d upload to %s failed", self.partition, version, self.durable, exc_info=True)
            raise
        finally:
            shutil.rmtree(local_checkpoint, ignore_errors=True)

    def wait_for_snapshots(self, timeout: float | None = None) -> list[dict]:
        """Wait for this object's snapshot uploads; returns their manifests (raises if one failed)."""
        uploads, self._uploads = self._uploads, []
        return [future.result(timeout) for future in uploads]

    # -- stores -------------------------------------------------------------------------

    def _namespace(self, name: str) -> str:
        return f"{self.local.root}/{name}"

    def _open_stores(self, db: TransactionalDatabase, committed: int) -> None:
        stores: dict[str, Any] = {}
        for spec in self.specs:
            if spec.kind == "window":
                store = db.window_store(
                    spec.name,
                    spec.retention_period,
                    spec.window_size,
                    spec.retain_duplicates,
                    spec.segment_interval,
                    clock=spec.clock,
                )
            elif spec.kind == "key_value":
                store = db.key_value_store(spec.name)
            else:
                raise ValueError(f"store {spec.name!r} has unknown kind {spec.kind!r}")
            if self.cache is not None and spec.cached:
                named = self.cache.named_cache(self._namespace(spec.name))
                if (
                    named.valid_for != committed
                    or self.metrics.restored
                    or self.metrics.changelogs_downloaded
                ):
                    named.clear()  # filled at another version, or another attempt changed it
                wrapper = CachingWindowStore if spec.kind == "window" else CachingKeyValueStore
                store = wrapper(store, self.cache, namespace=self._namespace(spec.name))
            stores[spec.name] = store
        self._stores = stores

    def store(self, name: str) -> Any:
        """The store `name` (behind the record cache when the partition has one)."""
        if self._db is None:
            raise StateStoreError(f"partition {self.partition} is not open")
        try:
            return self._stores[name]
        except KeyError:
            raise KeyError(f"partition {self.partition} has no store {name!r}; it has {list(self._stores)}") from None

    @property
    def stores(self) -> dict[str, Any]:
        return dict(self._stores)

    # -- prepare and close --------------------------------------------------------------

    def prepare(self) -> PartitionMetrics:
        """Write this batch's change set as a changelog, locally and durably."""
        db = self._db
        if db is None:
            raise StateStoreError(f"partition {self.partition} is not open")
        if self._prepared:
            raise StateStoreError(f"batch {self.batch_id} of partition {self.partition} is already prepared")
        started = time.perf_counter()
        for store in self._stores.values():
            if hasattr(store, "named_cache"):
                store.named_cache.flush()
        version = self.batch_id
        assert version is not None
        self.metrics.uncommitted_bytes = db.approximate_num_uncommitted_bytes()
        self.metrics.spills = db.metrics.spills
        os.makedirs(self.local.changelog_dir, exist_ok=True)
        path = self.local.changelog(version)
        temp = path + ".tmp"
        names = db.keyspace_names
        header = {"partition": self.partition, "version": version, "base_version": self.version, "stores": names}
        if self.partitions is not None:
            header["partitions"] = self.partitions
        with open(temp, "wb") as out:
            writer = ChangelogWriter(out, header)
            for index, name in enumerate(names):
                for lo, hi in db.keyspace(name).ranges:
                    writer.delete_range(index, lo, hi)
            for index, name in enumerate(names):
                for key, value in db.keyspace(name).changes():
                    writer.put(index, key, value)
            writer.finish()
        os.replace(temp, path)
        faults.point("prepare:after-local-write")
        info = self.durable.publish_file(changelog_name(version), path)
        faults.point("prepare:after-publish")
        with open(self.local.published_marker(version), "w") as f:
            json.dump(_published_marker(info), f)
        for store in self._stores.values():
            if hasattr(store, "named_cache"):
                store.named_cache.valid_for = version
        self._prepared = True
        self.metrics.changelog_records = writer.records
        self.metrics.changelog_bytes = info.size
        self.metrics.prepare_seconds = time.perf_counter() - started
        return self.metrics

    def close(self) -> None:
        """Release the partition; writes that were not prepared are discarded."""
        db = self._db
        if db is None:
            return
        self._db = None
        try:
            if not self._prepared:
                for store in self._stores.values():
                    if hasattr(store, "named_cache"):
                        store.named_cache.clear()  # may hold writes of the failed attempt
            db.close()
        finally:
            self._stores = {}
            self.local.unlock()

    def __enter__(self) -> "PartitionState":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _partition_count_message(location: str, recorded: int, wanted: int) -> str:
    return (
        f"the state in {location} is split into {recorded} partitions, but this query uses {wanted}: "
        f"the partition count of a query's state cannot change (keep {recorded}, or start from a "
        f"new checkpoint location)"
    )


def check_partition_count(location: str, partitions: int, filesystem: pafs.FileSystem | None = None) -> None:
    """On the driver, before any task: record the partition count of the state under
    `location`, or refuse a count different from the recorded one."""
    fs, root = resolve_location(location, filesystem)
    durable = DurableDir(fs, f"{root}/statestore")
    try:
        recorded = json.loads(durable.read_bytes("_partitions"))["partitions"]
    except FileNotFoundError:
        durable.publish_bytes("_partitions", json.dumps({"partitions": partitions}).encode("utf-8"))
        return
    if recorded != partitions:
        raise ValueError(_partition_count_message(location, recorded, partitions))


def _published_marker(info: pafs.FileInfo) -> dict:
    mtime = info.mtime_ns if info.mtime_ns is not None else None
    return {"size": info.size, "mtime_ns": mtime}
