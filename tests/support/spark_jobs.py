"""Processors for the Spark tests (shipped to the workers by value, not by import)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from typing import Any

from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StoreProcessor

import windowed_counts

cloudpickle.register_pickle_by_value(windowed_counts)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FaultyCounts(windowed_counts.WindowedCounts):
    """WindowedCounts that fails on purpose in the first attempt of chosen batches:
    `raise_in` raises from the user code, `kill_in` kills the Python worker with SIGKILL in
    the middle of the batch, `raise_after_output_in` raises after the task emitted windows of
    three timers, `wipe_local_in` deletes every partition's local state at the
    start of the batch (as if a new executor took the partition over)."""

    def __init__(self, checkpoint_location: str, *, raise_in=(), kill_in=(), wipe_local_in=(),
                 raise_after_output_in=(), **kwargs: Any) -> None:
        self.raise_in = set(raise_in)
        self.raise_after_output_in = set(raise_after_output_in)
        self.timers_fired = 0
        self.kill_in = set(kill_in)
        self.wipe_local_in = set(wipe_local_in)
        self.keys_seen = 0
        super().__init__(checkpoint_location, **kwargs)

    def init(self, handle: Any) -> None:
        from spark_statestore.spark.worker.task import current_task

        task = current_task()
        if task is not None and task.batch_id in self.wipe_local_in and task.attempt == 0:
            from spark_statestore.partition.local import LocalPartitionDir

            local = LocalPartitionDir(self.settings.resolve_local_dir(), self._config.checkpoint_location, task.partition)
            shutil.rmtree(local.root, ignore_errors=True)
            record_injection(self._config.checkpoint_location, "wiped", task.batch_id, task.partition)
        super().init(handle)

    def process_rows(self, key: Any, rows: Any, timer_values: Any) -> Any:
        result = super().process_rows(key, rows, timer_values)
        self.keys_seen += 1
        first_attempt = self._state is not None and self._state.task.attempt == 0
        if first_attempt and self.batch_id in self.raise_in:
            self._mark("raised")
            raise RuntimeError(f"injected failure in batch {self.batch_id}")
        if first_attempt and self.batch_id in self.kill_in and self.keys_seen >= 2:
            self._mark("killed")
            os.kill(os.getpid(), signal.SIGKILL)  # state was written for some keys already
        return result


    def process_timer(self, key: Any, timer_values: Any, expired_timer_info: Any) -> Any:
        yield from super().process_timer(key, timer_values, expired_timer_info)
        self.timers_fired += 1
        first_attempt = self._state is not None and self._state.task.attempt == 0
        if first_attempt and self.batch_id in self.raise_after_output_in and self.timers_fired >= 3:
            self._mark("raised_after_output")
            raise RuntimeError(f"injected failure after output in batch {self.batch_id}")

    def _mark(self, what: str) -> None:
        """Leave a trace of an injected failure (any kind of session can see it)."""
        record_injection(self._config.checkpoint_location, what, self.batch_id, self.partition)


def record_injection(checkpoint: str, what: str, batch_id: int, partition: int) -> None:
    marks = os.path.join(os.path.dirname(checkpoint), "injected")
    os.makedirs(marks, exist_ok=True)
    open(os.path.join(marks, f"{what}-{batch_id}-{partition}"), "w").close()


def injected(checkpoint: str, what: str) -> set[int]:
    """The batches in which a failure of kind `what` was injected."""
    marks = os.path.join(os.path.dirname(checkpoint), "injected")
    names = os.listdir(marks) if os.path.isdir(marks) else []
    return {int(n.split("-")[1]) for n in names if n.startswith(what + "-")}


def task_attempt() -> tuple[int, int]:
    """The running task's batch id and attempt number."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return int(context.getLocalProperty("streaming.sql.batchId")), context.attemptNumber()


def maybe_fail(batch: int, attempt: int, raise_in, kill_in, checkpoint: str | None) -> None:
    """In the first attempt of a batch of `raise_in`, raise; of `kill_in`, SIGKILL the worker
    (leaving a trace of each under the checkpoint's parent when one is given)."""
    from pyspark import TaskContext

    partition = TaskContext.get().partitionId()
    if attempt == 0 and batch in raise_in:
        if checkpoint:
            record_injection(checkpoint, "raised", batch, partition)
        raise RuntimeError(f"injected failure in batch {batch}")
    if attempt == 0 and batch in kill_in:
        if checkpoint:
            record_injection(checkpoint, "killed", batch, partition)
        os.kill(os.getpid(), signal.SIGKILL)


