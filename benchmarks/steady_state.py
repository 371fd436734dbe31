"""Steady-state throughput of stateful queries, in one run on one input (`spark_state.py --steady`).

Every query reads the same parquet files, one micro-batch per file (`--rows-per-batch`
rows each, `--keys` distinct keys, event time advancing 60 s per batch), on `local[2]`
with `--partitions` shuffle partitions, into a noop sink. Rows/s is measured from Spark's
own progress reports over the batches after the warm-up (`--warmup`): input rows divided
by the batches' trigger execution time, so query start-up and the first batches'
compilation do not count.

  floor   mapInArrow identity over the input repartitioned by key: the most any
          per-partition Python path can reach
  kv      per-partition running count per key (mapInArrow, `partition_function`): the
          rows counted per key in Arrow first (up to 2M rows at a time), then one
          `get_all` and one `put_columns`; record cache on and off
  window  per-partition count per key in 10 s tumbling windows (window stores on the
          watermark clock, a 10 s watermark delay), the rows counted per (key, window) in
          Arrow first (up to 2M rows at a time, then one `get_all` and one `put_columns`),
          as Spark SQL's aggregation counts a batch's rows before it updates its state
          store once per group: rows of windows that ended before the
          previous batch's watermark are dropped, and each window is emitted once, in the
          batch whose watermark passes its end (`fetch_all_columns`), as Spark SQL's append
          mode does (the `sql` query: the same rows dropped, the same windows emitted, checked
          in `tests/spark/test_spark_partitions.py`); cache on and off
  tws     the same two counts per key in transformWithStateInPandas with stores
  sql     Spark SQL's window aggregation (10 s windows, 10 s watermark, append mode)
  aipws   the running count in applyInPandasWithState's GroupState
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.partition.reading import NoStateError
from spark_statestore.spark import KeyValue, StateStoreMetrics, StoreProcessor, Window, partition_function

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # shipped to the workers by value

WINDOW_MS = 10_000
DELAY_MS = 10_000
COUNT_SCHEMA = "key string, count long"
WINDOW_SCHEMA = "key string, window_start long, count long"
AGGREGATE_ROWS = 2_000_000  # rows a partition function counts in Arrow before it reads and writes its store
KV_STORES = [KeyValue("counts", Serdes.string(), Serdes.int64())]
# the watermark clock with retention = the window size: a window lives until the watermark
# passes its end, as in Spark SQL
WINDOW_STORES = [
    Window("windows", WINDOW_MS, WINDOW_MS, key_serde=Serdes.string(), value_serde=Serdes.int64())
]


def generate(directory: str, batches: int, rows: int, keys: int, seed: int = 1) -> None:
    """One parquet file per micro-batch; event time advances 60 s per batch."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = np.array([f"key-{i:07d}" for i in range(keys)], dtype=object)
    for b in range(batches):
        table = pa.table(
            {
                "key": pa.array(names[rng.integers(0, keys, rows)], pa.string()),
                "ts": pa.array(b * 60_000 + rng.integers(0, 60_000, rows), pa.int64()),
                "value": pa.array(rng.random(rows)),
            }
        )
        import pyarrow.parquet as pq

        pq.write_table(table, os.path.join(directory, f"{b:05d}.parquet"))


# -- per-partition functions (mapInArrow) ----------------------------------------------------


def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def kv_counts(batches: Iterator[pa.RecordBatch], stores: Any) -> Iterator[pa.RecordBatch]:
    """Running count per key: the partition's rows counted per key in Arrow first (up to
    `AGGREGATE_ROWS` rows at a time), then one `get_all` and one `put_columns`; yields the
    updated counts (one row per key and chunk, as Spark's update mode gives one per key
    and batch)."""
    counts = stores["counts"]
    for table in aggregated(batches, AGGREGATE_ROWS):
        grouped = table.group_by("key").aggregate([("key", "count")])
        keys = grouped.column("key")
        current = np.array([c or 0 for c in counts.get_all(keys)], dtype=np.int64)
        updated = current + grouped.column("key_count").to_numpy()
        counts.put_columns(keys, updated)
        yield pa.RecordBatch.from_arrays([keys.combine_chunks(), pa.array(updated)], names=["key", "count"])


