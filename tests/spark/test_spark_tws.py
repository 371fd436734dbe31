"""Stores inside transformWithStateInPandas, end to end on local[2,4].

The windowed-count job of examples/windowed_counts.py must write exactly the counts of a
batch reference computed from its input, while tasks fail and are retried, a Python
worker is killed in the middle of a batch, the query is stopped and restarted, and the
local state is lost between batches.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

import spark_jobs
import windowed_reference
from spark_statestore.partition import PartitionState, WorkerResources
from spark_statestore.spark import KeyValue, StoreProcessor

pytestmark = pytest.mark.spark
windowed_counts = spark_jobs.windowed_counts


@pytest.fixture
def job(spark, tmp_path):
    """A work directory with generated input, and this test's own local state directory."""
    spark_jobs.skip_without_tws(spark)
    workdir = str(tmp_path / "job")
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local-state"))
    spark.conf.set("spark.statestore.snapshotInterval", "3")
    yield workdir
    for key in ("spark.statestore.localDir", "spark.statestore.snapshotInterval"):
        spark.conf.unset(key)


def run(spark, workdir, processor):
    query = windowed_counts.build_query(spark, workdir, processor, {"availableNow": True})
    spark_jobs.finished(spark, query)  # the batches' log lines too: the listener bus may run behind
    return query


def check_output(spark, workdir):
    actual = pd.read_parquet(os.path.join(workdir, "output"))
    expected = windowed_reference.reference(os.path.join(workdir, "checkpoint"))
    assert len(expected) > 20
    difference = windowed_reference.compare(actual, expected)
    assert difference is None, difference


def tasks_of(processor, query):
    """The query's task metrics; None in a Spark Connect session (no accumulators there)."""
    if processor.metrics is None:
        return None
    tasks = processor.metrics.tasks()
    return tasks[tasks["query_id"] == str(query.id)]


@pytest.mark.versioned
def test_windowed_counts_match_the_batch_reference(spark, job):
    windowed_counts.generate(os.path.join(job, "input"), 6, 120, keys=6)
    processor = windowed_counts.WindowedCounts(os.path.join(job, "checkpoint"))
    query = run(spark, job, processor)
    check_output(spark, job)
    tasks = tasks_of(processor, query)
    if tasks is None:
        return
    committed = os.listdir(os.path.join(job, "checkpoint", "commits"))
    assert set(tasks["batch_id"]) == {int(n) for n in committed if n.isdigit()}
    assert set(tasks["partition"]) == {0, 1}
    assert (tasks["rows_written"] > 0).any()
    assert (tasks["operator"] == "transformWithStateInPandas").all()
    recent = processor.metrics.recent(100)
    assert {"batch_id", "rows_written", "uncommitted_bytes_peak", "cache_hits", "open_seconds"} <= set(recent.columns)


# Late events at the edges (delay 10 s, grace 5 s; windows 10 s tumbling, 30 s sliding by
# 10 s). A batch's rows are late by the watermark the batch before ran with (of the events
# up to two batches before). Batch 2 runs behind 25 s: 25 s is at it, 20 s at a window's
# start, 19.999 s and 15 s in a tumbling window it closed (end + grace = 25 s) but in open
# sliding ones. Batch 5 runs behind 50 s: 15 s has every window closed (Spark drops it),
# 20 s only the sliding window [20 s, 50 s) open (the window stores drop the others).
LATE_EDGES = [
    [("a", 35_000), ("b", 31_000)],
    [("c", 35_000)],
    [("a", 25_000), ("a", 20_000), ("a", 19_999), ("b", 15_000), ("b", 14_999), ("a", 45_000)],
    [("a", 60_000)],
    [("c", 60_000)],
    [("b", 15_000), ("b", 20_000), ("b", 120_000)],
]


