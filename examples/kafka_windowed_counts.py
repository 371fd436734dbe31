"""The windowed counts job on Kafka: events from a topic, window results to another topic.

The job of examples/windowed_counts.py (counts per key in tumbling 10 s and sliding 30 s
windows with a 5 s grace period, in `transformWithStateInPandas` with spark_statestore
window stores) reading `spark.readStream.format("kafka")` and writing each closed window
once to an output topic with Spark's Kafka sink. An event is a JSON value
`{"key": "sensor-3", "ts": 12345}` (the Kafka key is the sensor: a sensor's events stay
in one partition, in order); a window result is keyed by `key|kind|window_start`, so a
consumer that keeps the last value per Kafka key (a compacted topic, an upsert into a
table) reads each window exactly once even where Spark's Kafka sink, which is
at-least-once, wrote a retried task's rows twice.

Run it with no arguments (`./dev example --kafka`): it starts a local Kafka broker (Apache
Kafka's jars from Maven Central, KRaft, loopback), makes the topics, produces a stream with
late events and bursts while the job runs, and shows the output topic. `--bootstrap HOST:PORT`
uses a broker of yours instead. Under spark-submit, give the connector as for any job::

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<your Spark version> \\
      examples/kafka_windowed_counts.py --bootstrap broker:9092 --workdir /tmp/kafka_counts
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import windowed_counts
from local_kafka import KafkaTopics, LocalKafka, connector_jars, connector_version
from pyspark import cloudpickle

# the processor's class travels to Spark's Python workers by value: they cannot import a
# module of this folder
cloudpickle.register_pickle_by_value(windowed_counts)

EVENT_SCHEMA = "key string, ts long"


def events(ticks: int, per_tick: int, *, keys: int = 8, seed: int = 7, burst_every: int = 5, burst: int = 10,
           first_tick: int = 0) -> Iterator[list[tuple[str, str, int]]]:
    """The stream, a tick at a time: (Kafka key, JSON value, timestamp ms) records. A tick
    is 10 s of event time; every `burst_every`-th tick carries `burst` times the events;
    5% of events are late by 5 to 40 s (never at or before the epoch: Spark's first
    watermark)."""
    rng = random.Random(seed + first_tick)
    for tick in range(first_tick, first_tick + ticks):
        count = per_tick * (burst if burst_every and tick % burst_every == burst_every - 1 else 1)
        yield [(key, json.dumps({"key": key, "ts": ts}), ts)
               for key, ts in windowed_counts.tick_events(rng, tick, count, keys)]


def build_query(spark: Any, bootstrap: str, topic: str, output_topic: str, checkpoint: str,
                processor: windowed_counts.WindowedCounts, trigger: dict, max_offsets: int | None = None) -> Any:
    """events topic -> windowed counts -> output topic (Spark's Kafka source and sink)."""
    from pyspark.sql import functions as F

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets:
        source = source.option("maxOffsetsPerTrigger", max_offsets)
    parsed = (
        source.load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("event"))
        .select("event.*")
    )
    counts = windowed_counts.watermarked(parsed, processor).groupBy("key").transformWithStateInPandas(
        processor, windowed_counts.OUTPUT_SCHEMA, "Append", "EventTime"
    )
    records = counts.select(
        F.concat_ws("|", "key", "kind", F.col("window_start").cast("string")).alias("key"),
        F.to_json(F.struct("key", "kind", "window_start", "window_end", "count")).alias("value"),
    )
    return (
        records.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .queryName("kafka_windowed_counts")
        .start()
    )


def read_windows(records: list[Any]) -> tuple[list[dict], int]:
    """The window results of an output topic's records, the last value per Kafka key (how a
    compacted topic or an upsert reads them), and how many records were duplicates."""
    latest: dict[bytes, dict] = {}
    for record in records:
        latest[record.key] = json.loads(record.value)
    return list(latest.values()), len(records) - len(latest)


