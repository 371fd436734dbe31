"""Reading state with `format("spark_statestore")` against reading the same records from
parquet, in one run.

The state: `--records` records of a key-value store (string keys, int64 values) split
over `--partitions` partitions, written by the partition state as one batch and marked
committed in a commit log, with a snapshot so a reader restores a snapshot plus one
changelog. The same records are also written as parquet files (one per partition).
Both are read by Spark with `local[2]` and aggregated (`count` and `sum(value)`), best of
three. The change feed of both batches (every change: 1.1x the records) is timed the
same way, for its own rows per second; so is a Python data source that yields the parquet
files' Arrow batches as they are (no state work: what any Python data source costs Spark).
A selective read (a key range holding 0.25% of the records) is timed on both sides too:
the filters Spark pushes to the state reader (pyspark 4.1+) bound each partition's scan.
Each read also gets the CPU seconds of the whole application (the driver's JVM and every
Python worker, from /proc: the figure a shared machine's load moves least), best of three.
A `load()` refused at planning (a bad option) is timed against one of the Python data
source above (median of 5 each): Spark starts a new Python worker for each, which imports
the source's modules, as it does for the first read of a session. The last two lines: the
state reader's rows per second over parquet's and over the Python source's (the ceiling
of any Python data source: Spark turns every Arrow batch of one into rows).

    python benchmarks/state_reader.py [--records N] [--partitions P]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from common import print_table  # noqa: E402

from spark_statestore import Serdes  # noqa: E402
from spark_statestore.partition import (  # noqa: E402
    Layout,
    PartitionOptions,
    PartitionState,
    WorkerResources,
    record_query_layout,
)
from spark_statestore.spark import KeyValue, register_reader  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

STORE = KeyValue("totals", Serdes.string(), Serdes.int64())


def write_state(location: str, local: str, records: int, partitions: int) -> None:
    """Batch 0 writes every record; batch 1 rewrites a tenth; a snapshot of version 0 is taken."""
    record_query_layout(location, Layout.of([STORE.spec()], partitions))
    per = records // partitions
    for batch in range(2):
        for p in range(partitions):
            options = PartitionOptions(partitions=partitions, snapshot_interval=1)
            state = PartitionState(location, p, [STORE.spec()], WorkerResources(local), options)
            state.open(batch)
            totals = STORE.typed(state.store("totals"))
            keys = pa.array([f"p{p}-key-{i:08d}" for i in range(per)])
            if batch == 1:
                keys = keys.slice(0, per // 10)
            totals.put_columns(keys, np.arange(len(keys), dtype=np.int64) + batch)
            state.prepare()
            state.close()
            state.wait_for_snapshots()
    os.makedirs(os.path.join(location, "commits"), exist_ok=True)
    for batch in range(2):
        with open(os.path.join(location, "commits", str(batch)), "w") as f:
            f.write("v1\n{}")


def write_parquet(directory: str, records: int, partitions: int) -> None:
    os.makedirs(directory)
    per = records // partitions
    for p in range(partitions):
        keys = [f"p{p}-key-{i:08d}" for i in range(per)]
        values = np.arange(per, dtype=np.int64)
        values[: per // 10] += 1
        pq.write_table(pa.table({"key": keys, "value": values}), os.path.join(directory, f"{p}.parquet"))


class ReadyBatches(DataSource):
    """`format("ready_batches")`: the parquet files under `path` as a Python data source
    whose `read` yields their Arrow batches unchanged, one input partition per file."""

    @classmethod
    def name(cls) -> str:
        return "ready_batches"

    def schema(self) -> str:
        if "fail" in self.options:  # for timing a refused load
            raise ValueError(f"option fail={self.options['fail']!r}")
        return "partition int, key string, value long"

    def reader(self, schema) -> DataSourceReader:
        return _ReadyReader(self.options["path"])


class _ReadyReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list:
        return [InputPartition(name) for name in sorted(os.listdir(self.path))]

    def read(self, partition):
        table = pq.read_table(os.path.join(self.path, partition.value))
        number = pa.array(np.full(len(table), int(partition.value.split(".")[0]), np.int32))
        start = 0
        for batch in table.to_batches(65_536):
            yield pa.RecordBatch.from_arrays(
                [number.slice(start, len(batch)), batch.column(0), batch.column(1)], ["partition", "key", "value"]
            )
            start += len(batch)


def app_cpu_seconds() -> float:
    """CPU seconds used so far by this process's descendants that are alive (the Spark
    driver's JVM and its Python workers), from /proc; 0 where there is no /proc."""
    if not os.path.isdir("/proc"):
        return 0.0
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


