"""Snapshots of a partition, taken locally at open and uploaded in the background.

Every `snapshot_interval` versions, `SnapshotSchedule.take` records in the database that
a snapshot of the committed version is taken (so a restore from it does not take another
one), makes a RocksDB checkpoint next to the database, and hands the upload (verify,
upload, then retention) to an `Uploader`: one background thread, so the uploads and
retention runs of a process happen one at a time and in order. A worker owns one
uploader for all its partitions and shuts it down when it exits.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from spark_statestore.checkpoint.retention import retain
from spark_statestore.checkpoint.snapshots import upload_snapshot
from spark_statestore.partition.metadata import PartitionMetadata, VersionId
from spark_statestore.partition.place import PartitionPlace
from spark_statestore.txn.database import TransactionalDatabase

log = logging.getLogger("spark_statestore.partition")

_STALE_SNAPSHOT_SECONDS = 3600.0


class Uploader:
    """One background thread for snapshot uploads and retention (created on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="statestore-snapshots")
            return self._pool.submit(fn, *args)

    def shutdown(self, wait: bool = True) -> None:
        """Stop taking work; with `wait`, finish what was submitted first."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait)


class SnapshotSchedule:
    """When to snapshot the partition at `place`, and the upload job (see module docstring)."""

    def __init__(
        self,
        place: PartitionPlace,
        *,
        interval: int,
        min_batches_to_retain: int,
        retention_grace_seconds: float,
        verify: Callable[[str], None],
    ) -> None:
        self.place = place
        self.interval = interval
        self.min_batches_to_retain = min_batches_to_retain
        self.retention_grace_seconds = retention_grace_seconds
        self._verify = verify

    def due(self, meta: PartitionMetadata, committed: VersionId) -> bool:
        return committed.version >= 0 and committed.version - meta.snapshot_version >= self.interval

    def take(self, db: TransactionalDatabase, meta: PartitionMetadata, committed: VersionId, uploader: Uploader) -> Future:
        """Checkpoint the committed state locally and submit its upload."""
        snapshot_dir = self.place.local.snapshot_dir
        os.makedirs(snapshot_dir, exist_ok=True)
        now = time.time()
        for name in os.listdir(snapshot_dir):
            stale = os.path.join(snapshot_dir, name)
            if now - os.path.getmtime(stale) > _STALE_SNAPSHOT_SECONDS:
                shutil.rmtree(stale, ignore_errors=True)
        destination = os.path.join(snapshot_dir, str(committed.version))
        shutil.rmtree(destination, ignore_errors=True)
        # recorded first, so the snapshot itself says it was taken (no second snapshot of the
        # same version after a restore from it)
        meta.record_snapshot(committed.version)
        db.checkpoint(destination)
        return uploader.submit(self._upload, destination, committed)

    def _upload(self, local_checkpoint: str, committed: VersionId) -> dict:
        durable, partition = self.place.durable, self.place.partition
        try:
            manifest = upload_snapshot(
                durable, local_checkpoint, committed.version, partition, committed.id, self._verify
            )
            manifest["retention"] = retain(
                durable, committed.version, self.min_batches_to_retain, self.retention_grace_seconds
            )
            return manifest
        except BaseException:
            log.warning(
                "partition %d: snapshot %d upload to %s failed", partition, committed.version, durable, exc_info=True
            )
            raise
        finally:
            shutil.rmtree(local_checkpoint, ignore_errors=True)
