"""The main job's windowed counts on Kafka Streams' terms, on both sides of vs_kafka_streams.py.

Counts per key in tumbling (10 s) and sliding (30 s, every 10 s) windows, each window's final
count written once, keyed `key|kind|window_start`, when it closes. Kafka Streams decides
lateness per task (a topic partition) by its stream time, the largest record timestamp seen so
far: a record counts in a window while `window_end > stream_time - grace` and a window closes
(its final count is written) once `stream_time >= window_end + grace`. `GRACE_MS` is the main
job's 10 s watermark delay plus its 5 s grace, so a window closes at the same event time as
there. (The main job's micro-batch watermark makes which late event is dropped depend on where
Spark cut its batches; Kafka Streams' rule does not, so both sides compute the same windows.)

- `kafka_streams_command`: the Kafka Streams application (benchmarks/kafka_streams, DSL
  `windowedBy(...).count()` + `suppress(untilWindowCloses)`, RocksDB window stores, record
  cache at its default, exactly_once_v2).
- `stream_time_counts`: the same computation with this library's window stores per partition
  (`partition_function` in `mapInArrow`), each Spark partition holding one topic partition's
  records in their order (`build_query` routes them so).
- `reference`: the same computation in plain Python, from a topic's records.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import cloudpickle

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "kafka_streams"))

import build as kafka_streams_build  # noqa: E402 - benchmarks/kafka_streams/build.py
from steady_state import aggregated  # noqa: E402

from spark_statestore import Serdes  # noqa: E402
from spark_statestore.spark import KeyValue, Window, partition_function  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # shipped to the workers by value
WINDOWS = {"tumbling": (10_000, 10_000), "sliding": (30_000, 10_000)}
GRACE_MS = 15_000
OUTPUT_SCHEMA = "key string, kind string, window_start long, window_end long, count long"
AGGREGATE_ROWS = 1_000_000  # rows counted in Arrow before the stores are read and written
STORES = [
    # retention = size + grace, as Kafka Streams' windowed count keeps its windows
    *(Window(kind, size + GRACE_MS, size, key_serde=Serdes.string(), value_serde=Serdes.int64(), clock="records")
      for kind, (size, _) in WINDOWS.items()),
    KeyValue("stream_time", Serdes.string(), Serdes.int64()),
]


def kafka_streams_command(bootstrap: str, input_topic: str, output_topic: str, application_id: str,
                          state_dir: str, threads: int, config: dict[str, Any] | None = None,
                          heap: str | None = None) -> list[str]:
    """The command line of the Kafka Streams application (built with Maven when stale)."""
    arguments = [f"bootstrap={bootstrap}", f"input={input_topic}", f"output={output_topic}",
                 f"application.id={application_id}", f"state.dir={state_dir}", f"threads={threads}",
                 f"grace.ms={GRACE_MS}"]
    arguments += [f"config.{name}={value}" for name, value in (config or {}).items()]
    return kafka_streams_build.command(*arguments, heap=heap)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """Records of `topic` the consumer group (a Kafka Streams application) committed; 0
    while its coordinator cannot say. Asked through a consumer of the group that never
    joins it (an admin client per call crashed the process here)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    except KafkaException:
        return 0
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in offsets)


