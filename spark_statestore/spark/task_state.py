"""The partition state of one Spark task: the one protocol every operator adapter uses.

A task opens its partition's `PartitionState` for its micro-batch (`open`), works on the
typed stores, and at its end prepares the batch's changelog and releases the partition
(`finish`), reporting its metrics; a failed attempt releases it without preparing
(`abort`). The prepared changelog commits when Spark runs the next batch.

Python workers are reused across tasks, one task at a time. A worker keeps the record
cache (`ThreadCache`, this task slot's share of the executor budget) from task to task,
and closes any partition state an earlier task left open (a task that failed without
reaching `abort`), so that a partition is never held by an idle worker.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from spark_statestore.cache.thread_cache import ThreadCache
from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.partition import PartitionState
from spark_statestore.errors import StateStoreError
from spark_statestore.spark.declarations import Declaration
from spark_statestore.spark.settings import StateStoreSettings
from spark_statestore.spark.task import TaskInfo
from spark_statestore.stores.api import WindowStore
from spark_statestore.txn.isolation import IsolationLevel

_open_states: dict[int, "TaskState"] = {}
_worker_cache: ThreadCache | None = None


def worker_cache(bytes_per_task: int) -> ThreadCache | None:
    """This worker's record cache, sized to one task slot's share (None if 0)."""
    global _worker_cache
    if bytes_per_task <= 0:
        return None
    if _worker_cache is None:
        _worker_cache = ThreadCache(bytes_per_task)
    elif _worker_cache.max_bytes != bytes_per_task:
        _worker_cache.resize(bytes_per_task)
    return _worker_cache


def check_checkpoint_location(location: Any) -> str:
    """Fail early, with the path, if the state cannot be written under `location`."""
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"checkpoint_location must be a non-empty string, got {location!r}")
    try:
        fs, root = resolve_location(location)
        durable = DurableDir(fs, f"{root}/statestore")
        probe = f"_probe-{uuid.uuid4().hex}"
        durable.publish_bytes(probe, b"")
        durable.delete([probe])
    except ValueError:
        raise
    except Exception as e:
        raise ValueError(f"checkpoint location {location!r} is not writable: {e}") from e
    return location


@dataclass(frozen=True)
class StateConfig:
    """Everything a task needs to open its state; built on the driver, pickled with the
    operator's function."""

    checkpoint_location: str
    declarations: tuple[Declaration, ...]
    settings: StateStoreSettings
    accumulator: Any = None
    operator: str = "transformWithStateInPandas"
    partitions: int | None = None

    def __post_init__(self) -> None:
        names = [d.name for d in self.declarations]
        if len(set(names)) != len(names):
            raise ValueError(f"stores must have distinct names, got {names}")


