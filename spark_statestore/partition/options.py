"""What a `PartitionState` is opened with, apart from which partition it is.

* `PartitionOptions`: the settings of the protocol (snapshot and retention cadence, the
  transaction's memory limit, lock and apply sizes, the partition count), the same for
  every partition of a query;
* `WorkerResources`: what the process running the partition shares between the
  partitions it opens (its local directory, record cache, RocksDB memory budget,
  snapshot uploader and the copies it keeps open), free of Spark: a Spark worker's
  `WorkerRuntime` provides them, a test or a program builds them itself.

Both are checked once, when built: a bad value is refused there, naming the parameter
and the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.partition.open_copies import OpenCopies
from spark_statestore.partition.uploads import Uploader
from spark_statestore.stores.rocksdb import RocksMemory
from spark_statestore.stores.ttl import DEFAULT_EXPIRY_LIMIT
from spark_statestore.txn.apply import DEFAULT_CHUNK_BYTES
from spark_statestore.txn.database import DEFAULT_UNCOMMITTED_MAX_BYTES
from spark_statestore.validation import check_bool, check_instance, check_int, check_path, check_seconds


@dataclass(frozen=True)
class PartitionOptions:
    """The settings of a partition's state protocol (see module docstring).

    `snapshot_interval`: versions between snapshots; `min_batches_to_retain`: versions
    kept restorable; `uncommitted_max_bytes`: a batch's transaction buffer before it
    spills (-1: no limit); `lock_timeout`: seconds to wait for the partition's lock;
    (the defaults are also those of the `spark.statestore.*` settings);
    `retention_grace_seconds`: how old an unreferenced file must be to be deleted;
    `apply_chunk_bytes`: the size of the write batches a changelog is applied in;
    `every_batch`: whether every batch prepares a version (so version N-1 must be
    durable when batch N opens); `partitions`: the query's partition count (None: not
    fixed); `ttl_expiry_limit`: expired entries each TTL store deletes per batch;
    `snapshot_columns`: whether each snapshot also writes its records as Arrow columns
    (`COLUMNS.arrow`, which the state reader reads instead of scanning RocksDB; False:
    snapshots are still read back with checksums before upload, nothing more is written,
    and readers scan their RocksDB files)."""

    snapshot_interval: int = 10
    min_batches_to_retain: int = 100
    uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES
    lock_timeout: float = 120.0
    retention_grace_seconds: float = 600.0
    apply_chunk_bytes: int = DEFAULT_CHUNK_BYTES
    every_batch: bool = True
    partitions: int | None = None
    ttl_expiry_limit: int = DEFAULT_EXPIRY_LIMIT
    snapshot_columns: bool = True

    def __post_init__(self) -> None:
        checked = {
            "snapshot_interval": check_int(self.snapshot_interval, "snapshot_interval", 1),
            "min_batches_to_retain": check_int(self.min_batches_to_retain, "min_batches_to_retain", 1),
            "uncommitted_max_bytes": check_int(self.uncommitted_max_bytes, "uncommitted_max_bytes", -1),
            "lock_timeout": check_seconds(self.lock_timeout, "lock_timeout"),
            "retention_grace_seconds": check_seconds(self.retention_grace_seconds, "retention_grace_seconds"),
            "apply_chunk_bytes": check_int(self.apply_chunk_bytes, "apply_chunk_bytes", 1),
            "every_batch": check_bool(self.every_batch, "every_batch"),
            "partitions": None if self.partitions is None else check_int(self.partitions, "partitions", 1),
            "ttl_expiry_limit": check_int(self.ttl_expiry_limit, "ttl_expiry_limit", 1),
            "snapshot_columns": check_bool(self.snapshot_columns, "snapshot_columns"),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class WorkerResources:
    """What a process shares between the partitions it opens (see module docstring).

    `local_dir`: where local copies live; `cache`: the record cache (None: stores are not
    cached); `rocks_memory`: the RocksDB memory budget (None: RocksDB's defaults);
    `uploader`: the snapshot uploader (None: each `PartitionState` makes its own and shuts
    it down at close); `open_copies`: the partitions kept open between uses (None: none)."""

    local_dir: str
    cache: ThreadCache | None = None
    rocks_memory: RocksMemory | None = None
    uploader: Uploader | None = None
    open_copies: OpenCopies | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "local_dir", check_path(self.local_dir, "local_dir"))
        check_instance(self.cache, ThreadCache, "cache")
        check_instance(self.rocks_memory, RocksMemory, "rocks_memory")
        check_instance(self.uploader, Uploader, "uploader")
        check_instance(self.open_copies, OpenCopies, "open_copies")