SELECTIVE = "key >= 'p1-key-00010000' and key < 'p1-key-00012500'"


def timed(frame_factory, where: str = "true") -> tuple[float, float, tuple]:
    """Best wall seconds and best application CPU seconds of three runs, and the result."""
    best, best_cpu, result = float("inf"), float("inf"), None
    for _ in range(3):
        started, cpu = time.perf_counter(), app_cpu_seconds()
        result = tuple(frame_factory().where(where).selectExpr("count(key)", "sum(value)").collect()[0])
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, app_cpu_seconds() - cpu)
    return best, best_cpu, result


def failed_load_seconds(load) -> float:
    """Median wall seconds of `load(i)` for i in 0..4, each refused at planning. Spark plans
    a read in a Python worker that it reuses after a success but not after an error, so
    each of these imports the source's modules into a new worker, as the first read of a
    session does (a success is then planned in about 0.03 s)."""
    times = []
    for attempt in range(5):
        started = time.perf_counter()
        try:
            load(attempt)
        except Exception:  # noqa: BLE001 - the refusal is what is timed
            pass
        else:
            raise SystemExit("a load meant to be refused at planning was not")
        times.append(time.perf_counter() - started)
    return sorted(times)[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-reader-")
    location, parquet = os.path.join(work, "checkpoint"), os.path.join(work, "parquet")
    started = time.perf_counter()
    write_state(location, os.path.join(work, "local"), args.records, args.partitions)
    write_parquet(parquet, args.records, args.partitions)
    print(f"wrote {args.records:,} records twice in {time.perf_counter() - started:.0f} s", flush=True)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_reader(spark)
    spark.dataSource.register(ReadyBatches)
    def state_reader():
        return spark.read.format("spark_statestore").option("checkpointLocation", location).option("store", "totals")

    def state():
        return state_reader().load()

    try:
        # first, while no Python worker has imported anything (a read leaves workers behind)
        plan_state = failed_load_seconds(lambda i: state_reader().option("batchId", f"x{i}").load())
        plan_ready = failed_load_seconds(
            lambda i: spark.read.format("ready_batches").option("fail", str(i)).load(parquet)
        )
        state_s, state_cpu, state_result = timed(state)
        parquet_s, parquet_cpu, parquet_result = timed(lambda: spark.read.parquet(parquet))
        selective_s, selective_cpu, selective_result = timed(state, SELECTIVE)
        selective_parquet_s, selective_parquet_cpu, selective_parquet_result = timed(
            lambda: spark.read.parquet(parquet), SELECTIVE
        )
        ready_s, ready_cpu, _ = timed(lambda: spark.read.format("ready_batches").load(parquet))
        changes_s, changes_cpu, (changes, _) = timed(
            lambda: spark.read.format("spark_statestore").option("checkpointLocation", location)
            .option("store", "totals").option("readChangeFeed", "true").option("changeStartBatchId", "0").load()
        )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    for ours, theirs in ((state_result, parquet_result), (selective_result, selective_parquet_result)):
        if ours != theirs:
            raise SystemExit(f"the two reads disagree: state {ours}, parquet {theirs}")
    rows = [
        ["state reader (snapshot + changelog per partition)", args.records / state_s, state_cpu],
        ["parquet", args.records / parquet_s, parquet_cpu],
        ["Python data source yielding the parquet batches", args.records / ready_s, ready_cpu],
        ["state change feed (batches 0 and 1, every change)", changes / changes_s, changes_cpu],
    ]
    print(f"\n{args.records:,} records, {args.partitions} partitions, local[2], best of 3")
    print_table(["read", "rows/s", "app CPU s"], rows)
    print(f"\nselective read ({SELECTIVE}: {selective_result[0]:,} records), best of 3")
    print_table(
        ["read", "seconds", "app CPU s"],
        [["state reader", selective_s, selective_cpu], ["parquet", selective_parquet_s, selective_parquet_cpu]],
    )
    print(f"selective read: parquet seconds / state reader seconds = {selective_parquet_s / selective_s:.2f}")
    print(
        f"a load() refused at planning (median of 5): state reader {plan_state:.2f} s, Python data "
        f"source {plan_ready:.2f} s: state reader / Python data source = {plan_state / plan_ready:.2f}"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print(f"state reader / parquet rows per second = {parquet_s / state_s:.2f}")
    print(f"headline: state reader / Python-source ceiling rows per second = {ready_s / state_s:.2f}")


if __name__ == "__main__":
    main()