class TaskState:
    """The state a task works on (see module docstring)."""

    def __init__(self, config: StateConfig, task: TaskInfo) -> None:
        self.config = config
        self.task = task
        self.watermark = -1
        self.partition: PartitionState | None = None
        self._typed: dict[str, Any] = {}
        self._cache_start: dict[str, int] = {}

    def open(self) -> "TaskState":
        for stale in list(_open_states.values()):
            stale.abort()
        settings = self.config.settings
        cache = worker_cache(settings.cache_bytes_per_task())
        if cache is not None:
            self._cache_start = cache.stats()
        self.partition = PartitionState(
            self.config.checkpoint_location,
            self.task.partition,
            [d.spec() for d in self.config.declarations],
            local_dir=settings.resolve_local_dir(),
            snapshot_interval=settings.snapshot_interval,
            min_batches_to_retain=settings.min_batches_to_retain,
            uncommitted_max_bytes=settings.uncommitted_max_bytes,
            cache=cache,
            lock_timeout=settings.lock_timeout,
            partitions=self.config.partitions,
        )
        self.partition.open(self.task.batch_id)
        _open_states[id(self)] = self
        self._typed = {d.name: d.typed(self.partition.store(d.name)) for d in self.config.declarations}
        return self

    def __getitem__(self, name: str) -> Any:
        return self.store(name)

    def store(self, name: str) -> Any:
        """The typed store `name`."""
        try:
            return self._typed[name]
        except KeyError:
            raise KeyError(f"no store {name!r}; this processor declares {list(self._typed)}") from None

    def view(self, name: str, isolation: Any = None) -> Any:
        """A read-only view of store `name` (default: `spark.statestore.isolationLevel`).

        READ_COMMITTED sees the state as of the start of this batch; READ_UNCOMMITTED also
        this batch's writes that reached the store (the record cache flushes at the end)."""
        level = IsolationLevel.parse(isolation or self.config.settings.isolation_level)
        declaration = next(d for d in self.config.declarations if d.name == name)
        store = self._bare(name)
        return declaration.typed(store.read_only(level))

    def _bare(self, name: str) -> Any:
        assert self.partition is not None
        store = self.partition.store(name)
        return getattr(store, "wrapped", store)

    def observe_watermark(self, watermark_ms: int | None) -> None:
        """Remember this batch's watermark (it moves watermark-clocked stores at the end)."""
        if watermark_ms is not None and watermark_ms > self.watermark:
            self.watermark = watermark_ms

    def forward_changes(self, callback: Any) -> list[str]:
        """Send what each cached store forwards when it flushes (evictions, the end of the
        partition) to `callback(store_name, changes)`, with old values; returns the cached
        stores' names."""
        assert self.partition is not None
        cached = []
        for name, store in self.partition.stores.items():
            if hasattr(store, "named_cache"):
                store.send_old_values = True
                store.on_flush = lambda changes, name=name: callback(name, changes)
                cached.append(name)
        return cached

    def flush_caches(self) -> None:
        """Flush every record cache now (what `finish` would do first)."""
        assert self.partition is not None
        for store in self.partition.stores.values():
            if hasattr(store, "named_cache"):
                store.named_cache.flush()

    def finish(self, report: bool = True) -> dict:
        """Prepare the batch's changelog, release the partition, report the metrics (to the
        accumulator, unless the record is being sent already: see `finish_at_task_end`)."""
        partition = self.partition
        if partition is None:
            raise StateStoreError("the task's state is not open")
        try:
            if self.watermark > 0:
                for store in partition.stores.values():
                    if isinstance(store, WindowStore) and store.clock == "external":
                        store.advance_stream_time(self.watermark)
            dropped = sum(
                s.metrics.dropped_records_total for s in partition.stores.values() if isinstance(s, WindowStore)
            )
            metrics = partition.prepare()
        except BaseException:
            self.abort()
            raise
        self._release()
        record = self._record(metrics.as_dict(), dropped)
        accumulator = self.config.accumulator
        if report and accumulator is not None:
            accumulator.add([record])
        return record

    def abort(self) -> None:
        """Release the partition without preparing (a failed or abandoned attempt)."""
        self._release()

    def _release(self) -> None:
        _open_states.pop(id(self), None)
        partition, self.partition = self.partition, None
        self._typed = {}
        if partition is not None:
            partition.close()

    def _record(self, metrics: dict, dropped: int) -> dict:
        cache = _worker_cache
        stats = cache.stats() if cache is not None and self._cache_start else {}
        start = self._cache_start

        def delta(key: str) -> int:
            return stats.get(key, 0) - start.get(key, 0) if stats else 0

        return {
            "query_id": self.task.query_id,
            "batch_id": self.task.batch_id,
            "partition": self.task.partition,
            "attempt": self.task.attempt,
            "task_attempt_id": self.task.task_attempt_id,
            "operator": self.config.operator,
            "open_seconds": metrics["open_seconds"],
            "restored": int(metrics["restored"]),
            "restore_seconds": metrics["restore_seconds"],
            "changelogs_applied": metrics["changelogs_applied"],
            "prepare_seconds": metrics["prepare_seconds"],
            "rows_written": metrics["changelog_records"],
            "changelog_bytes": metrics["changelog_bytes"],
            "uncommitted_bytes_peak": metrics["uncommitted_bytes"],
            "spills": metrics["spills"],
            "cache_hits": delta("hits"),
            "cache_misses": delta("misses"),
            "cache_evictions": delta("evicts"),
            "cache_flushes": delta("flushes"),
            "dropped_records": dropped,
            "watermark": self.watermark,
            "finished_at": time.time(),
        }


class _FinishAtTaskEnd:
    """A task's entry in the metrics accumulator that prepares the task's batch when it is
    sent. A Python worker pickles its accumulators' values once the task's output is
    complete and before the task reports success; for operators without an end-of-
    partition hook (applyInPandasWithState) that is the end of the task. A failure here
    fails the task, so Spark never commits a batch whose changelog was not written."""

    def __init__(self, state: "TaskState") -> None:
        self.state = state

    def __reduce__(self) -> tuple:
        return dict, (self.state.finish(report=False),)


def state_of_current_task(config: StateConfig, task: TaskInfo) -> "TaskState":
    """The state of the running task: opened by its first call, prepared when it ends."""
    for state in _open_states.values():
        if state.task.task_attempt_id == task.task_attempt_id and state.config is config:
            return state
    if config.accumulator is None:
        raise StateStoreError("state that is prepared at the end of the task needs the metrics accumulator")
    state = TaskState(config, task).open()
    config.accumulator.add([_FinishAtTaskEnd(state)])
    return state


def declarations_of(stores: Sequence[Declaration]) -> tuple[Declaration, ...]:
    """Check a processor's store declarations."""
    out = tuple(stores)
    for declaration in out:
        if not hasattr(declaration, "spec"):
            raise TypeError(
                f"stores must hold KeyValue(...) and Window(...) declarations, got {declaration!r}"
            )
    return out
