"""State-heavy per-key logic in PySpark's stateful operators, in one run on one input.

Per key, per event: read and update a running aggregate (count, sum) and a window of the
last 10 values, then emit one row per key per batch:

  (a) spark_statestore stores inside transformWithStateInPandas
  (b) transformWithStateInPandas's own ValueState and ListState
  (c) applyInPandasWithState's GroupState (state read once per key and batch, updated in
      Python per event, written back once: the idiomatic way)

A plain windowed count (10 s tumbling windows) is also run with:

  (a') spark_statestore window stores inside transformWithStateInPandas
  (d)  Spark SQL's built-in window aggregation (the JVM ceiling)

Every query reads the same generated files (one file per micro-batch) with trigger
availableNow and a noop sink; rows/s = input rows / query wall time, after a warm-up.
(0) runs the same per-key loop without any state: the floor Spark and the Python
operator set; the time each query spends above it is what its state costs.

  (e) the same logic per partition (mapInPandas on the input repartitioned by key),
      stores behind the record cache, and (f) with spark.statestore.cache.maxBytes=0

    python benchmarks/spark_state.py [--rows N] [--keys K] [--files F]
    python benchmarks/spark_state.py --steady [--rows-per-batch N] [--keys K] [--batches B] ...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Iterator

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from common import print_table  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor  # noqa: E402
from pyspark.sql.streaming.state import GroupStateTimeout  # noqa: E402

import windowed_counts  # noqa: E402
from spark_statestore import Serdes  # noqa: E402
from spark_statestore.spark import KeyValue, StoreProcessor, partition_function  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(windowed_counts)

RECENT = 10
OUTPUT = "key string, count long, total double, recent_mean double"
INPUT = "key string, ts long, value double"


def _row(key: str, count: int, total: float, recent: list) -> pd.DataFrame:
    return pd.DataFrame({"key": [key], "count": [count], "total": [total], "recent_mean": [float(np.mean(recent))]})


class StoresLogic(StoreProcessor):
    """(a) the aggregate and the recent values in spark_statestore stores."""

    stores = [KeyValue("agg", Serdes.string(), Serdes.pickle()), KeyValue("recent", Serdes.string(), Serdes.pickle())]

    def process_rows(self, key: Any, rows: Iterator[pd.DataFrame], timer_values: Any) -> Iterator[pd.DataFrame]:
        aggs, recents = self.store("agg"), self.store("recent")
        name = key[0]
        for frame in rows:
            for value in frame["value"].tolist():
                count, total = aggs.get(name) or (0, 0.0)
                aggs.put(name, (count + 1, total + value))
                recent = recents.get(name) or []
                recent.append(value)
                recents.put(name, recent[-RECENT:])
        count, total = aggs.get(name)
        yield _row(name, count, total, recents.get(name))


class NoStateLogic(StatefulProcessor):
    """(0) the floor: the same reads of the input and the same output, no state at all."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        count, total = 0, 0.0
        for frame in rows:
            for value in frame["value"].tolist():
                count, total = count + 1, total + value
        yield _row(key[0], count, total, [0.0])

    def close(self) -> None:
        pass


class NativeLogic(StatefulProcessor):
    """(b) the same with transformWithStateInPandas's ValueState and ListState."""

    def init(self, handle: Any) -> None:
        self.agg = handle.getValueState("agg", "count long, total double")
        self.recent = handle.getListState("recent", "value double")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        for frame in rows:
            for value in frame["value"].tolist():
                count, total = self.agg.get() if self.agg.exists() else (0, 0.0)
                self.agg.update((count + 1, total + value))
                recent = [r[0] for r in self.recent.get()] if self.recent.exists() else []
                recent.append(value)
                self.recent.put([(v,) for v in recent[-RECENT:]])
        count, total = self.agg.get()
        yield _row(key[0], count, total, [r[0] for r in self.recent.get()])

    def close(self) -> None:
        pass


