"""`WorkerRuntime`: what a Python worker keeps across the tasks it runs.

Spark reuses Python workers, one task at a time, and which worker gets which partition
changes between batches. A worker keeps:

* the record cache (`ThreadCache`), sized to this task slot's share of the executor's
  `spark.statestore.cache.maxBytes`;
* RocksDB's memory budget (`RocksMemory`: block cache and memtables of every partition
  this worker opens), its share of `spark.statestore.rocksdb.memoryBytes`;
* the snapshot `Uploader` (one background thread), shut down when the worker exits;
* the task states it opened: a task that failed without releasing its partition (Spark
  does not call `close()` for a failed attempt) is aborted when the next task starts;
* the partitions it keeps open between tasks (`OpenCopies`, up to
  `spark.statestore.keepOpen.partitions`, each for up to `.keepOpen.idleSeconds` unused):
  Spark gives a partition's next batch to any idle worker of the executor, and the worker
  that gets it asks the keeper to let go; the same worker reuses its open copy;
* when it last swept the local directory for copies nobody used for a while (at most
  once every `SWEEP_EVERY_SECONDS`; see `sweep_idle_copies`).

There is one runtime per process (`worker_runtime()`), created by the first task.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
from typing import Protocol

from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.partition.local import sweep_idle_copies
from spark_statestore.partition.open_copies import OpenCopies
from spark_statestore.partition.options import WorkerResources
from spark_statestore.partition.uploads import Uploader
from spark_statestore.spark.driver.operator import OperatorConfig
from spark_statestore.spark.driver.settings import StateStoreSettings
from spark_statestore.spark.worker.task import TaskInfo
from spark_statestore.stores.rocksdb import RocksMemory

SWEEP_EVERY_SECONDS = 600.0


class OpenTaskState(Protocol):
    """A task's state as the runtime tracks it (`task_state.TaskState`): released by
    `abort()` when its task left it open."""

    config: OperatorConfig
    task: TaskInfo

    def abort(self) -> None: ...


class WorkerRuntime:
    """The caches, uploader and open task states of one worker process."""

    def __init__(self) -> None:
        self.cache: ThreadCache | None = None
        self.rocks_memory: RocksMemory | None = None
        self.uploader = Uploader()
        self.open_states: dict[int, OpenTaskState] = {}
        self.open_copies: OpenCopies | None = None
        self._swept_at = -math.inf

    def cache_for(self, bytes_per_task: int) -> ThreadCache | None:
        """The worker's record cache, sized to one task slot's share (None if 0)."""
        if bytes_per_task <= 0:
            return None
        if self.cache is None:
            self.cache = ThreadCache(bytes_per_task)
        elif self.cache.max_bytes != bytes_per_task:
            self.cache.resize(bytes_per_task)
        return self.cache

    def rocks_memory_for(self, bytes_per_task: int) -> RocksMemory:
        """The worker's RocksDB memory budget (made once; a new size takes effect for the
        databases opened from then on)."""
        if self.rocks_memory is None or self.rocks_memory.total_bytes != bytes_per_task:
            self.rocks_memory = RocksMemory(bytes_per_task)
        return self.rocks_memory

    def open_copies_for(self, max_copies: int, idle_seconds: float) -> OpenCopies | None:
        """The partitions this worker keeps open between tasks (None when it keeps none);
        other limits than the last call's release the copies kept so far."""
        copies = self.open_copies
        if copies is not None and (copies.max_copies, copies.idle_seconds) != (max_copies, idle_seconds):
            copies.close()
            copies = self.open_copies = None
        if copies is None and max_copies > 0:
            copies = self.open_copies = OpenCopies(max_copies, idle_seconds)
        return copies

    def resources_for(self, settings: StateStoreSettings) -> WorkerResources:
        """What the partitions of a task with these settings share: the local directory, the
        record cache and RocksDB budget sized to one task slot, the uploader, the open copies."""
        return WorkerResources(
            settings.resolve_local_dir(),
            cache=self.cache_for(settings.cache_bytes_per_task()),
            rocks_memory=self.rocks_memory_for(settings.rocksdb_bytes_per_task()),
            uploader=self.uploader,
            open_copies=self.open_copies_for(settings.keep_open_partitions, settings.keep_open_idle_seconds),
        )

    def sweep(self, local_dir: str, max_idle_seconds: float) -> list[str]:
        """Delete local copies idle for `max_idle_seconds` (rate-limited per worker)."""
        now = time.monotonic()
        if now - self._swept_at < SWEEP_EVERY_SECONDS:
            return []
        self._swept_at = now
        return sweep_idle_copies(local_dir, max_idle_seconds)

    def abort_stale(self) -> None:
        """Release every partition an earlier task of this worker left open."""
        for state in list(self.open_states.values()):
            state.abort()

    def opened(self, state: OpenTaskState) -> None:
        self.open_states[id(state)] = state

    def released(self, state: OpenTaskState) -> None:
        self.open_states.pop(id(state), None)

    def shutdown(self) -> None:
        """At exit: release open partitions, then finish the uploads already submitted."""
        self.abort_stale()
        if self.open_copies is not None:
            self.open_copies.close()
        self.uploader.shutdown(wait=True)


_lock = threading.Lock()
_runtime: WorkerRuntime | None = None


def worker_runtime() -> WorkerRuntime:
    """This process's runtime (created on first use, shut down at exit)."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = WorkerRuntime()
            atexit.register(_runtime.shutdown)
        return _runtime