def window_counts(batches: Iterator[pa.RecordBatch], stores: Any) -> Iterator[pa.RecordBatch]:
    """Counts per key and 10 s window. The partition's rows are counted per (key, window)
    in Arrow first, up to `AGGREGATE_ROWS` rows at a time, so the store reads and writes
    each window once per chunk (as Spark SQL's aggregation updates each group's state once
    per batch, and the partition's Arrow batches of 100,000 rows would touch most windows
    several times); the windows this batch's watermark closes are emitted (in the next batch
    they have expired: the store's stream time is then this batch's watermark)."""
    windows = stores["windows"]
    for table in aggregated(batches, AGGREGATE_ROWS):
        ts = table.column("ts").to_numpy()
        grouped = pa.table({"key": table.column("key"), "start": ts - ts % WINDOW_MS}).group_by(
            ["key", "start"]
        ).aggregate([("key", "count")])
        keys, window_starts = grouped.column("key"), grouped.column("start")
        current = np.array([c or 0 for c in windows.get_all(keys, window_starts)], dtype=np.int64)
        windows.put_columns(keys, current + grouped.column("key_count").to_numpy(), window_starts)
    if stores.watermark >= WINDOW_MS:  # expired by the next batch: nothing to delete
        done = windows.fetch_all_columns(0, stores.watermark - WINDOW_MS)
        if done.keys:
            yield pa.RecordBatch.from_pydict(
                {"key": done.keys, "window_start": done.window_starts, "count": done.values}
            )