def partition_logic(batches: Iterator[pd.DataFrame], stores: Any) -> Iterator[pd.DataFrame]:
    """(e) the same per-partition (mapInPandas): the partition's rows in arrival order."""
    aggs, recents = stores["agg"], stores["recent"]
    seen = {}
    for frame in batches:
        for name, value in zip(frame["key"].tolist(), frame["value"].tolist(), strict=True):
            count, total = aggs.get(name) or (0, 0.0)
            aggs.put(name, (count + 1, total + value))
            recent = recents.get(name) or []
            recent.append(value)
            recents.put(name, recent[-RECENT:])
            seen[name] = None
    rows = []
    for name in seen:
        count, total = aggs.get(name)
        rows.append((name, count, total, float(np.mean(recents.get(name)))))
    yield pd.DataFrame(rows, columns=["key", "count", "total", "recent_mean"])


def group_state_logic(key: tuple, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """(c) the same with applyInPandasWithState: state as one row per key."""
    count, total, recent_json = state.get if state.exists else (0, 0.0, "[]")
    recent = json.loads(recent_json)
    for frame in frames:
        for value in frame["value"].tolist():
            count, total = count + 1, total + value
            recent.append(value)
            recent = recent[-RECENT:]
    state.update((count, total, json.dumps(recent)))
    yield _row(key[0], count, total, recent)


def generate(directory: str, rows: int, keys: int, files: int) -> None:
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(1)
    per_file = rows // files
    for n in range(files):
        ts = n * 10_000 + rng.integers(0, 10_000, per_file)
        frame = pd.DataFrame({
            "key": [f"k{i:05d}" for i in rng.integers(0, keys, per_file)],
            "ts": ts,
            "value": rng.random(per_file),
        })
        frame.to_json(os.path.join(directory, f"{n:05d}.json"), orient="records", lines=True)


def timed(spark: Any, build: Any, workdir: str, name: str, mode: str) -> float:
    """Wall time of one availableNow query from a fresh checkpoint."""
    checkpoint = os.path.join(workdir, "checkpoints", name)
    shutil.rmtree(checkpoint, ignore_errors=True)
    frame = build(checkpoint)
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{name} failed: {query.exception()}")
    return seconds


def _builder() -> Any:
    return (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--steady", action="store_true", help="steady-state mode (see benchmarks/steady_state.py)")
    parser.add_argument("--state-size", action="store_true", help="open/prepare and RSS with 1M and 10M keys")
    parser.add_argument("--state-keys", default="1000000,10000000", help="--state-size: key counts, comma-separated")
    parser.add_argument("--rows-per-batch", type=int, default=2_000_000, help="--steady: rows per micro-batch")
    parser.add_argument("--batches", type=int, default=5, help="--steady: measured batches after the warm-up")
    parser.add_argument("--warmup", type=int, default=1, help="--steady: warm-up batches")
    parser.add_argument("--partitions", type=int, default=2, help="--steady: shuffle partitions")
    parser.add_argument("--cache-bytes", type=int, default=64 << 20, help="--steady: record cache per executor")
    parser.add_argument("--only", default="", help="--steady: comma-separated words; run the queries whose names have one")
    parser.add_argument("--workdir", default="", help="--steady: keep input and state here (reused across runs)")
    args = parser.parse_args()
    if args.state_size:
        import steady_state

        if args.rows_per_batch == 2_000_000:
            args.rows_per_batch = 10_000
        args.state_keys = [int(k) for k in args.state_keys.split(",")]
        steady_state.state_size(args, _builder())
        return
    if args.steady:
        if args.keys == 100:
            args.keys = 100_000
        import steady_state

        steady_state.main(args, _builder())
        return
    workdir = tempfile.mkdtemp(prefix="bench-spark-")
    spark = (
        _builder()
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.statestore.localDir", os.path.join(workdir, "local"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    inputs = os.path.join(workdir, "input")
    generate(inputs, args.rows, args.keys, args.files)
    warmup = os.path.join(workdir, "warmup")
    generate(warmup, 2_000, 50, 2)

    def read(directory: str = inputs) -> Any:
        return spark.readStream.schema(INPUT).option("maxFilesPerTrigger", 1).json(directory)

    def events(directory: str = inputs) -> Any:
        return read(directory).withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", "10 seconds")

    stores_processors: list = []

    def stores_query(checkpoint: str, directory: str = inputs) -> Any:
        processor = StoresLogic(checkpoint)
        stores_processors.append(processor)
        return events(directory).groupBy("key").transformWithStateInPandas(processor, OUTPUT, "Update", "None")

    def no_state_query(checkpoint: str) -> Any:
        return events().groupBy("key").transformWithStateInPandas(NoStateLogic(), OUTPUT, "Update", "None")

    def native_query(checkpoint: str) -> Any:
        return events().groupBy("key").transformWithStateInPandas(NativeLogic(), OUTPUT, "Update", "None")

    def group_state_query(checkpoint: str) -> Any:
        return events().groupBy("key").applyInPandasWithState(
            group_state_logic, OUTPUT, "count long, total double, recent string", "Update", GroupStateTimeout.NoTimeout
        )

    def partition_query(checkpoint: str) -> Any:
        fn = partition_function(partition_logic, checkpoint, StoresLogic.stores, partitions=2, arrow=False,
                                emit_changes=False)
        return events().repartition(2, "key").mapInPandas(fn, OUTPUT)

    def uncached_partition_query(checkpoint: str) -> Any:
        spark.conf.set("spark.statestore.cache.maxBytes", "0")  # read when the function is built
        try:
            return partition_query(checkpoint)
        finally:
            spark.conf.unset("spark.statestore.cache.maxBytes")

    def windowed_stores_query(checkpoint: str) -> Any:
        processor = windowed_counts.WindowedCounts(checkpoint, sliding_ms=None)
        return windowed_counts.watermarked(read(), processor).groupBy("key").transformWithStateInPandas(
            processor, windowed_counts.OUTPUT_SCHEMA, "Append", "EventTime"
        )

    def windowed_sql_query(checkpoint: str) -> Any:
        return events().groupBy(F.window("event_time", "10 seconds"), "key").count()

    try:
        timed(spark, lambda c: stores_query(c, warmup), workdir, "warmup", "update")
        results = {}
        for label, build, mode in [
            ("(0) transformWithStateInPandas without state (floor)", no_state_query, "update"),
            ("(a) stores in transformWithStateInPandas", stores_query, "update"),
            ("(b) transformWithStateInPandas ValueState/ListState", native_query, "update"),
            ("(c) applyInPandasWithState GroupState", group_state_query, "update"),
            ("(e) stores per partition (mapInPandas), cache on", partition_query, "append"),
            ("(f) stores per partition (mapInPandas), cache off", uncached_partition_query, "append"),
            ("(a') window stores in transformWithStateInPandas: windowed count", windowed_stores_query, "append"),
            ("(d) Spark SQL window aggregation: windowed count", windowed_sql_query, "append"),
        ]:
            seconds = timed(spark, build, workdir, f"q{len(results)}", mode)
            results[label] = args.rows / seconds
            print(f"{label}: {seconds:.1f} s", flush=True)
        tasks = stores_processors[-1].metrics.tasks()
        tasks = tasks[tasks["batch_id"] >= 0]
        print(f"(a) per task: open {tasks['open_seconds'].median() * 1000:.0f} ms, "
              f"prepare {tasks['prepare_seconds'].median() * 1000:.0f} ms (medians of {len(tasks)} tasks)")
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    a = results["(a) stores in transformWithStateInPandas"]
    rows = [[label, rate, rate / a] for label, rate in results.items()]
    print(f"\n{args.rows:,} rows, {args.keys:,} keys, {args.files} micro-batches, local[2], 2 shuffle partitions")
    print_table(["query", "rows/s", "vs (a)"], rows)
    native = results["(b) transformWithStateInPandas ValueState/ListState"]
    floor = results["(0) transformWithStateInPandas without state (floor)"]
    for label, rate in (("(a)", a), ("(b)", native)):
        extra = max(0.0, 1 / rate - 1 / floor) * 1e6
        print(f"{label} time per event above the no-state floor: {extra:.1f} us")
    print(f"headline: stores/tws-state rows per second = {a / native:.1f}")


if __name__ == "__main__":
    main()
