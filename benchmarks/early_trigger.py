"""The early trigger under a burst, governor off against on, in one run.

A feeder writes one input file per second (`--rate` rows each: a running count per key
over `--keys` keys, each row stamped with the time its file was written), and ten files
per second during the burst (`--burst-seconds`, starting half a trigger interval after a
batch began, the expected case). A stateful per-partition query (`partition_function`,
one `get_all` and `put_columns` per Arrow batch) reads them with a `--trigger`-second
processing-time trigger and takes whatever arrived (no admission limit), once with
`spark.statestore.earlyTrigger.enabled=false` and once with it on; the uncommitted limit
sits between a steady batch and a batch of one interval of burst.

Reported per run: the largest per-task peak of uncommitted bytes and its mean over the
batches that processed burst rows, spills, batches, early triggers, and the latency of
the burst's rows from their file being written to the end of the batch that processed
them (p50 / p99).

    python benchmarks/early_trigger.py [--trigger 30] [--rate 2000] [--burst-seconds 90]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from common import print_table  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

from spark_statestore import Serdes  # noqa: E402
from spark_statestore.spark import KeyValue, metrics_for, partition_function  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
STORES = [KeyValue("counts", Serdes.string(), Serdes.int64())]
OUTPUT = "arrived array<long>"


def counts(batches: Iterator[pa.RecordBatch], stores: Any) -> Iterator[pa.RecordBatch]:
    """Running count per key; yields the arrival times of the rows it processed."""
    table = stores["counts"]
    for batch in batches:
        grouped = pa.Table.from_batches([batch]).group_by("key").aggregate([("key", "count")])
        keys = grouped.column("key")
        current = np.array([c or 0 for c in table.get_all(keys)], dtype=np.int64)
        table.put_columns(keys, current + grouped.column("key_count").to_numpy())
        yield pa.RecordBatch.from_arrays([pa.array([batch.column("arrived").to_numpy()], pa.list_(pa.int64()))], ["arrived"])


class Feeder(threading.Thread):
    """Writes the input: one file a second, ten a second during the burst."""

    def __init__(self, directory: str, rate: int, keys: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.directory, self.rate, self.keys, self.seconds = directory, rate, keys, seconds
        self.burst: tuple[float, float] | None = None  # wall-clock seconds, set by the runner
        self.stop = threading.Event()
        self.rng = np.random.default_rng(7)
        self.written = 0

    def _file(self) -> None:
        now_ms = int(time.time() * 1000)
        keys = self.rng.integers(0, self.keys, self.rate)
        table = pa.table({"key": pa.array([f"key-{k:07d}" for k in keys]), "arrived": pa.array(np.full(self.rate, now_ms))})
        import pyarrow.parquet as pq

        temp = os.path.join(self.directory, f".{self.written:07d}.tmp")
        pq.write_table(table, temp)
        os.replace(temp, os.path.join(self.directory, f"{self.written:07d}.parquet"))
        self.written += 1

    def run(self) -> None:
        end = time.time() + self.seconds
        while time.time() < end and not self.stop.is_set():
            second = time.time()
            burst = self.burst is not None and self.burst[0] <= second < self.burst[1]
            for _ in range(10 if burst else 1):
                self._file()
            self.stop.wait(max(0.0, 1.0 - (time.time() - second)))


def run(spark: Any, workdir: str, args: Any, governor: bool) -> dict:
    session = spark.newSession()
    session.conf.set("spark.statestore.earlyTrigger.enabled", str(governor).lower())
    session.conf.set("spark.statestore.uncommitted.maxBytes", str(args.limit))
    session.conf.set("spark.statestore.cache.maxBytes", "0")
    session.conf.set("spark.statestore.localDir", os.path.join(workdir, "local"))
    inputs = os.path.join(workdir, f"input-{governor}")
    os.makedirs(inputs)
    checkpoint = os.path.join(workdir, f"checkpoint-{governor}")
    total_seconds = args.lead_seconds + args.burst_seconds + args.tail_seconds
    feeder = Feeder(inputs, args.rate, args.keys, total_seconds)
    feeder._file()  # the first batch has input
    latencies: list[tuple[int, int]] = []  # (arrival ms, batch end ms)

    def sink(frame: Any, batch_id: int) -> None:
        ended = int(time.time() * 1000)
        for row in frame.collect():
            latencies.extend((a, ended) for a in row["arrived"])

    fn = partition_function(counts, checkpoint, STORES, partitions=2, emit_changes=False, spark=session)
    stream = session.readStream.schema("key string, arrived long").parquet(inputs).repartition(2, "key").mapInArrow(fn, OUTPUT)
    query = (
        stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{args.trigger} seconds").start()
    )
    # Spark starts processing-time batches at multiples of the interval since the epoch:
    # the burst starts half an interval after one, the expected case
    boundary = -(-(time.time() + args.lead_seconds) // args.trigger) * args.trigger
    feeder.burst = (boundary + args.trigger / 2, boundary + args.trigger / 2 + args.burst_seconds)
    feeder.start()
    feeder.join()
    deadline = time.time() + 6 * args.trigger  # every file processed
    while time.time() < deadline and sum(p["numInputRows"] for p in query.recentProgress) < feeder.written * args.rate:
        time.sleep(1)
    query.stop()
    metrics = metrics_for(session)
    tasks = metrics.tasks()
    tasks = tasks[tasks["query_id"] == str(query.id)]
    recent = metrics.recent(1000)
    recent = recent[recent["query_id"] == str(query.id)]
    burst_ms = (feeder.burst[0] * 1000, feeder.burst[1] * 1000)
    in_burst = [end - arrived for arrived, end in latencies if burst_ms[0] <= arrived < burst_ms[1]]
    batches_with_burst = {p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0}
    peaks = tasks.groupby("batch_id")["uncommitted_bytes_peak"].max()
    return {
        "peak": int(tasks["uncommitted_bytes_peak"].max()),
        "burst_peak_mean": float(peaks[peaks > args.limit // 4].mean()) if (peaks > args.limit // 4).any() else 0.0,
        "spills": int(tasks["spills"].sum()),
        "batches": len(batches_with_burst),
        "early": int(recent["early_triggers"].sum()),
        "p50": float(np.percentile(in_burst, 50)) / 1000 if in_burst else float("nan"),
        "p99": float(np.percentile(in_burst, 99)) / 1000 if in_burst else float("nan"),
        "rows": len(latencies),
        "written": feeder.written * args.rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trigger", type=int, default=30, help="processing-time trigger, seconds")
    parser.add_argument("--rate", type=int, default=2000, help="rows per file (one file a second, ten in the burst)")
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--lead-seconds", type=int, default=60)
    parser.add_argument("--burst-seconds", type=int, default=90)
    parser.add_argument("--tail-seconds", type=int, default=60)
    parser.add_argument("--limit", type=int, default=0, help="uncommitted limit (default: between a steady and a burst batch)")
    args = parser.parse_args()
    # a task sees about half the keys of a batch; a key costs ~20 bytes (key + count)
    steady_batch = min(args.keys, args.trigger * args.rate) // 2 * 20
    args.limit = args.limit or 3 * steady_batch
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    workdir = tempfile.mkdtemp(prefix="bench-early-")
    results = {}
    try:
        for governor in (False, True):
            results[governor] = run(spark, workdir, args, governor)
            print(f"governor {'on' if governor else 'off'}: {results[governor]}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [
        [("on" if g else "off"), r["peak"], r["burst_peak_mean"], r["spills"], r["batches"], r["early"], r["p50"], r["p99"]]
        for g, r in results.items()
    ]
    print(f"\ntrigger {args.trigger} s, {args.rate} rows/s steady, 10x for {args.burst_seconds} s, limit {args.limit} bytes")
    print_table(
        ["governor", "peak uncommitted bytes/task", "mean peak, burst batches", "spills", "batches",
         "early triggers", "burst latency p50 s", "p99 s"],
        rows,
    )
    off, on = results[False], results[True]
    print(f"burst batches' mean peak off/on = {off['burst_peak_mean'] / on['burst_peak_mean']:.2f}; "
          f"burst latency p99 off/on = {off['p99'] / on['p99']:.2f}")
    print(f"headline: peak uncommitted bytes per task off/on = {off['peak'] / on['peak']:.2f}")


if __name__ == "__main__":
    main()