def aggregated(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """The batches as tables of at least `rows` rows each (the last one of what is left)."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(held)
            held, count = [], 0
    if held:
        yield pa.Table.from_batches(held)


# -- transformWithStateInPandas and applyInPandasWithState -------------------------------------


class TwsCounts(StoreProcessor):
    """Running count per key in a key-value store."""

    stores = KV_STORES

    def process_rows(self, key: Any, rows: Iterator[pd.DataFrame], timer_values: Any) -> Iterator[pd.DataFrame]:
        counts = self.store("counts")
        total = (counts.get(key[0]) or 0) + sum(len(frame) for frame in rows)
        counts.put(key[0], total)
        yield pd.DataFrame({"key": [key[0]], "count": [total]})


def aipws_counts(key: tuple, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    total = (state.get[0] if state.exists else 0) + sum(len(frame) for frame in frames)
    state.update((total,))
    yield pd.DataFrame({"key": [key[0]], "count": [total]})


# -- running and measuring ---------------------------------------------------------------------


def steady_rate(query: Any, warmup: int) -> tuple[float, int]:
    """Input rows per second of trigger execution over the batches after the warm-up."""
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    measured = progress[warmup:]
    if not measured:
        raise RuntimeError("no batch after the warm-up: give more batches")
    rows = sum(p["numInputRows"] for p in measured)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in measured) / 1000
    return rows / seconds, len(measured)


def run_query(frame: Any, checkpoint: str, mode: str) -> Any:
    query = (
        frame.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    return query


def main(args: Any, spark_builder: Any) -> None:
    from pyspark.sql import functions as F

    workdir = os.path.abspath(args.workdir) if args.workdir else None
    import tempfile

    workdir = workdir or tempfile.mkdtemp(prefix="bench-steady-")
    inputs = os.path.join(workdir, "input")
    batches = args.warmup + args.batches
    started = time.perf_counter()
    if not os.path.isdir(inputs) or len(os.listdir(inputs)) != batches:
        shutil.rmtree(inputs, ignore_errors=True)
        generate(inputs, batches, args.rows_per_batch, args.keys)
    print(f"input: {batches} files of {args.rows_per_batch:,} rows, {args.keys:,} keys "
          f"({time.perf_counter() - started:.0f} s to generate)", flush=True)
    spark = (
        spark_builder.config("spark.sql.shuffle.partitions", str(args.partitions))
        .config("spark.statestore.localDir", os.path.join(workdir, "local"))
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    schema = "key string, ts long, value double"
    p = args.partitions

    def events() -> Any:
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(inputs)

    def with_cache(on: bool, build: Any) -> Any:
        spark.conf.set("spark.statestore.cache.maxBytes", str(args.cache_bytes) if on else "0")
        try:
            return build()
        finally:
            spark.conf.unset("spark.statestore.cache.maxBytes")

    def kv(checkpoint: str, cache: bool) -> Any:
        fn = with_cache(cache, lambda: partition_function(kv_counts, checkpoint, KV_STORES, partitions=p, emit_changes=False))
        return events().repartition(p, "key").mapInArrow(fn, COUNT_SCHEMA)

    def stamped() -> Any:  # event time and its watermark, for both windowed counts
        return events().withColumn("event_time", F.timestamp_millis("ts")).withWatermark(
            "event_time", f"{DELAY_MS // 1000} seconds"
        )

    def window(checkpoint: str, cache: bool) -> Any:
        fn = with_cache(cache, lambda: partition_function(window_counts, checkpoint, WINDOW_STORES, partitions=p, emit_changes=False))
        return stamped().repartition(p, "key").mapInArrow(fn, WINDOW_SCHEMA)

    variants = [
        ("floor: mapInArrow identity", "append", lambda c: events().repartition(p, "key").mapInArrow(identity, schema)),
        ("kv per partition, cache on", "append", lambda c: kv(c, True)),
        ("kv per partition, cache off", "append", lambda c: kv(c, False)),
        ("window per partition, cache on", "append", lambda c: window(c, True)),
        ("window per partition, cache off", "append", lambda c: window(c, False)),
        ("kv in transformWithStateInPandas", "update",
         lambda c: events().groupBy("key").transformWithStateInPandas(TwsCounts(c), COUNT_SCHEMA, "Update", "None")),
        ("Spark SQL window aggregation", "append",
         lambda c: stamped().groupBy(F.window("event_time", "10 seconds"), "key").count()),
        ("applyInPandasWithState GroupState", "update",
         lambda c: events().groupBy("key").applyInPandasWithState(aipws_counts, COUNT_SCHEMA, "count long", "Update", "NoTimeout")),
    ]
    only = set(args.only.split(",")) if args.only else None
    results: dict[str, tuple[float, int]] = {}
    task_times: dict[str, tuple[float, float, float]] = {}
    for label, mode, build in variants:
        if only and not any(word in label for word in only):
            continue
        checkpoint = os.path.join(workdir, "checkpoints", label.replace(" ", "_").replace(":", ""))
        shutil.rmtree(checkpoint, ignore_errors=True)
        query = run_query(build(checkpoint), checkpoint, mode)
        results[label] = steady_rate(query, args.warmup)
        try:
            tasks = StateStoreMetrics(checkpoint).tasks()
        except NoStateError:  # the floor queries keep no state
            tasks = pd.DataFrame()
        if not tasks.empty and "query_id" in tasks:
            mine = tasks[(tasks["query_id"] == str(query.id)) & (tasks["batch_id"] >= args.warmup)]
            if not mine.empty:
                task_times[label] = (mine["open_seconds"].median(), mine["prepare_seconds"].median(), mine["kept_open"].mean())
        print(f"{label}: {results[label][0]:,.0f} rows/s over {results[label][1]} batches", flush=True)
    spark.stop()
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return_rows(results, task_times, args)


def return_rows(results: dict, task_times: dict, args: Any) -> None:
    from common import print_table

    floor = results.get("floor: mapInArrow identity", (float("nan"), 0))[0]
    table = []
    for label, (rate, _) in results.items():
        opened, prepared, kept = task_times.get(label, (float("nan"), float("nan"), float("nan")))
        table.append([label, rate, rate / floor, opened * 1000, prepared * 1000, kept])
    print(f"\n{args.rows_per_batch:,} rows per batch, {args.keys:,} keys, {args.batches} batches after "
          f"{args.warmup} warm-up, local[2], {args.partitions} partitions")
    print_table(["query", "rows/s", "vs floor", "open ms (median)", "prepare ms (median)", "copy reused"], table)
    sql = results.get("Spark SQL window aggregation", (float("nan"), 0))[0]
    window = max(results.get("window per partition, cache on", (0, 0))[0], results.get("window per partition, cache off", (0, 0))[0])
    print(f"headline: per-partition windowed count / Spark SQL windowed count rows per second = {window / sql:.2f}")


if __name__ == "__main__":
    sys.exit("run benchmarks/spark_state.py --steady")


# -- state size: 1M against 10M keys in one partition -----------------------------------------


def big_partition(batches: Iterator[pa.RecordBatch], stores: Any) -> Iterator[pa.RecordBatch]:
    """Running count per key; yields the worker's peak RSS during the batch (reset first)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    counts = stores["counts"]
    for batch in batches:
        keys = batch.column("key")
        current = np.array([c or 0 for c in counts.get_all(keys)], dtype=np.int64)
        counts.put_columns(keys, current + 1)
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    yield pa.RecordBatch.from_pydict(
        {"rss_peak": [int(fields["VmHWM"].split()[0]) * 1024], "rss": [int(fields["VmRSS"].split()[0]) * 1024]}
    )


def state_size(args: Any, spark_builder: Any) -> None:
    """One partition loaded with 1M and 10M distinct keys in batch 0, then small batches of
    `--rows-per-batch` updates: per-task open and prepare times and the Python worker's
    peak RSS of the small batches, 10M against 1M; each with the partition kept open
    between tasks (the default) and closed after each task (`keepOpen.partitions=0`). The
    load runs in a Spark session of its own, so the measured batches run in Python workers
    that never held the load's rows."""
    import tempfile

    import pyarrow.parquet as pq

    workdir = tempfile.mkdtemp(prefix="bench-size-")
    builder = (
        spark_builder.config("spark.sql.shuffle.partitions", "1")
        .config("spark.statestore.localDir", os.path.join(workdir, "local"))
        .config("spark.statestore.snapshotInterval", "100")
    )
    phases = [("load", 1, "8"), ("kept open", args.batches, "8"), ("closed each task", args.batches, "0")]
    results = {}
    for keys in args.state_keys:
        inputs = os.path.join(workdir, f"input-{keys}")
        checkpoint = os.path.join(workdir, f"checkpoint-{keys}")
        os.makedirs(inputs)
        rng = np.random.default_rng(3)
        peaks: list = []
        query = None
        first = 0
        for phase, count, keep in phases:
            files = range(first, first + count)
            first += count
            for b in files:
                names = np.arange(keys) if b == 0 else rng.integers(0, keys, args.rows_per_batch)
                table = pa.table({"key": pa.array([f"key-{k:09d}" for k in names])})
                pq.write_table(table, os.path.join(inputs, f"{b:05d}.parquet"))
                os.utime(os.path.join(inputs, f"{b:05d}.parquet"), (1_000_000 + b, 1_000_000 + b))
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            spark.conf.set("spark.statestore.keepOpen.partitions", keep)
            fn = partition_function(big_partition, checkpoint, KV_STORES, partitions=1, emit_changes=False)
            frame = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).parquet(inputs)
            query = (
                frame.repartition(1, "key").mapInArrow(fn, "rss_peak long, rss long").writeStream
                .foreachBatch(lambda f, b, peaks=peaks: peaks.append((b, f.collect())))
                .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
            )
            query.awaitTermination()
            if phase != "load":
                tasks = StateStoreMetrics(checkpoint).tasks()
                # the first batch of a session opens its copy: the steady state comes after
                mine = tasks[(tasks["query_id"] == str(query.id)) & (tasks["batch_id"] > files[0])]
                small = [row for b, rows in peaks if b in files for row in rows]
                print(f"  open ms by batch: {list((mine['open_seconds'] * 1000).round(1))}; of which applying: "
                      f"{list((mine['apply_seconds'] * 1000).round(1))}; prepare ms: "
                      f"{list((mine['prepare_seconds'] * 1000).round(1))}", flush=True)
                results[keys, phase] = (
                    mine["open_seconds"].median() * 1000,
                    mine["prepare_seconds"].median() * 1000,
                    mine["kept_open"].mean(),
                    max(r["rss_peak"] for r in small) / (1 << 20),
                )
                o, p, k, r = results[keys, phase]
                print(f"{keys:,} keys, {phase}: open {o:.1f} ms, prepare {p:.1f} ms, reused {k:.0%}, "
                      f"worker peak RSS {r:.0f} MiB", flush=True)
            spark.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    from common import print_table

    rows = [[f"{k:,} keys", phase, o, p, o + p, f"{kept:.0%}", r] for (k, phase), (o, p, kept, r) in results.items()]
    print(f"\none partition; batches of {args.rows_per_batch:,} updates after the keys were loaded "
          "(medians over the batches after each session's first)")
    print_table(["state", "partition between tasks", "open ms", "prepare ms", "open+prepare ms", "copy reused",
                 "worker peak RSS MiB"], rows)
    small, large = args.state_keys[0], args.state_keys[-1]
    one, ten = results[small, "kept open"], results[large, "kept open"]
    closed = results[small, "closed each task"]
    kept_ratio = (closed[0] + closed[1]) / (one[0] + one[1])
    print(f"open+prepare at {small:,} keys, closed each task / kept open = {kept_ratio:.2f}")
    if small == large:
        print(f"headline: open+prepare ms closed each task / kept open = {kept_ratio:.2f}")
        return
    print(f"peak RSS {large:,}/{small:,} keys = {ten[3] / one[3]:.2f}")
    print(f"headline: open+prepare ms {large:,}/{small:,} keys per partition = {(ten[0] + ten[1]) / (one[0] + one[1]):.2f}")
