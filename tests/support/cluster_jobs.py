"""Driver programs for the cluster tests: running totals per key with each adapter.

    python tests/support/cluster_jobs.py MASTER WORKDIR --adapter partition|group|tws [options]

Reads WORKDIR/input (one file per micro-batch, in order), keeps a running total per key in
a spark_statestore store, and writes each batch's updated totals to
WORKDIR/output/batch=N (idempotent: a batch that runs again rewrites its own directory).
Every task leaves a marker in WORKDIR/markers naming its batch, partition, attempt and the
worker it ran on (from its local directories), so tests can see where partitions ran.
With `--hold-batch K --hold-partition P`, attempt 0 of that task (every attempt, with
`--hold-every-attempt`) waits for the file WORKDIR/release after writing WORKDIR/held
(tests kill things meanwhile).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Iterator

import pandas as pd
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StoreProcessor, partition_function, with_stores

cloudpickle.register_pickle_by_value(sys.modules[__name__])
TOTALS = [KeyValue("totals", Serdes.string(), Serdes.int64())]
SCHEMA = "key string, total long"


class Task:
    """What a task knows about itself, and its marker and hold."""

    def __init__(self, workdir: str, hold: tuple[int, int] | None) -> None:
        from pyspark import TaskContext

        context = TaskContext.get()
        self.batch = int(context.getLocalProperty("streaming.sql.batchId"))
        self.partition, self.attempt = context.partitionId(), context.attemptNumber()
        found = re.search(r"worker-(\d+)", os.environ.get("SPARK_LOCAL_DIRS", ""))
        self.worker = int(found.group(1)) if found else -1
        markers = os.path.join(workdir, "markers")
        os.makedirs(markers, exist_ok=True)
        name = f"b{self.batch}-p{self.partition}-a{self.attempt}-w{self.worker}-{os.getpid()}"
        open(os.path.join(markers, name), "w").close()
        if hold is not None and hold[:2] == (self.batch, self.partition) and (self.attempt == 0 or hold[2]):
            staged = os.path.join(workdir, f"held-{os.getpid()}")
            with open(staged, "w") as f:
                f.write(str(self.worker))
            os.replace(staged, os.path.join(workdir, "held"))  # the test reads it whole once it is there
            deadline = time.monotonic() + 900  # longer than any wait of the test holding it
            while not os.path.exists(os.path.join(workdir, "release")) and time.monotonic() < deadline:
                time.sleep(0.2)


def partition_totals(workdir: str, hold: Any):
    def totals(batches: Iterator[Any], stores: Any) -> Iterator[Any]:
        import pyarrow as pa

        Task(workdir, hold)
        store = stores["totals"]
        for batch in batches:
            grouped = pa.Table.from_batches([batch]).group_by("key").aggregate([("key", "count")])
            keys = grouped.column("key").to_pylist()
            current = store.get_all(keys)
            updated = [(c or 0) + n for c, n in zip(current, grouped.column("key_count").to_pylist(), strict=True)]
            store.put_columns(keys, updated)
            yield pa.RecordBatch.from_pydict({"key": keys, "total": updated})

    return totals


def group_totals(workdir: str, hold: Any):
    def totals(key: tuple, frames: Iterator[pd.DataFrame], group_state: Any, stores: Any) -> Iterator[pd.DataFrame]:
        Task(workdir, hold)
        store = stores["totals"]
        total = (store.get(key[0]) or 0) + sum(len(f) for f in frames)
        store.put(key[0], total)
        group_state.update((total,))
        yield pd.DataFrame({"key": [key[0]], "total": [total]})

    return totals


class TwsTotals(StoreProcessor):
    stores = TOTALS

    def __init__(self, checkpoint: str, workdir: str, hold: Any) -> None:
        self.workdir, self.hold = workdir, hold
        super().__init__(checkpoint)

    def setup(self, handle: Any) -> None:
        if self.batch_id is not None:  # a task (not the driver's own init)
            Task(self.workdir, self.hold)

    def process_rows(self, key: Any, rows: Iterator[pd.DataFrame], timer_values: Any) -> Iterator[pd.DataFrame]:
        store = self.store("totals")
        total = (store.get(key[0]) or 0) + sum(len(f) for f in rows)
        store.put(key[0], total)
        yield pd.DataFrame({"key": [key[0]], "total": [total]})


def report(checkpoint: str, query: Any) -> dict:
    """Rows per second of trigger execution after the first batch, and task times."""
    from spark_statestore.spark import StateStoreMetrics

    progress = [p for p in query.recentProgress if p["numInputRows"] > 0][1:]
    rows = sum(p["numInputRows"] for p in progress)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    tasks = StateStoreMetrics(checkpoint).tasks()
    tasks = tasks[tasks["query_id"] == str(query.id)]
    return {
        "rows_per_second": rows / seconds if seconds else 0.0,
        "batches": len(progress),
        "open_ms": float(tasks["open_seconds"].median() * 1000),
        "prepare_ms": float(tasks["prepare_seconds"].median() * 1000),
        "restore_seconds": float(tasks["restore_seconds"].max()),
        "restored_tasks": int(tasks["restored"].sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("workdir")
    parser.add_argument("--adapter", choices=("partition", "group", "tws"), required=True)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--hold-batch", type=int)
    parser.add_argument("--hold-partition", type=int, default=0)
    parser.add_argument("--hold-every-attempt", action="store_true", help="hold the retries of that task too")
    parser.add_argument("--speculation", action="store_true")
    parser.add_argument("--max-cores", type=int, help="spark.cores.max: how many one-core executors the job gets")
    parser.add_argument("--report", action="store_true", help="print a JSON line with rates and task times")
    args = parser.parse_args()
    hold = (args.hold_batch, args.hold_partition, args.hold_every_attempt) if args.hold_batch is not None else None
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(args.master).appName(f"cluster-{args.adapter}")
        .config("spark.executor.cores", "1").config("spark.executor.memory", "768m")
        .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.partitions)).config("spark.locality.wait", "0")
        .config("spark.task.maxFailures", "8").config("spark.sql.adaptive.enabled", "false")
        .config("spark.statestore.snapshotInterval", "3")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    )
    if args.max_cores:
        builder = builder.config("spark.cores.max", str(args.max_cores))
    if args.speculation:
        builder = (builder.config("spark.speculation", "true").config("spark.speculation.interval", "200ms")
                   .config("spark.speculation.quantile", "0.5").config("spark.speculation.multiplier", "2")
                   .config("spark.speculation.minTaskRuntime", "1s"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    workdir = args.workdir
    checkpoint = os.path.join(workdir, "checkpoint")
    events = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).json(os.path.join(workdir, "input"))
    if args.adapter == "partition":
        fn = partition_function(partition_totals(workdir, hold), checkpoint, TOTALS, partitions=args.partitions,
                                emit_changes=False)
        out = events.repartition(args.partitions, "key").mapInArrow(fn, SCHEMA)
    elif args.adapter == "group":
        fn = with_stores(group_totals(workdir, hold), checkpoint, TOTALS)
        out = events.groupBy("key").applyInPandasWithState(fn, SCHEMA, "total long", "Update", "NoTimeout")
    else:
        out = events.groupBy("key").transformWithStateInPandas(TwsTotals(checkpoint, workdir, hold), SCHEMA, "Update", "None")

    def write(frame: Any, batch_id: int) -> None:
        frame.write.mode("overwrite").parquet(os.path.join(workdir, "output", f"batch={batch_id}"))

    query = (
        out.writeStream.outputMode("update").foreachBatch(write).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    if args.report:
        print(json.dumps(report(checkpoint, query)), flush=True)
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
