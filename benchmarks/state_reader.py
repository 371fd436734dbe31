"""Reading state with `format("spark_statestore")` against reading the same records from
parquet, in one run.

The state: `--records` records of a key-value store (string keys, int64 values) split
over `--partitions` partitions, written by the partition state as one batch and marked
committed in a commit log, with a snapshot so a reader restores a snapshot plus one
changelog. The same records are also written as parquet files (one per partition).
Both are read by Spark with `local[2]` and aggregated (`count` and `sum(value)`), best of
three. The change feed of both batches (every change: 1.1x the records) is timed the
same way, for its own rows per second.

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


def timed(frame_factory) -> tuple[float, tuple]:
    best, result = float("inf"), None
    for _ in range(3):
        started = time.perf_counter()
        result = tuple(frame_factory().selectExpr("count(key)", "sum(value)").collect()[0])
        best = min(best, time.perf_counter() - started)
    return best, result


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
    try:
        state_s, state_result = timed(
            lambda: spark.read.format("spark_statestore").option("checkpointLocation", location).option("store", "totals").load()
        )
        parquet_s, parquet_result = timed(lambda: spark.read.parquet(parquet))
        changes_s, (changes, _) = timed(
            lambda: spark.read.format("spark_statestore").option("checkpointLocation", location)
            .option("store", "totals").option("readChangeFeed", "true").option("changeStartBatchId", "0").load()
        )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if state_result != parquet_result:
        raise SystemExit(f"the two reads disagree: state {state_result}, parquet {parquet_result}")
    rows = [
        ["state reader (snapshot + changelog per partition)", args.records / state_s],
        ["parquet", args.records / parquet_s],
        ["state change feed (batches 0 and 1, every change)", changes / changes_s],
    ]
    print(f"\n{args.records:,} records, {args.partitions} partitions, local[2], best of 3")
    print_table(["read", "rows/s"], rows)
    print(f"headline: state reader / parquet rows per second = {parquet_s and state_s and (parquet_s / state_s):.2f}")


if __name__ == "__main__":
    main()
