"""The partition state of one Spark task: the one protocol every operator adapter uses.

A task opens its partition's `PartitionState` for its micro-batch (`open`), works on the
typed stores, and at its end prepares the batch's changelog, keeps its metrics record
next to it and releases the partition (`finish`); a failed attempt releases it without preparing
(`abort`). The prepared changelog commits when Spark runs the next batch. What a worker
keeps between tasks (record cache, uploader, open states) is its `WorkerRuntime`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from spark_statestore.checkpoint import object_store
from spark_statestore.cache.change import Change
from spark_statestore.errors import StateStoreError
from spark_statestore.partition.options import PartitionOptions
from spark_statestore.partition.state import PartitionState
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.spark import compat
from spark_statestore.spark.driver.operator import OperatorConfig
from spark_statestore.spark.signals import CROSSING, NO_FIGURES, REPORT, ReportFigures, Signal, send
from spark_statestore.spark.worker.batch_times import batch_times
from spark_statestore.spark.worker.commit_log import check_previous_batch_committed
from spark_statestore.spark.worker.runtime import WorkerRuntime, worker_runtime
from spark_statestore.spark.task_metrics import TaskMetrics
from spark_statestore.spark.worker.task import TaskInfo
from spark_statestore.stores.protocol import Store
from spark_statestore.stores.migration import migrate_if_due
from spark_statestore.txn.isolation import IsolationLevel

log = logging.getLogger("spark_statestore.spark")

OnChanges = Callable[[str, "list[Change]"], Any]


class TaskState:
    """The state a task works on (see module docstring).

    `on_changes(store_name, changes)` receives what each cached store forwards when its
    cache flushes (evictions, the end of the partition), with old values."""

    def __init__(
        self,
        config: OperatorConfig,
        task: TaskInfo,
        *,
        on_changes: OnChanges | None = None,
        runtime: WorkerRuntime | None = None,
    ) -> None:
        self.config = config
        self.task = task
        self.watermark = -1
        self.partition: PartitionState | None = None
        self._on_changes = on_changes
        self._runtime = runtime or worker_runtime()
        self._typed: dict[str, Store] = {}
        self._cache_start: dict[str, int] = {}

    def open(self) -> "TaskState":
        runtime = self._runtime
        runtime.abort_stale()
        settings = self.config.settings
        object_store.use(settings.s3)
        runtime.sweep(settings.resolve_local_dir(), settings.local_max_idle_seconds)
        resources = runtime.resources_for(settings)
        self._cache_start = resources.cache.stats() if resources.cache is not None else {}
        options = PartitionOptions(
            snapshot_interval=settings.snapshot_interval,
            snapshot_columns=settings.snapshot_columns,
            min_batches_to_retain=settings.min_batches_to_retain,
            uncommitted_max_bytes=settings.uncommitted_max_bytes,
            lock_timeout=settings.lock_timeout,
            partitions=self.config.partitions,
        )
        partition = PartitionState(
            self.config.checkpoint_location,
            self.task.partition,
            [d.spec() for d in self.config.declarations],
            resources,
            options,
            on_changes=self._on_changes,
            query_run=self.task.run_id,
        )
        check_previous_batch_committed(self.config.checkpoint_location, self.task.batch_id, self.task.query_id)
        partition.open(self.task.batch_id)
        self.partition = partition
        runtime.opened(self)
        self._take_batch_times(partition)
        limit = settings.uncommitted_max_bytes
        if self.config.signal_target is not None and limit >= 0:
            partition.watch_uncommitted(limit, lambda total: self._signal(CROSSING, total))
        try:
            for d in self.config.declarations:  # a value schema migration, in its first batch
                migrate_if_due(partition.store(d.name), d.value_serde, partition.version, self.task.batch_id)
        except BaseException:
            self.abort()
            raise
        self._typed = {d.name: d.typed(partition.store(d.name)) for d in self.config.declarations}
        return self

    def _take_batch_times(self, partition: PartitionState) -> None:
        """The batch's times from the offset log (the same for every attempt), where a
        store runs on them: TTL stores expire entries on them now; window stores on the
        watermark clock advance to the watermark when the batch is prepared (every adapter
        gets it here, also for a partition without data; `watermark` tells the task's
        code which windows the batch closes)."""
        specs = partition.specs
        ttl = any(spec.ttl is not None for spec in specs)
        watermark = any(spec.store_kind.on_watermark(spec) for spec in specs)
        if not (ttl or watermark):
            return
        try:
            times = batch_times(self.config.checkpoint_location, self.task.batch_id)
            if ttl:  # Spark's watermark 0: the query has none yet, the watermark clock stays unset
                partition.advance_clocks(times.timestamp, times.watermark if times.watermark > 0 else None)
        except BaseException:
            self.abort()
            raise
        if watermark:
            self.observe_watermark(times.watermark)

    def _signal(self, kind: int, uncommitted_bytes: int, figures: ReportFigures = NO_FIGURES) -> None:
        """Tell the driver that this task passed the uncommitted limit (`CROSSING`, during the
        batch) or its peak and figures (`REPORT`, when it prepared the batch: also without a
        limit, for the driver's metrics source); fire and forget: a lost or refused datagram
        costs an early trigger or a batch's figures in the metrics source, nothing else."""
        target, limit = self.config.signal_target, self.config.settings.uncommitted_max_bytes
        if target is None:
            return
        task = self.task
        send(target, Signal(kind, task.query_id or "", task.batch_id, task.partition, task.task_attempt_id,
                            uncommitted_bytes, limit, figures))

    def _open_partition(self) -> PartitionState:
        if self.partition is None:
            raise StateStoreError(
                f"the state of partition {self.task.partition} is not open in this task (batch {self.task.batch_id})"
            )
        return self.partition

    def __getitem__(self, name: str) -> Store:
        return self.store(name)

    def store(self, name: str) -> Store:
        """The typed store `name`."""
        try:
            return self._typed[name]
        except KeyError:
            raise KeyError(f"no store {name!r}; this operator declares {list(self._typed)}") from None

    def view(self, name: str, isolation: Any = None) -> Any:
        """A read-only view of store `name` (default: `spark.statestore.isolationLevel`).

        READ_COMMITTED sees the state as of the start of this batch; READ_UNCOMMITTED also
        this batch's writes that reached the store (the record cache flushes at the end)."""
        level = IsolationLevel.parse(isolation or self.config.settings.isolation_level)
        declaration = self.config.declaration(name)
        return declaration.typed(self._open_partition().store(name).read_only(level))

    def observe_watermark(self, watermark_ms: int | None) -> None:
        """Remember this batch's watermark (it moves watermark-clocked stores at the end;
        `watermark` reads it: -1 until one is known)."""
        if watermark_ms is not None and watermark_ms > self.watermark:
            self.watermark = watermark_ms

    def flush_caches(self) -> None:
        """Flush every record cache now (what `finish` would do first)."""
        self._open_partition().flush_caches()

    def finish(self) -> dict:
        """Prepare the batch's changelog, keep the task's metrics record with it (durably:
        `StateStoreMetrics` reads it back), release the partition; returns the record."""
        partition = self._open_partition()
        try:
            stores = [(spec.store_kind, spec, partition.store(spec.name)) for spec in partition.specs]
            if self.watermark >= 0:  # the kind's clock hook: stores on the watermark clock move to it
                for kind, spec, store in stores:
                    kind.at_watermark(spec, store, self.watermark)
            dropped = sum(kind.dropped_records(store) for kind, _, store in stores)
            metrics = partition.prepare()
            record = self._record(metrics, dropped)
            self._keep(partition, record)
        except BaseException:
            self.abort()
            raise
        self._release()
        self._signal(REPORT, metrics.uncommitted_bytes_peak, ReportFigures.of(record))
        return record

    def _keep(self, partition: PartitionState, record: dict) -> None:
        """Keep the record with the changelog; the batch's state does not depend on it, so
        a failure to write it costs the record only (logged in the executor's log)."""
        try:
            partition.keep_metrics(record)
        except Exception:  # noqa: BLE001 - any storage error: the changelog is published already
            log.warning("spark_statestore: the metrics record of %s was not kept", partition, exc_info=True)

    def finish_at_task_end(self) -> None:
        """Prepare when the task's output is complete (for operators without an
        end-of-partition hook)."""
        compat.run_at_task_end(self.finish)

    def abort(self) -> None:
        """Release the partition without preparing (a failed or abandoned attempt)."""
        self._release()

    def _release(self) -> None:
        self._runtime.released(self)
        partition, self.partition = self.partition, None
        self._typed = {}
        if partition is not None:
            partition.close()

    def _record(self, metrics: PartitionMetrics, dropped: int) -> dict:
        """The task's `TaskMetrics`, as the dict that is kept with the changelog."""
        cache = self._runtime.cache
        start = self._cache_start
        stats = cache.stats() if cache is not None and start else {}

        def delta(key: str) -> int:
            return stats.get(key, 0) - start.get(key, 0) if stats else 0

        task = self.task
        return TaskMetrics.of(
            metrics,
            query_id=task.query_id,
            batch_id=task.batch_id,
            partition=task.partition,
            attempt=task.attempt,
            task_attempt_id=task.task_attempt_id,
            operator=self.config.operator,
            uncommitted_limit=self.config.settings.uncommitted_max_bytes,
            cache_hits=delta("hits"),
            cache_misses=delta("misses"),
            cache_evictions=delta("evicts"),
            cache_flushes=delta("flushes"),
            dropped_records=dropped,
            watermark=self.watermark,
            finished_at=time.time(),
        ).as_dict()


def state_of_current_task(config: OperatorConfig, task: TaskInfo, runtime: WorkerRuntime | None = None) -> TaskState:
    """The state of the running task: opened by its first call, prepared when it ends."""
    runtime = runtime or worker_runtime()
    for state in runtime.open_states.values():
        if state.task.task_attempt_id == task.task_attempt_id and state.config is config:
            return state
    state = TaskState(config, task, runtime=runtime).open()
    state.finish_at_task_end()
    return state
