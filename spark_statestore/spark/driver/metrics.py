"""Task metrics of the state layer, gathered per micro-batch on the driver.

Each task adds its record (`TaskMetrics`: batch, partition, attempt and what it
measured) to an accumulator in `close()`; accumulator updates reach the driver before
the batch's `onQueryProgress`. A `StreamingQueryListener` then drains the accumulator, keeps one
record per (query, batch, partition) - the latest attempt, since a re-run batch may
report twice - and keeps a per-batch summary for `recent()`, logged to the driver log.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from pyspark.accumulators import AccumulatorParam
from pyspark.sql.streaming.listener import StreamingQueryListener

from spark_statestore.spark import compat
from spark_statestore.spark.task_metrics import summarize

log = logging.getLogger("spark_statestore.spark")


class TaskRecordsParam(AccumulatorParam):
    """An accumulator of task records: lists, extended in place (so the driver can drain
    the list it holds while tasks' updates are merged into it)."""

    def zero(self, value: list) -> list:  # noqa: ARG002 - the interface's signature
        return []

    def addInPlace(self, value1: list, value2: list) -> list:
        value1.extend(value2)
        return value1


class StateStoreMetrics:
    """Driver-side collector: `recent()` per batch, `tasks()` per partition."""

    def __init__(self, spark: Any, keep_batches: int = 1000) -> None:
        self.accumulator = spark.sparkContext.accumulator([], TaskRecordsParam())
        self._lock = threading.Lock()
        self._tasks: collections.OrderedDict[tuple, dict] = collections.OrderedDict()
        self._batches: collections.OrderedDict[tuple, dict] = collections.OrderedDict()
        self._keep = keep_batches
        self._logger = _driver_logger(spark)
        self._listener = _Listener(self)
        self.spark = spark
        self._late: dict[tuple, int] = {}
        self._stopped = False
        self._displaced = False
        spark.streams.addListener(self._listener)

    def drain(self) -> list[dict]:
        """Move new task records into the per-batch tables; returns the batches updated."""
        self._check_registered()
        pending = self.accumulator.value
        count = len(pending)
        new = pending[:count]
        del pending[:count]
        touched = set()
        with self._lock:
            for record in new:
                task_key = (record.get("query_id"), record["batch_id"], record["partition"])
                previous = self._tasks.get(task_key)
                if previous is None or (record["attempt"], record["task_attempt_id"]) >= (
                    previous["attempt"],
                    previous["task_attempt_id"],
                ):
                    self._tasks[task_key] = record
                touched.add(task_key[:2])
            summaries = []
            for batch_key in sorted(touched, key=lambda k: (str(k[0]), k[1])):
                records = [r for k, r in self._tasks.items() if k[:2] == batch_key]
                summary = summarize(records)
                summary["rows_dropped_by_watermark"] = self._late.get((str(batch_key[0]), batch_key[1]), 0)
                self._batches[batch_key] = summary
                summaries.append(summary)
            while len(self._batches) > self._keep:
                old, _ = self._batches.popitem(last=False)
                for key in [k for k in self._tasks if k[:2] == old]:
                    del self._tasks[key]
                self._late.pop((str(old[0]), old[1]), None)
        return summaries

    def _check_registered(self) -> None:
        """Warn (once) when the tasks' records stopped reaching this collector's accumulator."""
        if self._displaced or compat.receives_updates(self.accumulator):
            return
        self._displaced = True
        log.warning(
            "spark_statestore metrics: another accumulator was registered with id %s in this driver "
            "(was pyspark.accumulators.Accumulator(%s, ...) made directly?): the task records of "
            "queries from now on reach it instead of this session's metrics",
            self.accumulator.aid,
            self.accumulator.aid,
        )

    def _report(self, summaries: list[dict]) -> None:
        for s in summaries:
            message = (
                f"spark_statestore batch {s['batch_id']}: partitions={s['partitions']} "
                f"rows_written={s['rows_written']} changelog_bytes={s['changelog_bytes']} "
                f"uncommitted_peak={s['uncommitted_bytes_peak']:.0f} spills={s['spills']} "
                f"cache hits/misses/evictions/flushes={s['cache_hits']}/{s['cache_misses']}/"
                f"{s['cache_evictions']}/{s['cache_flushes']} dropped={s['dropped_records']} "
                f"late_rows={s.get('rows_dropped_by_watermark', 0)} "
                f"open={s['open_seconds']:.3f}s prepare={s['prepare_seconds']:.3f}s restored={s['restored']}"
            )
            self._logger(message)

    def recent(self, batches: int = 20) -> Any:
        """The latest batches' summaries as a pandas DataFrame (one row per batch)."""
        import pandas as pd

        self.drain()
        with self._lock:
            rows = list(self._batches.values())[-batches:]
        return pd.DataFrame(rows)

    def tasks(self) -> Any:
        """Every kept task record as a pandas DataFrame (one row per batch and partition)."""
        import pandas as pd

        self.drain()
        with self._lock:
            return pd.DataFrame(list(self._tasks.values()))

    def record_progress(self, progress: Any) -> None:
        """Keep Spark's count of input rows it dropped as late (behind the watermark)."""
        late = sum(int(op.numRowsDroppedByWatermark or 0) for op in (progress.stateOperators or []))
        key = (str(progress.id), int(progress.batchId))
        with self._lock:
            self._late[key] = late
            summary = self._batches.get((key[0], key[1]))
            if summary is not None:
                summary["rows_dropped_by_watermark"] = late

    @property
    def stopped(self) -> bool:
        """Whether this collector stopped listening, or its SparkContext is gone."""
        return self._stopped or compat.context_stopped(self.spark)

    def stop(self) -> None:
        """Stop listening (the collected metrics stay readable). Events Spark already queued
        are delivered first, so no call reaches a Python that has gone away."""
        if self.stopped:
            self._stopped = True
            return
        self._stopped = True
        compat.drain_listener_bus(self.spark)
        self.spark.streams.removeListener(self._listener)


class _Listener(StreamingQueryListener):
    def __init__(self, metrics: StateStoreMetrics) -> None:
        self._metrics = metrics

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = getattr(event, "progress", None)
            if progress is not None:
                self._metrics.record_progress(progress)
            self._metrics._report(self._metrics.drain())
        except Exception:  # a listener must never break the query
            log.warning("spark_statestore metrics listener failed", exc_info=True)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self.onQueryProgress(event)


def _driver_logger(spark: Any) -> Any:
    """Log into the driver's log (and Python logging); Python logging alone without a JVM."""
    jlog = compat.driver_logger(spark)
    if jlog is None:
        return log.info

    def emit(message: str) -> None:
        jlog(message)
        log.info(message)

    return emit
