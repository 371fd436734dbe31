"""Stores in applyInPandasWithState and in per-partition processing (mapInArrow), end to
end on local[2,4], exactly once while tasks fail, workers die, queries restart and local
state is lost."""

from __future__ import annotations

import glob
import os
import shutil

import pandas as pd
import pytest

import spark_jobs
from spark_batches import cumulative_counts
from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StateStoreMetrics, changes_schema, partition_function, with_stores

pytestmark = pytest.mark.spark
windowed_counts = spark_jobs.windowed_counts
TOTALS = [KeyValue("totals", Serdes.string(), Serdes.int64())]


def lose_local_state(tmp_path) -> None:
    """The local state is gone, as on new executors."""
    lose_local_state_at(tmp_path / "local-state")


def lose_local_state_at(local) -> None:
    """The local state directory `local` is gone. A Python worker of the last run may still
    be flushing a copy it keeps open into it (work ahead, off the task's path), so it is moved
    aside in one rename, which nothing writing by its old paths can undo, and deleted after."""
    lost = local.with_name(local.name + ".lost")
    os.rename(local, lost)
    for _ in range(100):  # a file the flush had open when it moved may still be written
        shutil.rmtree(lost, ignore_errors=True)
        if not lost.exists():
            return
    raise AssertionError(f"{lost} could not be deleted")