def test_windowed_counts_equal_spark_sqls_window_aggregation_with_late_events_at_the_edges(spark, job):
    """The example's windows are Spark SQL's window aggregation in append mode with the
    delay widened by the grace period: an event still counts in its windows that are open
    when it arrives, also when its event time is at or before the watermark."""
    from pyspark.sql import functions as F

    inputs = os.path.join(job, "input")
    os.makedirs(inputs)
    for n, rows in enumerate(LATE_EDGES):
        path = os.path.join(inputs, f"{n:05d}.json")
        pd.DataFrame(rows, columns=["key", "ts"]).to_json(path, orient="records", lines=True)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
    run(spark, job, windowed_counts.WindowedCounts(os.path.join(job, "checkpoint")))
    stamped = (
        spark.readStream.schema(windowed_counts.INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(inputs)
        .withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", "15 seconds")
    )
    sql = []
    for kind, window in (("tumbling", ("10 seconds",)), ("sliding", ("30 seconds", "10 seconds"))):
        counts = stamped.groupBy(F.window("event_time", *window), "key").count().select(
            "key", F.lit(kind).alias("kind"), F.unix_millis(F.col("window.start")).alias("window_start"),
            F.unix_millis(F.col("window.end")).alias("window_end"), "count",
        )
        spark_jobs.finished(spark, counts.writeStream.format("memory").queryName(f"sql_{kind}").outputMode(
            "append").option("checkpointLocation", os.path.join(job, f"sql-{kind}")).trigger(availableNow=True).start())
        sql.append(spark.sql(f"select * from sql_{kind}").toPandas())
    expected = pd.concat(sql).query("window_start >= 0 and window_end <= 105000")  # the stores hold no negative times
    actual = pd.read_parquet(os.path.join(job, "output"))
    assert len(expected) == 24 and actual["window_end"].max() <= 105000
    difference = windowed_reference.compare(actual, expected)
    assert difference is None, difference
    check_output(spark, job)  # and the batch reference, on the same edges


# on the newest minor (the others: the killed worker's test, on the same runner)
@pytest.mark.classic_only
def test_exactly_once_when_tasks_raise_and_are_retried(spark, job):
    windowed_counts.generate(os.path.join(job, "input"), 7, 120, keys=6)
    processor = spark_jobs.FaultyCounts(os.path.join(job, "checkpoint"), raise_in={1, 4})
    query = run(spark, job, processor)
    check_output(spark, job)
    assert spark_jobs.injected(os.path.join(job, "checkpoint"), "raised") == {1, 4}
    tasks = tasks_of(processor, query)
    if tasks is None:
        return
    retried = tasks.query("attempt > 0")
    assert set(retried["batch_id"]) == {1, 4}
    assert tasks.groupby(["batch_id", "partition"]).size().max() == 1  # one attempt counted once


@pytest.mark.versioned
@pytest.mark.classic_only
def test_exactly_once_when_a_python_worker_is_killed_mid_batch(spark, job):
    windowed_counts.generate(os.path.join(job, "input"), 7, 120, keys=6)
    processor = spark_jobs.FaultyCounts(os.path.join(job, "checkpoint"), kill_in={2, 5})
    query = run(spark, job, processor)
    check_output(spark, job)
    assert spark_jobs.injected(os.path.join(job, "checkpoint"), "killed") == {2, 5}
    tasks = tasks_of(processor, query)
    if tasks is not None:
        assert {2, 5} <= set(tasks.query("attempt > 0")["batch_id"])


# on the newest minor (the others: the killed worker's test, on the same runner)
@pytest.mark.classic_only
def test_exactly_once_across_stop_and_restart(spark, job):
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 4, 120, keys=6)
    first = windowed_counts.WindowedCounts(os.path.join(job, "checkpoint"))
    run(spark, job, first)
    windowed_counts.generate(inputs, 4, 120, keys=6, start=4)
    second = windowed_counts.WindowedCounts(os.path.join(job, "checkpoint"))  # a new driver
    query = run(spark, job, second)
    check_output(spark, job)
    assert query.recentProgress[0]["batchId"] > 0  # it carried on, it did not start over


@pytest.mark.classic_only
def test_exactly_once_when_local_state_is_lost_between_batches(spark, job):
    windowed_counts.generate(os.path.join(job, "input"), 8, 120, keys=6)
    processor = spark_jobs.FaultyCounts(os.path.join(job, "checkpoint"), wipe_local_in={3, 6})
    query = run(spark, job, processor)
    check_output(spark, job)
    assert spark_jobs.injected(os.path.join(job, "checkpoint"), "wiped") == {3, 6}
    tasks = tasks_of(processor, query)
    if tasks is not None:
        assert {3, 6} <= set(tasks.query("restored > 0")["batch_id"])


class Peek(StoreProcessor):
    """Writes one value per key, then reports what a read-only view of the store sees."""

    stores = [KeyValue("seen")]

    def process_rows(self, key, rows, timer_values):
        seen = self.store("seen")
        name = b"%s/%d/" % (key[0].encode(), self.batch_id)  # new in every batch
        for frame in rows:
            for i in range(len(frame)):
                seen.put(name + b"%d" % i, b"x" * 100)
        view = self.view("seen")
        yield pd.DataFrame({"key": [key[0]], "visible": [view.get(name + b"0") is not None]})


def test_settings_take_effect_in_tasks(spark, job):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(__import__(__name__))
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 2, 60, keys=3)

    def run_peek(name):
        checkpoint = os.path.join(job, name)
        processor = Peek(checkpoint)
        events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(inputs)
        out = events.groupBy("key").transformWithStateInPandas(processor, "key string, visible boolean", "Update", "None")
        query = (out.writeStream.format("memory").queryName(name).option("checkpointLocation", checkpoint)
                 .outputMode("update").trigger(availableNow=True).start())
        query.awaitTermination()
        return processor, query, spark.sql(f"select * from {name}").toPandas()

    spark.conf.set("spark.statestore.uncommitted.maxBytes", "1k")
    spark.conf.set("spark.statestore.cache.maxBytes", "0")
    try:
        processor, query, rows = run_peek("peek_committed")
        tasks = tasks_of(processor, query)
        if tasks is not None:
            assert tasks["spills"].sum() > 0  # the tiny uncommitted limit reached the tasks
            assert tasks["cache_hits"].sum() == 0 and tasks["cache_misses"].sum() == 0  # no cache at all
        assert not rows["visible"].any()  # READ_COMMITTED (the default) sees the batch start only
        spark.conf.set("spark.statestore.isolationLevel", "READ_UNCOMMITTED")
        _, _, rows = run_peek("peek_uncommitted")
        assert rows["visible"].all()
    finally:
        for key in ("uncommitted.maxBytes", "cache.maxBytes", "isolationLevel"):
            spark.conf.unset(f"spark.statestore.{key}")