def group_totals(raise_in=(), kill_in=(), checkpoint=None):
    """applyInPandasWithState: a running total per key in a store, calls per key in the GroupState."""
    import pandas as pd

    def totals(key, frames, group_state, stores):
        batch, attempt = task_attempt()
        store = stores["totals"]
        total = (store.get(key[0]) or 0) + sum(len(frame) for frame in frames)
        store.put(key[0], total)
        calls = group_state.get[0] + 1 if group_state.exists else 1
        group_state.update((calls,))
        maybe_fail(batch, attempt, raise_in, kill_in, checkpoint)
        yield pd.DataFrame({"key": [key[0]], "total": [total], "batch_id": [batch], "calls": [calls]})

    return totals


def partition_totals(raise_in=(), kill_in=(), checkpoint=None):
    """mapInArrow: running totals per key, vectorized (one get_all and one put per batch)."""
    from collections import Counter

    def totals(batches, stores):
        batch_id, attempt = task_attempt()
        counts = stores["totals"]
        for batch in batches:
            added = Counter(batch.column("key").to_pylist())
            keys = list(added)
            current = counts.get_all(keys)
            counts.put_columns(keys, [(c or 0) + added[k] for c, k in zip(current, keys, strict=True)])
            maybe_fail(batch_id, attempt, raise_in, kill_in, checkpoint)
        return iter(())

    return totals


def partition_window_counts(size_ms: int, raise_in=(), checkpoint=None):
    """mapInArrow: counts per key in tumbling windows of a watermark-clocked window store
    (retention = the window size), vectorized: the partition's rows counted per (key,
    window) first, then one read and one write of the store, as the steady-state
    benchmark does; each window is emitted once, in the batch
    whose watermark passes its end (as Spark SQL's append mode does): in the next batch its
    window has expired (the store's stream time is then that watermark)."""
    import numpy as np
    import pyarrow as pa

    def counts(batches, stores):
        batch_id, attempt = task_attempt()
        windows = stores["windows"]
        held = list(batches)  # the partition's rows, counted at once
        if held:
            table = pa.Table.from_batches(held)
            ts = table.column("ts").to_numpy()
            grouped = pa.table({"key": table.column("key"), "start": ts - ts % size_ms}).group_by(
                ["key", "start"]
            ).aggregate([("key", "count")])
            keys, starts = grouped.column("key"), grouped.column("start")
            current = np.array([c or 0 for c in windows.get_all(keys, starts)], dtype=np.int64)
            windows.put_columns(keys, current + grouped.column("key_count").to_numpy(), starts)
            maybe_fail(batch_id, attempt, raise_in, (), checkpoint)
        if stores.watermark >= size_ms:  # emitted windows expire by the next batch: no deletes
            closed = windows.fetch_all_columns(0, stores.watermark - size_ms)
            if closed.keys:
                yield pa.RecordBatch.from_pydict(
                    {"key": closed.keys, "window_start": closed.window_starts, "count": closed.values},
                    schema=pa.schema(
                        [("key", pa.string()), ("window_start", pa.int64()), ("count", pa.int64())]
                    ),
                )

    return counts


class KeyTotals(StoreProcessor):
    """transformWithStateInPandas: a running total per key in a store."""

    stores = [KeyValue("totals", Serdes.string(), Serdes.int64())]

    def process_rows(self, key: Any, rows: Any, timer_values: Any) -> Any:
        import pandas as pd

        store = self.store("totals")
        total = (store.get(key[0]) or 0) + sum(len(frame) for frame in rows)
        store.put(key[0], total)
        yield pd.DataFrame({"key": [key[0]], "total": [total]})


def skip_without_tws(spark: Any) -> None:
    """Skip a transformWithStateInPandas test in a Spark Connect session whose client has
    no such operator (pyspark 4.0; that it says so is tested in test_examples)."""
    import pytest

    from spark_statestore.spark import compat

    if compat.is_connect(spark) and not compat.FACTS.connect_transform_with_state:
        pytest.skip(f"the Spark Connect client of pyspark {compat.VERSION} has no transformWithStateInPandas")


def finished(spark: Any, query: Any) -> None:
    """Wait for `query` to end without an error, and, in a classic session, for the JVM
    shim's listener to have written the driver's file of its last batch: Spark tells
    listeners of a batch on its listener bus, which may run behind awaitTermination, so a
    metrics read right after could miss that batch's driver facts and a later one see them.
    (A Spark Connect client cannot reach the server's bus; the tests' server runs no shim.)"""
    from spark_statestore.spark import compat

    query.awaitTermination()
    assert query.exception() is None
    if not compat.is_connect(spark):
        compat.drain_listener_bus(spark)