def caught_up(query: Any, kafka: KafkaTopics, topic: str) -> bool:
    """True once the query's last batch read every partition of `topic` to its end."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return False
    read = json.loads(progress["sources"][0]["endOffset"] or "{}").get(topic, {})
    ends = kafka.end_offsets(topic)
    return all(read.get(str(p), 0) >= end for p, end in ends.items())


def wait_settled(query: Any, kafka: KafkaTopics, topic: str, poll: float = 2.0) -> None:
    """Wait until the query read the whole topic and ran no batch for two polls (the
    no-data batch that moves the watermark past the last windows has run)."""
    quiet, last = 0, None
    while quiet < 2:
        if not query.isActive:
            raise SystemExit(f"the query stopped: {query.exception()}")
        time.sleep(poll)
        batch = (query.lastProgress or {}).get("batchId")
        busy = query.status["isTriggerActive"] or not caught_up(query, kafka, topic)
        quiet = 0 if busy or batch != last else quiet + 1
        last = batch


def session(master: str | None, jars: list[str] | None) -> Any:
    """The job's SparkSession; run with python, the connector jars fetched with Maven."""
    builder = windowed_counts.session_builder(master)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    return builder.getOrCreate()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=os.path.abspath("out/kafka_windowed_counts"),
                        help="checkpoint (and the local broker's data) go here")
    parser.add_argument("--bootstrap", default=None, help="a Kafka broker of yours (default: start a local one)")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--output-topic", default="window-counts")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topics this run makes")
    parser.add_argument("--ticks", type=int, default=15, help="10 s event-time ticks to produce")
    parser.add_argument("--events-per-tick", type=int, default=400)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between produced ticks")
    parser.add_argument("--fresh", action="store_true", help="delete the workdir first")
    parser.add_argument("--master", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.fresh:
        shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir, exist_ok=True)
    if args.bootstrap is not None:
        run(args, KafkaTopics(args.bootstrap))
        return
    print("starting a local Kafka broker (Apache Kafka's jars, fetched with Maven the first time)...")
    with LocalKafka(os.path.join(args.workdir, "kafka")) as kafka:  # stopped however the run ends
        run(args, kafka)


def run(args: argparse.Namespace, kafka: KafkaTopics) -> None:
    """Make the topics, feed the stream, run the job until it caught up, show the output."""
    bootstrap = kafka.bootstrap
    for topic in (args.topic, args.output_topic):
        if kafka.partitions(topic) == 0:
            kafka.create_topic(topic, args.partitions)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    jars = None
    if not under_submit:
        found = connector_jars()
        if found is None:
            raise SystemExit(f"no Kafka connector for this pyspark (connector version: {connector_version()}); "
                             "run with spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<version>")
        jars = [str(jar) for jar in found]
    spark = session(args.master, jars)
    spark.sparkContext.setLogLevel("WARN")
    checkpoint = os.path.join(args.workdir, "checkpoint")
    processor = windowed_counts.WindowedCounts(checkpoint)
    print(f"broker:     {bootstrap}  topics {args.topic} -> {args.output_topic}")
    print(f"checkpoint: {checkpoint}  (state under statestore/)")
    progress = windowed_counts.Progress(spark, processor)
    produced = threading.Event()

    def produce() -> None:
        for n, records in enumerate(events(args.ticks, args.events_per_tick)):
            kafka.produce(args.topic, records)
            print(f"produced tick {n:>3}: {len(records):>5} events{'  (burst)' if len(records) > args.events_per_tick else ''}")
            time.sleep(args.interval)
        produced.set()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    query = build_query(spark, bootstrap, args.topic, args.output_topic, checkpoint, processor,
                        {"processingTime": "2 seconds"})
    produced.wait()
    wait_settled(query, kafka, args.topic)
    query.stop()
    progress.stop()
    windows, duplicates = read_windows(kafka.records(args.output_topic))
    windows.sort(key=lambda w: (w["window_start"], w["kind"], w["key"]))
    print(f"\n{args.output_topic}: {len(windows)} window results ({duplicates} duplicate records), for example:")
    for window in windows[:8]:
        print(f"  {window['key']:<10} {window['kind']:<9} [{window['window_start']:>7}, {window['window_end']:>7}) "
              f"count {window['count']}")
    spark.stop()




if __name__ == "__main__":
    main()
