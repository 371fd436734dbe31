"""Kafka in, Kafka out, against a real broker (Apache Kafka's own jars, KRaft, loopback) and
Spark's Kafka connector (fetched with Maven, given as `spark.jars` as a user's `--jars`).

- The main job on Kafka (examples/kafka_windowed_counts.py): its output topic, read as a
  consumer of its idempotent keys reads it, equals the batch reference computed from the
  input topic's records and the batches the query ran (its offset log), while tasks raise
  and a worker is killed; the window stores' change feed says the same; the CLI and the
  metrics read the checkpoint.
- Every adapter exactly once on Kafka offsets: the state equals each key's count of records
  after raised tasks, a killed Python worker, the broker stopped and started mid-run and
  partitions added to the topic while the query runs; and after the driver is killed with
  SIGKILL mid-batch and started again.

Maven Central as served here has no connector for pyspark 4.3: there these tests skip
(`./dev minors` runs them on 4.2; README: pyspark versions).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import kafka_jobs
import pandas as pd
import pytest
import spark_batches
import spark_jobs
import windowed_reference
from conftest import KAFKA_JARS, NO_KAFKA_REASON, topic_name

from spark_statestore.spark import StateStoreMetrics, compat, register_reader
from paths import EXAMPLES, SUPPORT

pytestmark = [pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.skipif(KAFKA_JARS is None, reason=NO_KAFKA_REASON)]
kafka_windowed_counts = pytest.importorskip("kafka_windowed_counts")
HERE = str(SUPPORT)


@pytest.fixture
def workdir(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local-state"))
    spark.conf.set("spark.statestore.snapshotInterval", "3")
    register_reader(spark)
    yield tmp_path
    for key in ("spark.statestore.localDir", "spark.statestore.snapshotInterval"):
        spark.conf.unset(key)


def wait_caught_up(query, checkpoint: str, kafka, topic: str, timeout: float = 600) -> None:
    """Wait until a committed batch of the query read every partition of `topic` to its end."""
    deadline = time.monotonic() + timeout
    while True:
        ends = {p: end for p, end in kafka.end_offsets(topic).items() if end > 0}
        read = kafka_jobs.committed_ends(checkpoint)
        if all(read.get(p, 0) >= end for p, end in ends.items()):
            return
        if query is not None and not query.isActive:
            raise AssertionError(f"the query ended before reading {topic} to {ends}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the query did not read {topic} to {ends} (read {read})")
        time.sleep(0.5)


# -- the main job on Kafka -----------------------------------------------------------------


def last_counts_of_the_change_feed(spark, checkpoint: str, store: str) -> dict[tuple, int]:
    """Each window's last count in the store's change feed of every committed batch."""
    changes = (spark.read.format("spark_statestore").option("checkpointLocation", checkpoint)
               .option("store", store).option("readChangeFeed", "true").option("changeStartBatchId", 0)
               .load().toPandas().sort_values(["batch_id"], kind="stable"))
    puts = changes[changes["change"] == "put"]
    return {(key, int(start)): int(value)
            for key, start, value in zip(puts["key"], puts["window_start"], puts["value"], strict=True)}


@pytest.mark.versioned
def test_the_kafka_job_writes_the_reference_windows_and_its_metrics_and_cli_read_it(spark, kafka, workdir, capsys):
    spark_jobs.skip_without_tws(spark)
    topic, output = topic_name("events"), topic_name("windows")
    kafka.create_topic(topic, 3)
    kafka.create_topic(output, 3)
    produced = sum(kafka.produce(topic, records)
                   for records in kafka_windowed_counts.events(8, 150, burst_every=4, burst=10))
    checkpoint = str(workdir / "checkpoint")
    faults = {"raise_in": {1}, "raise_after_output_in": {3, 4}}
    if not compat.is_connect(spark):
        faults["kill_in"] = {2}
    processor = spark_jobs.FaultyCounts(checkpoint, spark=spark, **faults)
    query = kafka_windowed_counts.build_query(spark, kafka.bootstrap, topic, output, checkpoint, processor,
                                              {"availableNow": True}, max_offsets=800)
    spark_jobs.finished(spark, query)
    assert spark_jobs.injected(checkpoint, "raised") == {1}
    assert spark_jobs.injected(checkpoint, "raised_after_output"), "no batch emitted windows of three timers"

    committed, watermarks, ranges = spark_batches.kafka_batches(checkpoint)
    assert len(committed) >= 4, f"maxOffsetsPerTrigger=800 over {produced} records: {committed}"
    records = kafka.records(topic)
    assert len(records) == produced
    by_offset = {(r.partition, r.offset): json.loads(r.value) for r in records}

    def rows(batch: int):
        for (_, partition), (start, until) in ranges[batch].items():
            for offset in range(start, until):
                event = by_offset[(partition, offset)]
                yield event["key"], event["ts"]

    expected = windowed_reference.replay(committed, watermarks, rows)
    assert len(expected) > 20
    written = kafka.records(output)
    windows, duplicates = kafka_windowed_counts.read_windows(written)
    actual = pd.DataFrame(windows)
    difference = windowed_reference.compare(actual, expected)
    assert difference is None, difference
    # Spark's Kafka sink is at-least-once: a task that failed after sending windows sent them
    # again in its retry; read by their idempotent keys, each window counts once (above)
    with capsys.disabled():
        print(f"\nkafka sink: {len(written)} records for {len(windows)} windows ({duplicates} duplicates)")
    assert duplicates > 0, "the tasks that failed after output sent none of it"
    assert len({r.key for r in written}) == len(windows)


    # the metrics: one row per committed batch; the CLI reads and verifies the checkpoint
    recent = StateStoreMetrics(checkpoint).recent(1000)
    assert sorted(recent["batch_id"]) == committed
    for command in (["verify", checkpoint], ["inspect", checkpoint, "--json"]):
        done = subprocess.run([sys.executable, "-m", "spark_statestore", *command], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    assert set(json.loads(done.stdout)["stores"]) == {"tumbling", "sliding"}


@pytest.mark.classic_only
def test_the_change_feed_of_a_window_store_equals_what_the_job_wrote_to_kafka(spark, kafka, workdir):
    """Per-partition windowed counts (each window emitted once, from the store, in the batch
    whose watermark passes its end; it expires in the next) from a topic to a topic: the
    store's change feed and the output topic hold the same counts of the same windows."""
    from pyspark.sql import functions as F

    from spark_statestore import Serdes
    from spark_statestore.spark import Window, partition_function

    size = 10_000
    topic, output = topic_name("events"), topic_name("closed")
    kafka.create_topic(topic, 3)
    kafka.create_topic(output, 2)
    for records in kafka_windowed_counts.events(8, 100, keys=6, seed=3, burst_every=3):
        kafka.produce(topic, records)
    checkpoint = str(workdir / "checkpoint")
    stores = [Window("windows", size, size, key_serde=Serdes.string(), value_serde=Serdes.int64())]
    fn = partition_function(spark_jobs.partition_window_counts(size, raise_in={2}, checkpoint=checkpoint),
                            checkpoint, stores, partitions=2, emit_changes=False, spark=spark)
    events = (kafka_jobs.kafka_source(spark, kafka.bootstrap, topic, max_offsets=500)
              .select(F.from_json(F.col("value").cast("string"), "key string, ts long").alias("e")).select("e.*")
              .withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", "10 seconds"))
    closed = events.repartition(2, "key").mapInArrow(fn, "key string, window_start long, count long")
    query = (closed.select(F.concat_ws("|", "key", F.col("window_start").cast("string")).alias("key"),
                           F.to_json(F.struct("key", "window_start", "count")).alias("value"))
             .writeStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", output)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    spark_jobs.finished(spark, query)
    assert spark_jobs.injected(checkpoint, "raised") == {2}
    windows, _ = kafka_windowed_counts.read_windows(kafka.records(output))
    written = {(w["key"], w["window_start"]): w["count"] for w in windows}
    assert len(written) > 20
    feed = last_counts_of_the_change_feed(spark, checkpoint, "windows")
    watermark = spark_batches.kafka_batches(checkpoint)[1][max(spark_batches.kafka_batches(checkpoint)[0])]
    assert {w: c for w, c in feed.items() if w[1] + size <= watermark} == written


# -- every adapter, exactly once on Kafka offsets --------------------------------------------


def _adapter(name: str):
    if name == "transformWithState" and not compat.FACTS.row_transform_with_state:
        pytest.skip(f"pyspark {compat.VERSION} has no Row-based transformWithState")
    return name


@pytest.mark.classic_only
@pytest.mark.parametrize("adapter", kafka_jobs.ADAPTERS)
def test_every_adapter_is_exactly_once_through_failures_a_broker_restart_and_new_partitions(
        spark, kafka, workdir, adapter):
    _adapter(adapter)
    topic = topic_name(adapter.lower())
    kafka.create_topic(topic, 2)
    rounds = iter(kafka_windowed_counts.events(9, 120, keys=20, seed=11, burst_every=0))
    for _ in range(3):
        kafka.produce(topic, next(rounds))
    checkpoint = str(workdir / "checkpoint")
    # batches 0..: a task raises in batch 1 and a worker is killed in batch 2
    query = kafka_jobs.start(spark, adapter, kafka.bootstrap, topic, checkpoint, {"availableNow": True},
                             raise_in={1}, kill_in={2}, max_offsets=150)
    spark_jobs.finished(spark, query)
    assert spark_jobs.injected(checkpoint, "raised") == {1}
    assert spark_jobs.injected(checkpoint, "killed") == {2}
    assert kafka_jobs.state_totals(spark, checkpoint) == kafka_jobs.expected_totals(kafka.records(topic))

    # a running query: the broker stops and comes back; the topic grows while it runs
    query = kafka_jobs.start(spark, adapter, kafka.bootstrap, topic, checkpoint, {"processingTime": "500 milliseconds"})
    try:
        kafka.produce(topic, next(rounds))
        wait_caught_up(query, checkpoint, kafka, topic)
        kafka.stop()
        kafka.start()
        kafka.produce(topic, next(rounds))
        kafka.add_partitions(topic, 4)
        for _ in range(3):
            kafka.produce(topic, next(rounds))
        wait_caught_up(query, checkpoint, kafka, topic)
    finally:
        query.stop()
    assert query.exception() is None
    records = kafka.records(topic)
    assert {r.partition for r in records} == {0, 1, 2, 3}
    assert kafka_jobs.state_totals(spark, checkpoint) == kafka_jobs.expected_totals(records)


@pytest.mark.classic_only
def test_a_driver_killed_mid_batch_restarts_every_adapter_exactly_once(spark, kafka, workdir):
    topic = topic_name("driver")
    kafka.create_topic(topic, 3)
    rounds = iter(kafka_windowed_counts.events(6, 150, keys=20, seed=5, burst_every=0))
    for _ in range(3):
        kafka.produce(topic, next(rounds))
    adapters = [a for a in kafka_jobs.ADAPTERS
                if a != "transformWithState" or compat.FACTS.row_transform_with_state]
    driver = [sys.executable, os.path.join(HERE, "kafka_driver.py"), kafka.bootstrap, topic, str(workdir), *adapters]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_STATESTORE_KAFKA_JARS=KAFKA_JARS)
    log = open(workdir / "driver-1.log", "w")
    first = subprocess.Popen([*driver, "--hold-in", "1"], stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    checkpoints = {a: str(workdir / a / "checkpoint") for a in adapters}

    def wait_for(what: str, done) -> None:
        deadline = time.monotonic() + 400
        while not all(done(c) for c in checkpoints.values()):
            assert first.poll() is None, (workdir / "driver-1.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"the driver's queries did not reach {what}"
            time.sleep(0.5)

    try:
        wait_for("batch 0's commit", lambda c: os.path.exists(os.path.join(c, "commits", "0")))
        kafka.produce(topic, next(rounds))  # batch 1 reads it, and its tasks hold
        wait_for("batch 1", lambda c: spark_jobs.injected(c, "held"))
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers at once
        first.wait()
        log.close()
    for checkpoint in checkpoints.values():
        assert not os.path.exists(os.path.join(checkpoint, "commits", "1")), "batch 1 was to be in flight"
    for _ in range(2):
        kafka.produce(topic, next(rounds))
    done = subprocess.run([*driver, "--until-caught-up"], capture_output=True, text=True, env=env, timeout=900,
                          check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    expected = kafka_jobs.expected_totals(kafka.records(topic))
    for adapter, checkpoint in checkpoints.items():
        assert kafka_jobs.state_totals(spark, checkpoint) == expected, adapter


def test_the_kafka_example_runs_as_documented_and_stops_its_broker(tmp_path):
    """`./dev example --kafka` is this script with no arguments but size: it starts its own
    broker, feeds the stream while the job runs, shows the output topic and stops the broker."""
    workdir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "kafka_windowed_counts.py"),
         "--workdir", str(workdir), "--ticks", "6", "--events-per-tick", "100", "--interval", "0.2"],
        capture_output=True, text=True, timeout=600, check=False,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable),
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    shown = [line for line in done.stdout.splitlines() if line.startswith("window-counts: ")]
    assert shown and int(shown[0].split()[1]) > 0, done.stdout[-2000:]
    assert "produced tick   5" in done.stdout
    brokers = subprocess.run(["pgrep", "-f", str(workdir / "kafka")], capture_output=True, text=True, check=False)
    assert brokers.stdout.strip() == "", "the example's broker outlived it"
