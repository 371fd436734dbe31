"""A bursty stream into a stateful query, for the early trigger (benchmark and notebook).

A feeder writes one parquet file per second (`rate` rows each: page views of `keys`
keys, each row stamped with the time its file was written; with `kafka=`, one round of
records to a Kafka topic read by Spark's Kafka source, each record's timestamp its
arrival), and ten a second during the burst. A per-partition query (`partition_function`: a running count per key,
one `get_all` and one `put_columns` per Arrow batch) reads them with a processing-time
trigger and takes whatever arrived. `run_burst(...)` runs it once, with the early trigger
on or off, and returns the per-batch metrics (with the driver's early-trigger decisions from
the batch files, `<checkpoint>/statestore/_batches/<batch>.json`) and each row's latency.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StateStoreMetrics, partition_function

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # shipped to the workers by value


# uncommitted bytes per key of a task of this query (a string key and a count, with what
# CPython spends per buffered record), measured
BYTES_PER_KEY = 170


@dataclass(frozen=True)
class BurstShape:
    """The stream: `trigger` seconds between batches, `rate` rows a second (ten times that
    for `burst_seconds`, starting half an interval after a batch began, the expected
    case), `limit` uncommitted bytes per task (0: two steady batches' worth)."""

    trigger: int = 30
    rate: int = 2000
    keys: int = 200_000
    lead_seconds: int = 60
    burst_seconds: int = 90
    tail_seconds: int = 60
    limit: int = 0

    @property
    def uncommitted_limit(self) -> int:
        # a task holds about half a batch's keys, at BYTES_PER_KEY each. (A limit below a
        # steady batch's worth has admission cut every batch into small ones whose fixed
        # costs bound the throughput: the burst's backlog then grows as with the trigger off.)
        steady_batch = min(self.keys, self.trigger * self.rate) // 2 * BYTES_PER_KEY
        return self.limit or 2 * steady_batch


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


class FileInput:
    """The stream as parquet files in `directory`, one per round."""

    def __init__(self, directory: str) -> None:
        self.directory, self.written = directory, 0
        os.makedirs(directory)

    def write(self, keys: list[str], now_ms: int) -> None:
        import pyarrow.parquet as pq

        table = pa.table({"key": pa.array(keys), "arrived": pa.array(np.full(len(keys), now_ms))})
        temp = os.path.join(self.directory, f".{self.written:07d}.tmp")
        pq.write_table(table, temp)
        os.replace(temp, os.path.join(self.directory, f"{self.written:07d}.parquet"))
        self.written += 1

    def stream(self, session: Any) -> Any:
        return session.readStream.schema("key string, arrived long").parquet(self.directory)


class KafkaInput:
    """The stream as records of a Kafka topic (`local_kafka.KafkaTopics`), a round at a time;
    a record's timestamp is its arrival."""

    def __init__(self, kafka: Any, topic: str, partitions: int = 4) -> None:
        self.kafka, self.topic = kafka, topic
        kafka.create_topic(topic, partitions)

    def write(self, keys: list[str], now_ms: int) -> None:
        self.kafka.produce(self.topic, [(key, None, now_ms) for key in keys])

    def stream(self, session: Any) -> Any:
        from pyspark.sql import functions as F

        return (session.readStream.format("kafka").option("kafka.bootstrap.servers", self.kafka.bootstrap)
                .option("subscribe", self.topic).option("startingOffsets", "earliest").load()
                .select(F.col("key").cast("string").alias("key"), F.unix_millis("timestamp").alias("arrived")))


class Feeder(threading.Thread):
    """Writes the input: one round a second, ten a second during the burst."""

    def __init__(self, output: FileInput | KafkaInput, rate: int, keys: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.output, self.rate, self.keys, self.seconds = output, rate, keys, seconds
        self.burst: tuple[float, float] | None = None  # wall-clock seconds, set by the runner
        self.stop = threading.Event()
        self.rng = np.random.default_rng(7)
        self.written = 0

    def _file(self) -> None:
        now_ms = int(time.time() * 1000)
        keys = self.rng.integers(0, self.keys, self.rate)
        self.output.write([f"key-{k:07d}" for k in keys], now_ms)
        self.written += 1

    def run(self) -> None:
        end = time.time() + self.seconds
        while time.time() < end and not self.stop.is_set():
            second = time.time()
            burst = self.burst is not None and self.burst[0] <= second < self.burst[1]
            for _ in range(10 if burst else 1):
                self._file()
            self.stop.wait(max(0.0, 1.0 - (time.time() - second)))


def _rows_per_batch_second(progress: list, full: int) -> float:
    """Rows processed per second of batch time, over the batches of at least `full` rows (a
    whole interval's input: the first batches take what the start's phase gave them): the
    query's capacity, which a steady stream below it does not show in rows per wall second."""
    busy = [p for p in progress if p["numInputRows"] >= full]
    seconds = sum(p["durationMs"].get("triggerExecution", 0) for p in busy) / 1000
    return sum(p["numInputRows"] for p in busy) / seconds if seconds else 0.0


def first_batch_with(query: Any, since_ms: float) -> int:
    """The first batch that started after `since_ms` (it takes the first burst rows)."""
    started = [p["batchId"] for p in query.recentProgress if pd.Timestamp(p["timestamp"]).value // 1_000_000 > since_ms]
    return min(started) if started else 1 << 62


@dataclass
class BurstRun:
    """One run: a summary, the per-batch metrics and (arrival, output) times of each row."""

    summary: dict
    batches: pd.DataFrame  # metrics.recent() of the run's query
    progress: pd.DataFrame  # per batch: start (epoch ms), input rows, duration (ms)
    latencies: list
    burst: tuple
    started_ms: int  # when the run began (its first input file): the time axis' 0


def run_burst(spark: Any, workdir: str, args: BurstShape, governor: bool, admission: bool = True,
              kafka: Any = None) -> BurstRun:
    """Run the bursty stream once (a session of its own, early triggers on or off, adaptive
    admission on or off with them); from files, or from a topic of its own on `kafka` (a
    `local_kafka.KafkaTopics`)."""
    session = spark.newSession()
    session.conf.set("spark.statestore.earlyTrigger.enabled", str(governor).lower())
    session.conf.set("spark.statestore.earlyTrigger.admission", str(admission).lower())
    session.conf.set("spark.statestore.uncommitted.maxBytes", str(args.uncommitted_limit))
    session.conf.set("spark.statestore.cache.maxBytes", "0")
    session.conf.set("spark.statestore.localDir", os.path.join(workdir, "local"))
    # every batch's progress (Spark keeps 100 by default: a run cut into small batches lost
    # its first ones, and its time axis started in the middle of the run)
    session.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    name = f"input-{governor}-{admission}"
    output = (FileInput(os.path.join(workdir, name)) if kafka is None
              else KafkaInput(kafka, f"{name.lower()}-{os.path.basename(workdir)}-{time.time_ns()}"))
    checkpoint = os.path.join(workdir, f"checkpoint-{governor}-{admission}")
    total_seconds = args.lead_seconds + args.burst_seconds + args.tail_seconds
    feeder = Feeder(output, args.rate, args.keys, total_seconds)
    started_ms = int(time.time() * 1000)
    feeder._file()  # the first batch has input
    latencies: list[tuple[int, int]] = []  # (arrival ms, batch end ms)

    def sink(frame: Any, batch_id: int) -> None:
        ended = int(time.time() * 1000)
        for row in frame.collect():
            latencies.extend((a, ended) for a in row["arrived"])

    fn = partition_function(counts, checkpoint, STORES, partitions=2, emit_changes=False, spark=session)
    stream = output.stream(session).repartition(2, "key").mapInArrow(fn, OUTPUT)
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
    metrics = StateStoreMetrics(checkpoint)
    tasks = metrics.tasks()
    tasks = tasks[tasks["query_id"] == str(query.id)]
    recent = metrics.recent(1000)
    recent = recent[recent["query_id"] == str(query.id)]  # early_triggers and reasons: the driver's batch files
    burst_ms = (feeder.burst[0] * 1000, feeder.burst[1] * 1000)
    in_burst = [end - arrived for arrived, end in latencies if burst_ms[0] <= arrived < burst_ms[1]]
    every = [end - arrived for arrived, end in latencies]
    batches_with_burst = {p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0}
    peaks = tasks.groupby("batch_id")["uncommitted_bytes_peak"].max()
    limit = args.uncommitted_limit
    burst_batches = peaks[peaks.index >= first_batch_with(query, burst_ms[0])]
    summary = {
        "peak": int(tasks["uncommitted_bytes_peak"].max()),
        "burst_max_over_limit": float(burst_batches.max()) / limit if len(burst_batches) else 0.0,
        "first_burst_over_limit": float(burst_batches.iloc[0]) / limit if len(burst_batches) else 0.0,
        "burst_peak_mean": float(peaks[peaks > limit // 4].mean()) if (peaks > limit // 4).any() else 0.0,
        "spills": int(tasks["spills"].sum()),
        "batches": len(batches_with_burst),
        "early": int(recent["early_triggers"].sum()),
        "cut_short": int(recent["admission_cut_short"].sum()) if "admission_cut_short" in recent else 0,
        "burst_batch_s": float(np.mean([p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress
                                        if p["batchId"] >= first_batch_with(query, burst_ms[0]) and p["numInputRows"]]
                                       or [0])) / 1000,
        "rows_per_batch_s": _rows_per_batch_second(query.recentProgress, args.trigger * args.rate),
        "all_p50": float(np.percentile(every, 50)) / 1000 if every else float("nan"),
        "all_p99": float(np.percentile(every, 99)) / 1000 if every else float("nan"),
        "p50": float(np.percentile(in_burst, 50)) / 1000 if in_burst else float("nan"),
        "p99": float(np.percentile(in_burst, 99)) / 1000 if in_burst else float("nan"),
        "rows": len(latencies),
        "written": feeder.written * args.rate,
    }
    progress = pd.DataFrame(
        [
            {
                "batch_id": p["batchId"],
                "start": pd.Timestamp(p["timestamp"]).value // 1_000_000,
                "rows": p["numInputRows"],
                "duration_ms": p["durationMs"].get("triggerExecution", 0),
            }
            for p in query.recentProgress
        ]
    )
    return BurstRun(summary, recent.sort_values("batch_id"), progress, latencies, feeder.burst, started_ms)