@pytest.fixture
def job(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local-state"))
    spark.conf.set("spark.statestore.snapshotInterval", "3")
    yield str(tmp_path / "job")
    for key in ("spark.statestore.localDir", "spark.statestore.snapshotInterval", "spark.statestore.cache.maxBytes"):
        spark.conf.unset(key)


def events(spark, job):
    return spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(os.path.join(job, "input"))


# -- applyInPandasWithState ----------------------------------------------------------------


def run_group_totals(spark, job, checkpoint=None, **failures):
    from pyspark.sql.streaming.state import GroupStateTimeout

    checkpoint = checkpoint or os.path.join(job, "checkpoint")
    fn = with_stores(spark_jobs.group_totals(checkpoint=checkpoint, **failures), checkpoint, TOTALS)
    out = events(spark, job).groupBy("key").applyInPandasWithState(
        fn, "key string, total long, batch_id long, calls long", "calls long", "Append", GroupStateTimeout.NoTimeout
    )
    query = (  # the file sink writes each batch once (a foreachBatch sink under Spark Connect runs the
        # batch outside the query's thread, where tasks have no batch id)
        out.writeStream.format("parquet").option("path", os.path.join(job, "output"))
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return fn, query


def assert_injected(job, raised, killed):
    """The failures were injected (seen in any kind of session)."""
    checkpoint = os.path.join(job, "checkpoint")
    assert spark_jobs.injected(checkpoint, "raised") == raised
    assert spark_jobs.injected(checkpoint, "killed") == killed


def check_group_totals(job, checkpoint=None):
    """Every emitted total is the key's row count up to that batch; every key is emitted in
    every batch it has rows in; the GroupState beside the stores counted the same calls
    (`checkpoint`: a local copy of the query's checkpoint, if not under `job`)."""
    output = pd.concat(pd.read_parquet(p) for p in glob.glob(os.path.join(job, "output", "*.parquet")))
    expected = cumulative_counts(checkpoint or os.path.join(job, "checkpoint"))
    assert len(output) > 10
    previous: dict = {}
    for batch, totals in sorted(expected.items()):
        changed = {k: v for k, v in totals.items() if previous.get(k) != v}
        rows = output[output["batch_id"] == batch]
        assert dict(zip(rows["key"], rows["total"], strict=True)) == changed, f"batch {batch}"
        previous = totals
    calls = output.groupby("key")["calls"].max().to_dict()
    assert calls == output.groupby("key").size().to_dict()


@pytest.mark.versioned
@pytest.mark.classic_only
def test_group_state_exactly_once_with_task_failures_and_a_killed_worker(spark, job):
    windowed_counts.generate(os.path.join(job, "input"), 6, 80, keys=6)
    fn, query = run_group_totals(spark, job, raise_in={1}, kill_in={3})
    check_group_totals(job)
    assert_injected(job, raised={1}, killed={3})
    tasks = StateStoreMetrics(os.path.join(job, "checkpoint")).tasks()
    tasks = tasks[tasks["query_id"] == str(query.id)]
    assert {1, 3} <= set(tasks.query("attempt > 0")["batch_id"])
    assert (tasks["operator"] == "applyInPandasWithState").all()
    assert tasks.groupby(["batch_id", "partition"]).size().max() == 1


@pytest.mark.classic_only
def test_group_state_exactly_once_across_restart_with_lost_local_state(spark, job, tmp_path):
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 3, 80, keys=6)
    run_group_totals(spark, job)
    lose_local_state(tmp_path)  # the restarted query runs on "new executors"
    windowed_counts.generate(inputs, 3, 80, keys=6, start=3)
    fn, query = run_group_totals(spark, job)
    check_group_totals(job)
    tasks = StateStoreMetrics(os.path.join(job, "checkpoint")).tasks()
    assert tasks[tasks["query_id"] == str(query.id)]["restored"].sum() > 0


# -- per-partition processing ----------------------------------------------------------------


def run_partition_totals(spark, job, partitions=2, checkpoint=None, **failures):
    checkpoint = checkpoint or os.path.join(job, "checkpoint")
    schema = changes_schema("string", "long")
    fn = partition_function(
        spark_jobs.partition_totals(checkpoint=checkpoint, **failures), checkpoint, TOTALS, partitions=partitions,
        output_schema=schema,
    )
    out = events(spark, job).repartition(partitions, "key").mapInArrow(fn, schema)
    query = (
        out.writeStream.format("parquet").option("path", os.path.join(job, "output"))
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return fn, query


def check_change_stream(job, deduplicated=True, checkpoint=None):
    """The forwarded changes of each batch lead every key from its previous total to its
    total after the batch: one change per key with a large cache (KIP-63's de-duplicated
    stream), a chain of changes when evictions flushed it mid-partition (`checkpoint`: a
    local copy of the query's checkpoint, if not under `job`)."""
    output = pd.read_parquet(os.path.join(job, "output"))
    expected = cumulative_counts(checkpoint or os.path.join(job, "checkpoint"))
    assert len(output) > 10 and (output["store"] == "totals").all()
    previous: dict = {}
    for batch, totals in sorted(expected.items()):
        rows = output[output["batch_id"] == batch]
        changed = {k: v for k, v in totals.items() if previous.get(k) != v}
        assert set(rows["key"]) == set(changed), f"batch {batch}"
        for key, key_rows in rows.groupby("key"):
            if deduplicated:
                assert len(key_rows) == 1, f"batch {batch} key {key}"
            olds = [None if pd.isna(v) else int(v) for v in key_rows["old_value"]]
            news = [int(v) for v in key_rows["new_value"]]
            assert olds[0] == previous.get(key), f"batch {batch} key {key}"
            assert sorted(news)[-1] == changed[key]
            assert set(olds[1:]) <= set(news)
        previous = totals


@pytest.mark.versioned
@pytest.mark.classic_only
def test_partition_changes_exactly_once_with_task_failures_and_a_killed_worker(spark, job):
    windowed_counts.generate(os.path.join(job, "input"), 6, 80, keys=6)
    fn, query = run_partition_totals(spark, job, raise_in={1}, kill_in={3})
    check_change_stream(job)
    assert_injected(job, raised={1}, killed={3})
    tasks = StateStoreMetrics(os.path.join(job, "checkpoint")).tasks()
    tasks = tasks[tasks["query_id"] == str(query.id)]
    assert {1, 3} <= set(tasks.query("attempt > 0")["batch_id"])
    assert (tasks["cache_flushes"] > 0).any()


@pytest.mark.classic_only
def test_partition_changes_exactly_once_across_restart_with_lost_local_state(spark, job, tmp_path):
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 3, 80, keys=6)
    run_partition_totals(spark, job)
    lose_local_state(tmp_path)
    windowed_counts.generate(inputs, 3, 80, keys=6, start=3)
    run_partition_totals(spark, job)
    check_change_stream(job)


@pytest.mark.classic_only
def test_evictions_forward_a_chain_of_changes(spark, job):
    spark.conf.set("spark.statestore.cache.maxBytes", "400")  # a few entries per task slot
    windowed_counts.generate(os.path.join(job, "input"), 3, 80, keys=8)
    fn, query = run_partition_totals(spark, job)
    check_change_stream(job, deduplicated=False)
    tasks = StateStoreMetrics(os.path.join(job, "checkpoint")).tasks()
    assert tasks[tasks["query_id"] == str(query.id)]["cache_evictions"].sum() > 0


@pytest.mark.versioned
@pytest.mark.classic_only
def test_window_counts_on_the_watermark_clock_equal_spark_sqls_window_aggregation(spark, job):
    """Counts per key in 10 s tumbling windows, per partition in a watermark-clocked window
    store (retention = the window size; each window emitted once, when the batch's
    watermark passes its end, then deleted), against Spark SQL's window aggregation in
    append mode over the same stream and watermark: the same late rows dropped, the same
    windows emitted with the same counts, while a batch's first attempt fails after writing.
    Spark SQL runs one batch more (without data) for the last watermark: a `mapInArrow`
    query has no such batch, so its windows are those ending at or before the watermark of
    its last batch."""
    from pyspark.sql import functions as F

    from spark_statestore.spark import Window
    from spark_statestore.spark.worker.batch_times import batch_times

    size = 10_000
    windowed_counts.generate(os.path.join(job, "input"), 8, 60, keys=5)
    stamped = events(spark, job).withColumn("event_time", F.timestamp_millis("ts")).withWatermark(
        "event_time", "10 seconds"
    )
    checkpoint = os.path.join(job, "checkpoint")
    stores = [Window("windows", size, size, key_serde=Serdes.string(), value_serde=Serdes.int64())]
    fn = partition_function(
        spark_jobs.partition_window_counts(size, raise_in={3}, checkpoint=checkpoint), checkpoint, stores,
        partitions=2, emit_changes=False,
    )
    ours = stamped.repartition(2, "key").mapInArrow(fn, "key string, window_start long, count long")
    sql = stamped.groupBy(F.window("event_time", "10 seconds"), "key").count().select(
        "key", F.unix_millis(F.col("window.start")).alias("window_start"), "count"
    )
    for frame, name in ((ours, "output"), (sql, "sql")):
        where = os.path.join(job, "sql-checkpoint" if name == "sql" else "checkpoint")
        query = (
            frame.writeStream.format("parquet").option("path", os.path.join(job, name)).outputMode("append")
            .option("checkpointLocation", where).trigger(availableNow=True).start()
        )
        query.awaitTermination()
        assert query.exception() is None

    def rows(name):
        frame = pd.read_parquet(os.path.join(job, name))
        columns = (frame["key"], frame["window_start"].astype(int), frame["count"].astype(int))
        return sorted(zip(*columns, strict=True))

    last = max(int(name) for name in os.listdir(os.path.join(checkpoint, "offsets")) if name.isdigit())
    watermark = batch_times(checkpoint, last).watermark
    expected = [row for row in rows("sql") if row[1] + size <= watermark]
    assert watermark > 4 * size and len(expected) > 10
    assert rows("output") == expected
    assert_injected(job, raised={3}, killed=set())


def test_a_different_partition_count_is_refused_on_the_driver(spark, job):
    windowed_counts.generate(os.path.join(job, "input"), 2, 40, keys=4)
    run_partition_totals(spark, job, partitions=2)
    with pytest.raises(ValueError, match="split into 2 partitions, but this query uses 3"):
        run_partition_totals(spark, job, partitions=3)


# -- a consumer that stops reading releases the partition ---------------------------------


def _adapter_config(tmp_path):
    from spark_statestore.spark.driver.operator import OperatorConfig
    from spark_statestore.spark.driver.settings import LOCAL_DIR, StateStoreSettings

    settings = StateStoreSettings.from_conf({LOCAL_DIR: str(tmp_path / "local")}.get)
    return OperatorConfig(str(tmp_path / "ck"), tuple(TOTALS), settings)


def _partition_is_free(config):
    from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources

    state = PartitionState(
        config.checkpoint_location, 0, [d.spec() for d in config.declarations],
        WorkerResources(config.settings.resolve_local_dir()), PartitionOptions(lock_timeout=0),
    )
    state.open(0)  # StoreLockedError if an abandoned attempt still held it
    state.close()
    return True


@pytest.mark.parametrize("adapter", ["partition_function", "with_stores"])
def test_an_output_closed_early_releases_the_partition_unprepared(tmp_path, adapter):
    """Spark closes the output iterator of a task it stops reading (GeneratorExit): the
    partition must be released at once, and nothing of the attempt prepared."""
    from spark_statestore.spark.group_state import group_stream
    from spark_statestore.spark.partitions import partition_stream
    from spark_statestore.spark.worker.task import TaskInfo

    config = _adapter_config(tmp_path)
    task = TaskInfo(batch_id=0, partition=0, attempt=0, task_attempt_id=7, query_id="q", stage_id=1)
    if adapter == "partition_function":
        def func(batches, stores):
            stores["totals"].put("a", 1)
            yield from batches

        out = partition_stream(func, config, task, iter(["first", "second"]), None)
    else:
        def func(key, frames, group_state, stores):
            stores["totals"].put(key[0], 1)
            yield from frames

        from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
        from pyspark.sql.types import LongType, StructField, StructType

        schema = StructType([StructField("calls", LongType())])
        group_state = GroupState(
            None, 0, -1, GroupStateTimeout.NoTimeout, False, False, False, False, False, -1, b"", schema
        )
        out = group_stream(func, config, task, ("a",), iter(["first", "second"]), group_state)
    assert next(out) == "first"
    out.close()
    assert _partition_is_free(config)
    assert not os.path.exists(os.path.join(config.checkpoint_location, "statestore", "0", "0.changelog"))


def _write_offsets(checkpoint: str, batch: int, watermark: int, timestamp: int = 1_000) -> None:
    """An offset-log entry of `batch` in Spark's format (what a task reads its times from)."""
    offsets = os.path.join(checkpoint, "offsets")
    os.makedirs(offsets, exist_ok=True)
    with open(os.path.join(offsets, str(batch)), "w") as f:
        f.write(f'v1\n{{"batchWatermarkMs":{watermark},"batchTimestampMs":{timestamp},"conf":{{}}}}\n{{}}\n')


def test_a_partition_function_knows_its_batchs_watermark_and_its_windows_advance_to_it(tmp_path):
    """A task reads its batch's watermark from the offset log when it declares a window
    store on the watermark clock, also for a partition without data (mapInArrow tells it no
    other way): the stream time is the previous batch's watermark during the batch, and
    becomes this batch's when the batch is prepared; a records-clocked store keeps its own."""
    from spark_statestore.spark import Window
    from spark_statestore.spark.partitions import partition_stream
    from spark_statestore.spark.worker.task import TaskInfo

    config = _adapter_config(tmp_path)
    stores = (Window("w", 100, 10), Window("r", 100, 10, clock="records"))
    config = type(config)(config.checkpoint_location, stores, config.settings)
    seen = []

    def func(batches, state):
        seen.append((state.watermark, state["w"].observed_stream_time, state["r"].observed_stream_time))
        for start in batches:
            state["w"].put(b"k", b"v", start)
            state["r"].put(b"k", b"v", start)
        return iter(())

    commits = os.path.join(config.checkpoint_location, "commits")
    for batch, watermark, starts in ((0, 0, [5]), (1, 250, [300]), (2, 400, [])):
        _write_offsets(config.checkpoint_location, batch, watermark)
        task = TaskInfo(batch_id=batch, partition=0, attempt=0, task_attempt_id=batch, query_id="q",
                        stage_id=1)
        assert list(partition_stream(func, config, task, iter(starts), None)) == []
        os.makedirs(commits, exist_ok=True)
        open(os.path.join(commits, str(batch)), "w").close()  # as Spark's driver does
    assert seen == [(0, -1, -1), (250, 0, 5), (400, 250, 300)]


def test_a_window_store_on_the_watermark_clock_needs_the_offset_log(tmp_path):
    """Without the batch's offset-log entry (not a streaming query's checkpoint) the task
    fails, naming the file, and the partition is released."""
    from spark_statestore.errors import StateStoreError
    from spark_statestore.spark import Window
    from spark_statestore.spark.worker.task import TaskInfo
    from spark_statestore.spark.worker.task_state import TaskState

    config = _adapter_config(tmp_path)
    config = type(config)(config.checkpoint_location, (Window("w", 100, 10),), config.settings)
    task = TaskInfo(batch_id=0, partition=0, attempt=0, task_attempt_id=3, query_id="q", stage_id=1)
    with pytest.raises(StateStoreError, match="watermark clock need the batch's times.*offsets/0"):
        TaskState(config, task).open()
    assert _partition_is_free(config)


def test_task_state_views_and_the_watermark_of_zero(tmp_path):
    """An unknown store's view is a KeyError naming it; a watermark of 0 still moves the
    watermark-clocked window stores at the end of the batch."""
    from spark_statestore.spark import Window
    from spark_statestore.spark.worker.task import TaskInfo
    from spark_statestore.spark.worker.task_state import TaskState

    config = _adapter_config(tmp_path)
    config = type(config)(config.checkpoint_location, (Window("w", 100, 10),), config.settings)
    task = TaskInfo(batch_id=0, partition=0, attempt=0, task_attempt_id=9, query_id="q", stage_id=1)
    for batch in (0, 1):  # the batches' watermarks (0: none yet), as Spark's driver writes them
        _write_offsets(config.checkpoint_location, batch, watermark=0)
    state = TaskState(config, task).open()
    assert state.watermark == 0  # from the offset log, before any operator tells
    with pytest.raises(KeyError, match="no store 'nope'; this operator declares \\['w'\\]"):
        state.view("nope")
    assert state.view("w").observed_stream_time == -1
    state.observe_watermark(0)
    record = state.finish()
    assert (record["batch_id"], record["watermark"], record["task_attempt_id"]) == (0, 0, 9)
    kept = os.listdir(os.path.join(config.checkpoint_location, "statestore", "0"))
    assert [name for name in kept if name.endswith(".metrics")] != [], kept  # the record is kept with the changelog
    os.makedirs(os.path.join(config.checkpoint_location, "commits"))
    open(os.path.join(config.checkpoint_location, "commits", "0"), "w").close()  # as Spark's driver does
    state = TaskState(config, TaskInfo(1, 0, 0, 10, "q", 1)).open()
    assert state["w"].observed_stream_time == 0
    state.abort()