def window_starts(ts: np.ndarray, size: int, slide: int) -> Iterator[tuple[int, np.ndarray]]:
    """(j, start) for each of a record's windows: the j-th window back from its newest."""
    first = ts - ts % slide
    for j in range(size // slide):
        yield j, first - j * slide


def stream_time_counts(batches: Iterator[pa.RecordBatch], stores: Any) -> Iterator[pa.RecordBatch]:
    """The partition's records (columns `key`, `ts`, in the topic partition's order) counted
    per window on Kafka Streams' terms; yields each window's final count once, when the
    partition's stream time closes it. Rows are counted in Arrow first (up to
    `AGGREGATE_ROWS` at a time): one `get_all` and one `put_columns` per window kind."""
    clock = stores["stream_time"]
    stream_time = clock.get("t")
    stream_time = -1 if stream_time is None else stream_time
    for table in aggregated(batches, AGGREGATE_ROWS):
        ts = table.column("ts").to_numpy()
        running = np.maximum(np.maximum.accumulate(ts), stream_time)  # the stream time at each record
        now = int(running[-1])
        for kind, (size, slide) in WINDOWS.items():
            yield from _count_windows(stores[kind], kind, size, slide, table.column("key"), ts, running,
                                      stream_time, now)
        stream_time = now
    clock.put("t", stream_time)


def _count_windows(store: Any, kind: str, size: int, slide: int, keys: Any, ts: np.ndarray, running: np.ndarray,
                   before: int, now: int) -> Iterator[pa.RecordBatch]:
    """One chunk's records into one kind's windows; the windows `now` closes."""
    closed_before, closed_now = before - GRACE_MS - size, now - GRACE_MS - size  # starts at or below are closed
    picked_keys, picked_starts = [], []
    for _, starts in window_starts(ts, size, slide):
        counted = (starts >= 0) & (starts + size > running - GRACE_MS)
        rows = np.flatnonzero(counted)
        picked_keys.append(keys.take(rows))
        picked_starts.append(starts[rows])
    grouped = pa.table({"key": pa.chunked_array([c for k in picked_keys for c in k.chunks], pa.string()),
                        "start": pa.array(np.concatenate(picked_starts))}).group_by(["key", "start"]).aggregate(
        [("key", "count")])
    names, starts = grouped.column("key"), grouped.column("start").to_numpy()
    # windows this chunk closes: those stored before that it did not count in (read before this
    # chunk's writes move the store's stream time past them), and those it counted in
    closing = []
    if closed_now > max(closed_before, -1):  # some window start (>= 0) newly closed
        stored = store.fetch_all_columns(max(closed_before + 1, 0), closed_now)
        if len(stored.keys):
            earlier = pa.table({"key": pa.array(stored.keys, pa.string()),
                                "start": pa.array(stored.window_starts, pa.int64()),
                                "count": pa.array(stored.values, pa.int64())})
            closing.append(earlier.join(grouped.select(["key", "start"]), ["key", "start"], join_type="left anti"))
    counts = np.array([c or 0 for c in store.get_all(names, starts)], dtype=np.int64)
    counts += grouped.column("key_count").to_numpy()
    open_ = starts > closed_now
    store.put_columns(names.filter(pa.array(open_)), counts[open_], starts[open_])
    done = ~open_
    closing.append(pa.table({"key": names.filter(pa.array(done)), "start": pa.array(starts[done]),
                             "count": pa.array(counts[done])}))
    for part in closing:
        if part.num_rows:
            start = part.column("start").to_numpy()
            yield pa.RecordBatch.from_pydict({
                "key": part.column("key").combine_chunks(), "kind": pa.array([kind] * part.num_rows, pa.string()),
                "window_start": pa.array(start), "window_end": pa.array(start + size),
                "count": part.column("count").combine_chunks()})


def routes(spark: Any, partitions: int) -> list[int]:
    """For each topic partition k, a number that Spark's hash partitioning into `partitions`
    sends to partition k (`repartition(partitions, col)` is `pmod(hash(col), partitions)`)."""
    from pyspark.sql import functions as F

    found = (spark.range(0, 64 * partitions).select("id", F.expr(f"pmod(hash(id), {partitions})").alias("p"))
             .groupBy("p").agg(F.min("id").alias("id")).collect())
    by_partition = {row["p"]: row["id"] for row in found}
    if len(by_partition) < partitions:
        raise RuntimeError(f"no number routes to every one of {partitions} partitions")
    return [by_partition[k] for k in range(partitions)]


def build_query(spark: Any, bootstrap: str, topic: str, output_topic: str, checkpoint: str, partitions: int,
                trigger: dict, max_offsets: int | None = None, wrap: Callable | None = None) -> Any:
    """topic -> `stream_time_counts` per topic partition -> output topic. Each Spark partition
    after the shuffle holds exactly one topic partition's records, from the one task that read
    them, in their order (the shuffle keeps a map task's order), as a Kafka Streams task does.
    `wrap(fn)` replaces the partition function (`profiled`)."""
    from pyspark.sql import functions as F

    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if max_offsets:
        source = source.option("maxOffsetsPerTrigger", max_offsets)
    route = F.array(*[F.lit(n).cast("long") for n in routes(spark, partitions)])
    records = source.load().select(
        F.col("key").cast("string").alias("key"), F.unix_millis("timestamp").alias("ts"),
        F.element_at(route, F.col("partition") + 1).alias("route"))
    fn = partition_function(stream_time_counts, checkpoint, STORES, partitions=partitions, emit_changes=False)
    counts = records.repartition(partitions, "route").mapInArrow(wrap(fn) if wrap else fn, OUTPUT_SCHEMA)
    out = counts.select(
        F.concat_ws("|", "key", "kind", F.col("window_start").cast("string")).alias("key"),
        F.to_json(F.struct("key", "kind", "window_start", "window_end", "count")).alias("value"))
    return (out.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("topic", output_topic).option("checkpointLocation", checkpoint).trigger(**trigger).start())


def profiled(directory: str) -> Callable:
    """A wrapper of a partition function that runs each task under cProfile (opening the
    state, Spark's input, the function, preparing the changelog) and writes its stats to
    `directory`, one file per task."""

    def wrap(fn: Callable) -> Callable:
        def run(batches: Iterator[Any]) -> Iterator[Any]:
            import cProfile
            import time

            profile = cProfile.Profile()
            profile.enable()
            try:
                yield from fn(batches)
            finally:
                profile.disable()
                os.makedirs(directory, exist_ok=True)
                profile.dump_stats(os.path.join(directory, f"{os.getpid()}-{time.time_ns()}.prof"))

        return run

    return wrap


def reference(records: Iterable[Any]) -> dict[str, dict]:
    """The windows both sides must write, from the input topic's records (partition, key,
    timestamp), by output key."""
    by_partition: dict[int, list] = defaultdict(list)
    for record in records:
        by_partition[record.partition].append(record)
    out: dict[str, dict] = {}
    for partition_records in by_partition.values():
        counts: Counter = Counter()
        stream_time = -1
        for record in sorted(partition_records, key=lambda r: r.offset):
            stream_time = max(stream_time, record.timestamp)
            key = record.key.decode()
            for kind, (size, slide) in WINDOWS.items():
                for _, start in window_starts(np.array([record.timestamp]), size, slide):
                    start = int(start[0])
                    if start >= 0 and start + size > stream_time - GRACE_MS:
                        counts[key, kind, start] += 1
        for (key, kind, start), count in counts.items():
            if start + WINDOWS[kind][0] + GRACE_MS <= stream_time:
                out[f"{key}|{kind}|{start}"] = {"key": key, "kind": kind, "window_start": start,
                                                "window_end": start + WINDOWS[kind][0], "count": count}
    return out


def windows_of(records: Iterable[Any]) -> dict[str, dict]:
    """An output topic's windows, the last value per Kafka key (as a compacted topic keeps
    them; Spark's Kafka sink is at-least-once)."""
    return {record.key.decode(): json.loads(record.value) for record in records}