class Totals(StoreProcessor):
    """A running total per key (Update mode), for the lifecycle tests."""

    stores = [KeyValue("totals")]

    def process_rows(self, key, rows, timer_values):
        totals = self.store("totals")
        name = key[0].encode()
        total = int(totals.get(name) or b"0") + sum(len(frame) for frame in rows)
        totals.put(name, b"%d" % total)
        yield pd.DataFrame({"key": [key[0]], "total": [total]})


def test_driver_pre_init_opens_no_state_and_state_is_per_partition(spark, job, tmp_path):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(__import__(__name__))
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 3, 50, keys=4)
    checkpoint = os.path.join(job, "checkpoint")
    processor = Totals(checkpoint)
    events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(inputs)
    out = events.groupBy("key").transformWithStateInPandas(processor, "key string, total long", "Update", "None")
    query = (
        out.writeStream.format("memory").queryName("totals_test").option("checkpointLocation", checkpoint)
        .outputMode("update").trigger(availableNow=True).start()
    )
    query.awaitTermination()
    # the driver's own init()/close() (no TaskContext) created no partition state: only tasks
    # did (the driver records the query's layout when the processor is built; the JVM
    # shim's listener keeps the batches' facts in _batches)
    assert sorted(os.listdir(os.path.join(checkpoint, "statestore"))) in (
        ["0", "1", "_layout"],
        ["0", "1", "_batches", "_layout"],
    )
    last = spark.sql("select key, max(total) as total from totals_test group by key").toPandas()
    expected = pd.concat(pd.read_json(os.path.join(inputs, n), lines=True) for n in sorted(os.listdir(inputs)))
    assert dict(zip(last["key"], last["total"], strict=True)) == expected["key"].value_counts().to_dict()


@pytest.mark.parametrize(
    "bad_rows,message",
    [
        ('{"key": "sensor-1", "ts": 25000}\n{"key": "sensor-2"}\n', "column 'ts' has 1 null value"),
        ('{"key": "sensor-1", "ts": 25000}\n{"ts": 26000}\n', "column 'key' has null values"),
    ],
)
@pytest.mark.classic_only
def test_bad_input_rows_fail_with_the_column_and_leave_committed_state(spark, job, tmp_path, bad_rows, message):
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 2, 50, keys=4)
    checkpoint = os.path.join(job, "checkpoint")
    run(spark, job, windowed_counts.WindowedCounts(checkpoint))
    before = _partition_states(checkpoint, tmp_path / "before", spark)
    with open(os.path.join(inputs, "00002.json"), "w") as f:
        f.write(bad_rows)
    query = windowed_counts.build_query(spark, job, windowed_counts.WindowedCounts(checkpoint), {"availableNow": True})
    with pytest.raises(Exception, match=message):
        query.awaitTermination()
    assert _partition_states(checkpoint, tmp_path / "after", spark) == before


def _partition_states(checkpoint, local, spark):
    """Every partition's committed state, read on a fresh local directory."""
    commits = os.path.join(checkpoint, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    specs = [w.spec() for w in windowed_counts.WindowedCounts(checkpoint, spark=spark).stores]
    out = {}
    for partition in (0, 1):
        state = PartitionState(checkpoint, partition, specs, WorkerResources(str(local)))
        state.open(last + 1)
        out[partition] = {name: [(w.key, w.window.start, v) for w, v in store.all()] for name, store in state.stores.items()}
        state.close()
    return out


def test_settings_are_checked_on_the_driver(spark, job):
    spark.conf.set("spark.statestore.cache.maxBytes", "lots")
    try:
        with pytest.raises(ValueError, match="spark.statestore.cache.maxBytes must be a byte size .* got 'lots'"):
            windowed_counts.WindowedCounts(os.path.join(job, "checkpoint"))
    finally:
        spark.conf.unset("spark.statestore.cache.maxBytes")


def test_unwritable_checkpoint_location_is_named(spark, tmp_path):
    spark_jobs.skip_without_tws(spark)
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where a directory should be")
    with pytest.raises(ValueError, match=f"checkpoint location '{blocked}/ckpt' is not writable"):
        windowed_counts.WindowedCounts(str(blocked / "ckpt"))
