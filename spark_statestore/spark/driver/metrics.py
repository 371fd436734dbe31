"""Per-batch metrics of the state layer, read from the checkpoint location.

Every task keeps its `TaskMetrics` record next to the changelog it prepares
(`partition.task_records`); `StateStoreMetrics(checkpoint)` reads them back for the
committed batches, one record per (batch, partition): the one of the attempt whose
changelog is the batch's durable one. It joins the driver's facts of each batch that the
JVM shim keeps (`batch_facts`: rows Spark dropped behind the watermark, early triggers).
Nothing here needs a SparkContext or an accumulator: a Spark Connect client, a new driver
after a restart and a notebook reading an old checkpoint see the same figures.

`BatchLog` logs each newly committed batch once, when Spark reports the query's progress,
into the driver's log4j log in classic sessions, unless the JVM shim's driver part logs it
(`spark_statestore.batches`, WARN).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from pyspark.sql.streaming.listener import StreamingQueryListener

from spark_statestore.partition.reading import StateLocation
from spark_statestore.partition.task_records import committed_task_records
from spark_statestore.spark import compat
from spark_statestore.spark.batch_facts import ABSENT, read_batch_facts
from spark_statestore.spark.task_metrics import checked_record, summarize

log = logging.getLogger("spark_statestore.spark")
BATCH_LOGGER = "spark_statestore.batches"  # each batch's line, at WARN (the JVM shim's StateStoreDriver logs as it)
batch_log = logging.getLogger(BATCH_LOGGER)
LOGGED_BATCHES = 20  # at most this many newly committed batches are logged at one progress event


class StateStoreMetrics:
    """The metrics of the state under one checkpoint location (module docstring)."""

    def __init__(self, checkpoint_location: str, filesystem: Any = None) -> None:
        self.checkpoint_location = checkpoint_location
        self.filesystem = filesystem
        self.query_id: str | None = None  # learnt from the records
        self._reported: set[str] = set()
        self._lock = threading.Lock()

    def _warn(self, problems: list[str]) -> None:
        """Log each skipped file once (reading goes on without it)."""
        with self._lock:
            new = [p for p in problems if p not in self._reported]
            self._reported.update(new)
        for problem in new:
            log.warning("spark_statestore metrics of %s: %s", self.checkpoint_location, problem)

    def task_records(self, batches: int | None = None, after: int = -1, run: str | None = None) -> list[dict]:
        """The records of the newest `batches` committed batches (all with None) after
        batch `after`, ordered by batch and partition; `NoStateError` naming the location
        when there is no state under it (as the records reader raises). `run`: the id of
        the query run being followed (its layout is read once: `query_layout_of_run`)."""
        state = StateLocation.open(self.checkpoint_location, self.filesystem, run)
        read = committed_task_records(state, batches, after)
        records, problems = [], list(read.problems)
        for key, record in sorted(read.records.items()):
            try:
                checked_record(record)
                if (record["batch_id"], record["partition"]) != key:
                    raise ValueError(f"is of batch {record['batch_id']}, partition {record['partition']}")
            except ValueError as e:
                problems.append(f"metrics record {read.files[key]} {e}: skipped")
                continue
            records.append(record)
        self._warn(problems)
        if records and records[-1]["query_id"] is not None:
            self.query_id = records[-1]["query_id"]
        return records

    def batches(self, batches: int | None = None, after: int = -1, run: str | None = None) -> list[dict]:
        """One summary per committed batch (`summarize`; arguments as `task_records`),
        with the driver's facts of the batch where the JVM shim kept them (else
        `rows_dropped_by_watermark` is None and `early_triggers` 0)."""
        by_batch: dict[int, list[dict]] = {}
        for record in self.task_records(batches, after, run):
            by_batch.setdefault(record["batch_id"], []).append(record)
        facts, problems = read_batch_facts(self.checkpoint_location, by_batch, self.filesystem) if by_batch else ({}, [])
        self._warn(problems)
        out = []
        for batch, records in by_batch.items():
            summary = summarize(records)
            summary.update(facts[batch].metrics() if batch in facts else ABSENT)
            out.append(summary)
        return out

    def recent(self, batches: int = 20) -> Any:
        """The newest `batches` committed batches' summaries as a pandas DataFrame (one row
        per batch; every column is there, printing it shows the main ones: `batch_view`)."""
        from spark_statestore.spark.driver.batch_view import batch_frame

        return batch_frame(self.batches(batches))

    def tasks(self, batches: int | None = None) -> Any:
        """The task records of the newest `batches` committed batches (all kept ones with
        None) as a pandas DataFrame (one row per batch and partition)."""
        import pandas as pd

        return pd.DataFrame(self.task_records(batches))


class BatchLog:
    """Logs each newly committed batch of the watched checkpoints once (one line per
    batch, logger `spark_statestore.batches` at WARN, so that Spark's default log level
    shows it), when Spark reports a query's progress: into the driver's log4j log in a
    classic session, Python logging otherwise (a Spark Connect client without the
    driver part: Python's last-resort handler writes it to stderr). Where the driver part
    runs in the driver's JVM with its receiver (`logged_by_driver`), it logs each batch
    itself, from the tasks' end-of-task reports, also in a Connect server's log: then this
    logs nothing. Never stdout, which belongs to the user's job."""

    def __init__(self, spark: Any, logged_by_driver: bool = False) -> None:
        self.spark = spark
        self._logger = _driver_logger(spark)
        self._lock = threading.Lock()
        self._watched: dict[str, tuple[StateStoreMetrics, int]] = {}  # location -> (metrics, last logged batch)
        self._listener = None if logged_by_driver else _Listener(self)
        self._stopped = False
        if self._listener is not None:
            spark.streams.addListener(self._listener)

    def watch(self, metrics: StateStoreMetrics) -> None:
        """Log the batches of `metrics`' checkpoint committed from now on."""
        if self._listener is None:
            return  # the driver's JVM logs them
        head = max((r["batch_id"] for r in metrics.task_records(1)), default=-1)
        with self._lock:
            self._watched.setdefault(metrics.checkpoint_location, (metrics, head))

    def on_progress(self, query_id: str | None, run: str | None = None) -> None:
        """Log the batches committed since the last call (of the query, once its
        checkpoint is known to be the query's; `run`: the run that made progress)."""
        with self._lock:
            watched = list(self._watched.items())
        for location, (metrics, logged) in watched:
            if query_id is not None and metrics.query_id not in (None, query_id):
                continue
            summaries = metrics.batches(LOGGED_BATCHES, after=logged, run=run)
            for summary in summaries:
                self._logger(batch_line(summary))
            if summaries:
                with self._lock:
                    self._watched[location] = (metrics, summaries[-1]["batch_id"])

    @property
    def stopped(self) -> bool:
        """Whether this log stopped listening, or its session is gone (a classic session's
        SparkContext, a Connect client's session: nothing left to remove the listener from)."""
        return self._stopped or compat.context_stopped(self.spark)

    def stop(self) -> None:
        """Stop listening. Events Spark already queued are delivered first, so no call
        reaches a Python that has gone away."""
        if self.stopped:
            self._stopped = True
            return
        self._stopped = True
        if self._listener is None:
            return
        if compat.jvm_session(self.spark) is not None:
            compat.drain_listener_bus(self.spark)
        self.spark.streams.removeListener(self._listener)


def batch_line(s: dict) -> str:
    """The driver log's line of one batch summary."""
    late = s.get("rows_dropped_by_watermark")
    message = (
        f"spark_statestore batch {s['batch_id']}: partitions={s['partitions']} "
        f"rows_written={s['rows_written']} changelog_bytes={s['changelog_bytes']} "
        f"uncommitted_peak={s['uncommitted_bytes_peak']:.0f} spills={s['spills']} "
        f"cache hits/misses/evictions/flushes={s['cache_hits']}/{s['cache_misses']}/"
        f"{s['cache_evictions']}/{s['cache_flushes']} dropped={s['dropped_records']} "
        f"late_rows={'?' if late is None else late} "
        f"open={s['open_seconds']:.3f}s prepare={s['prepare_seconds']:.3f}s restored={s['restored']}"
    )
    if s.get("early_triggers"):
        message += f" early_trigger=1 ({s['early_trigger_reason']})"
    if s.get("admission_limit") is not None:
        message += f" admission_limit={s['admission_limit']}{' cut_short=1' if s.get('admission_cut_short') else ''}"
    return message


class _Listener(StreamingQueryListener):
    def __init__(self, batch_log: BatchLog) -> None:
        self._log = batch_log

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = getattr(event, "progress", None)
        if progress is None:
            self._log_batches(None)
        else:
            self._log_batches(str(progress.id), str(progress.runId))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self._log_batches(str(event.id))

    def _log_batches(self, query_id: str | None, run: str | None = None) -> None:
        try:
            self._log.on_progress(query_id, run)
        except Exception:  # a listener must never break the query
            log.warning("spark_statestore metrics listener failed", exc_info=True)


def _driver_logger(spark: Any) -> Callable[[str], None]:
    """Log a batch's line into the driver's log4j log (classic sessions), else Python
    logging (`BatchLog`)."""
    jlog = compat.driver_logger(spark, BATCH_LOGGER) if compat.jvm_session(spark) is not None else None
    return jlog if jlog is not None else batch_log.warning
