"""Reading a query's state from outside the query (`format("spark_statestore")`): records at
the committed version, time travel, the change feed, isolation levels while a batch is
held open, window stores, the metadata view, the stream of committed changes, S3, and
errors that name what is wrong."""

from __future__ import annotations

import collections
import json
import os
import sys
import time
import uuid

import pandas as pd
import pytest
import spark_jobs
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.partition.reading import StateLocation, change_count
from spark_statestore.spark import KeyValue, Window, compat, partition_function, register_reader

pytestmark = pytest.mark.spark
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests
TOTALS = [KeyValue("totals", Serdes.string(), Serdes.int64())]
WINDOWS = [Window("counts", 100_000, 10_000, key_serde=Serdes.string(), value_serde=Serdes.int64(), clock="records")]
BATCHES = [["a", "b", "a"], ["b", "c"], ["a", "d", "d", "d"]]


def totals_fn(batches, stores):
    totals, windows = stores["totals"], stores["counts"]
    for batch in batches:
        keys = batch.column("key").to_pylist()
        for key, ts in zip(keys, batch.column("ts").to_pylist(), strict=True):
            totals.put(key, (totals.get(key) or 0) + 1)
            start = ts - ts % 10_000
            windows.put(key, (windows.get(key, start) or 0) + 1, start)
    return iter(())


def _write_batch(inputs: str, n: int, keys: list[str]) -> None:
    os.makedirs(inputs, exist_ok=True)
    frame = pd.DataFrame({"key": keys, "ts": [n * 10_000 + i for i in range(len(keys))]})
    temp = os.path.join(inputs, f".{n}.tmp")
    frame.to_json(temp, orient="records", lines=True)
    os.utime(temp, (1_000_000 + n, 1_000_000 + n))  # the file source takes files by modification time
    os.replace(temp, os.path.join(inputs, f"{n:03d}.json"))


def _run(spark, job: str, batches: list[list[str]], sink=None, wait: bool = True):
    inputs, checkpoint = os.path.join(job, "input"), os.path.join(job, "checkpoint")
    for n, keys in enumerate(batches):
        _write_batch(inputs, n, keys)
    fn = partition_function(totals_fn, checkpoint, TOTALS + WINDOWS, partitions=2, emit_changes=False)
    events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(inputs)
    writer = events.repartition(2, "key").mapInArrow(fn, "key string").writeStream.option("checkpointLocation", checkpoint)
    writer = writer.foreachBatch(sink) if sink is not None else writer.format("noop")
    query = writer.trigger(availableNow=True).start()
    if wait:
        spark_jobs.finished(spark, query)
    return checkpoint, query


def _totals_after(batches: list[list[str]]) -> dict:
    return dict(collections.Counter(k for batch in batches for k in batch))


@pytest.fixture
def job(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local"))
    register_reader(spark)
    yield str(tmp_path / "job")
    spark.conf.unset("spark.statestore.localDir")


def _read(spark, checkpoint, source="spark_statestore", **options):
    reader = spark.read.format(source).option("checkpointLocation", checkpoint)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load().toPandas()


@pytest.mark.versioned
def test_records_time_travel_and_the_change_feed(spark, job):
    checkpoint, _ = _run(spark, job, BATCHES)
    state = _read(spark, checkpoint, store="totals")
    assert dict(zip(state["key"], state["value"], strict=True)) == _totals_after(BATCHES)
    assert set(state["partition"]) <= {0, 1} and state["value"].dtype.kind == "i"
    before = _read(spark, checkpoint, store="totals", batchId=0)
    assert dict(zip(before["key"], before["value"], strict=True)) == _totals_after(BATCHES[:1])
    feed = _read(spark, checkpoint, store="totals", readChangeFeed="true", changeStartBatchId=1)
    got = sorted(zip(feed["batch_id"], feed["change"], feed["key"], feed["value"]))
    expected = sorted(
        (n, "put", key, _totals_after(BATCHES[: n + 1])[key]) for n in (1, 2) for key in set(BATCHES[n])
    )
    assert got == expected


@pytest.mark.classic_only
def test_window_stores_have_window_columns(spark, job):
    checkpoint, _ = _run(spark, job, BATCHES)
    windows = _read(spark, checkpoint, store="counts")
    expected = collections.Counter((k, n * 10_000) for n, batch in enumerate(BATCHES) for k in batch)
    got = {(k, s): c for k, s, c in zip(windows["key"], windows["window_start"], windows["value"], strict=True)}
    assert got == dict(expected)
    assert (windows["window_end"] - windows["window_start"] == 10_000).all()


@pytest.mark.versioned
@pytest.mark.classic_only
def test_metadata_view(spark, job):
    checkpoint, _ = _run(spark, job, BATCHES)
    meta = spark.read.format("spark_statestore_metadata").option("checkpointLocation", checkpoint).load().toPandas()
    assert sorted(set(meta["store"])) == ["counts", "totals"] and sorted(set(meta["partition"])) == [0, 1]
    row = meta[meta["store"] == "counts"].iloc[0]
    assert (row["kind"], row["key_serde"], row["value_serde"], row["window_size"]) == ("window", "string", "int64", 10_000)
    assert (meta["committed_batch"] == 2).all() and (meta["newest_changelog"] == 2).all()
    assert (meta["durable_bytes"] > 0).all()


def _metrics(spark, checkpoint, **options):
    return _read(spark, checkpoint, source="spark_statestore_metrics", **options)


@pytest.mark.versioned
@pytest.mark.classic_only
def test_metrics_view(spark, job):
    """The metrics format gives `StateStoreMetrics(checkpoint)`'s rows, read on an executor
    from the checkpoint alone; its options are checked, naming the option and the value."""
    from spark_statestore.spark import StateStoreMetrics

    checkpoint, query = _run(spark, job, BATCHES)
    batches = _metrics(spark, checkpoint)
    assert batches["batch_id"].tolist() == [0, 1, 2]
    state = StateLocation.open(checkpoint)
    assert batches["rows_written"].tolist() == [change_count(state, n) for n in range(3)]  # the changelogs' trailers
    assert (batches["query_id"] == str(query.id)).all() and (batches["partitions"] == 2).all()
    # no row is late and no batch crosses the limit (the JVM shim's per-batch facts, where it
    # runs, say 0; without it they are unknown)
    assert batches["rows_dropped_by_watermark"].fillna(0).eq(0).all() and (batches["early_triggers"] == 0).all()
    recent = StateStoreMetrics(checkpoint).recent()
    assert list(batches.columns) == list(recent.columns)
    for column in recent.columns:
        def plain(values):
            return [None if pd.isna(v) else v for v in values]

        assert plain(batches[column]) == plain(recent[column]), column
    tasks = _metrics(spark, checkpoint, level="tasks", batches=2)
    assert sorted(zip(tasks["batch_id"], tasks["partition"])) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert list(tasks.columns) == list(StateStoreMetrics(checkpoint).tasks().columns)
    for options, message in [
        ({"level": "partitions"}, "option level must be one of \\['batches', 'tasks'\\], got 'partitions'"),
        ({"batches": "0"}, "option batches must be at least 1, got '0'"),
        ({"batches": "x"}, "option batches must be an integer, got 'x'"),
        ({"store": "totals"}, "the spark_statestore_metrics source has no option 'store'"),
    ]:
        with pytest.raises(Exception, match=message):
            _metrics(spark, checkpoint, **options)


def _wait_for_file(path: str, timeout: float = 120.0) -> bool:
    """Wait until `path` exists: how a foreachBatch sink and the test tell each other
    things (the sink runs in the driver of a classic session, on the server under Spark
    Connect)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# a batch is held in a foreachBatch sink, and Spark Connect runs a foreachBatch DataFrame
# outside the query's thread: its tasks have no streaming.sql.batchId
@pytest.mark.needs_classic
def test_isolation_levels_while_a_batch_is_held_open(spark, job):
    held, release = os.path.join(job, "held"), os.path.join(job, "release")

    def sink(frame, batch_id):  # the batch's tasks prepared; it commits when this returns
        frame.count()  # runs the batch's tasks
        if batch_id == 1:
            open(held, "w").close()
            _wait_for_file(release, timeout=900)  # longer than the test's reads (the test releases it)

    checkpoint, query = _run(spark, job, BATCHES[:2], sink=sink, wait=False)
    try:
        assert _wait_for_file(held, timeout=300), "batch 1 never reached the sink"
        committed = _read(spark, checkpoint, store="totals", isolationLevel="READ_COMMITTED")
        uncommitted = _read(spark, checkpoint, store="totals", isolationLevel="READ_UNCOMMITTED")
        assert dict(zip(committed["key"], committed["value"], strict=True)) == _totals_after(BATCHES[:1])
        assert dict(zip(uncommitted["key"], uncommitted["value"], strict=True)) == _totals_after(BATCHES[:2])
    finally:
        open(release, "w").close()
    spark_jobs.finished(spark, query)
    after = _read(spark, checkpoint, store="totals")
    assert dict(zip(after["key"], after["value"], strict=True)) == _totals_after(BATCHES[:2])


ADMISSION_CONTROL = pytest.mark.skipif(
    not compat.FACTS.stream_admission_control,
    reason=f"stream_admission_control: Python streaming sources of pyspark {compat.VERSION} have no admission "
    f"control ({compat.minors_with('stream_admission_control')} have)",
)


def _change_stream(spark, checkpoint, **options):
    reader = (
        spark.readStream.format("spark_statestore").option("checkpointLocation", checkpoint)
        .option("store", "totals").option("readChangeFeed", "true")
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _collect_changes(stream, reader_checkpoint) -> list:
    """Run the change stream to what is committed now (availableNow): each trigger's
    (batch_id, key, value) rows."""
    out = os.path.join(reader_checkpoint + "-triggers", uuid.uuid4().hex)
    os.makedirs(out)

    def collect(frame, batch_id):  # in the driver, or on the server under Spark Connect: a file per trigger
        rows = sorted(map(tuple, frame.select("batch_id", "key", "value").collect()))
        with open(os.path.join(out, f"{batch_id:06d}.json"), "w") as f:
            json.dump(rows, f)

    query = stream.writeStream.foreachBatch(collect).option("checkpointLocation", reader_checkpoint).trigger(
        availableNow=True).start()
    query.awaitTermination()
    assert query.exception() is None
    seen = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            seen.append([tuple(row) for row in json.load(f)])
    return [rows for rows in seen if rows]


@pytest.mark.versioned
@pytest.mark.classic_only
def test_a_stream_of_every_committed_change_exactly_once(spark, job, tmp_path):
    """Without a limit, each run reads every batch committed since the last one, once."""
    checkpoint, _ = _run(spark, job, BATCHES[:2])
    stream, reader_checkpoint = _change_stream(spark, checkpoint), str(tmp_path / "reader-checkpoint")
    first = [row for rows in _collect_changes(stream, reader_checkpoint) for row in rows]
    assert sorted({batch for batch, _, _ in first}) == [0, 1]
    assert sorted((k, v) for b, k, v in first if b == 1) == sorted(
        (k, _totals_after(BATCHES[:2])[k]) for k in set(BATCHES[1]))
    _run(spark, job, BATCHES)  # the writer goes on with the third batch
    second = _collect_changes(stream, reader_checkpoint)
    assert [{batch for batch, _, _ in rows} for rows in second] == [{2}]
    assert {(k, v) for _, k, v in second[0]} == {(k, _totals_after(BATCHES)[k]) for k in set(BATCHES[2])}
    assert _collect_changes(stream, reader_checkpoint) == []  # restarted: nothing twice


@pytest.mark.skipif(
    compat.FACTS.stream_admission_control,
    reason=f"stream_admission_control: pyspark {compat.VERSION} has admission control, nothing is refused",
)
@pytest.mark.versioned
@pytest.mark.classic_only
@pytest.mark.parametrize("name", ["maxBatchesPerTrigger", "maxRowsPerTrigger"])
def test_admission_options_are_refused_without_admission_control(spark, job, tmp_path, name):
    checkpoint, _ = _run(spark, job, BATCHES[:1])
    stream = _change_stream(spark, checkpoint, **{name: 1})
    query = stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "rc")).trigger(
        availableNow=True).start()
    with pytest.raises(Exception, match=f"option {name} needs admission control .* pyspark {compat.VERSION} lacks"):
        query.awaitTermination()


@ADMISSION_CONTROL
@pytest.mark.versioned
@pytest.mark.classic_only
def test_a_row_limit_still_reads_one_whole_batch_per_trigger(spark, job, tmp_path):
    checkpoint, _ = _run(spark, job, BATCHES)
    stream = _change_stream(spark, checkpoint, maxRowsPerTrigger=1)  # every batch has more changes
    triggers = _collect_changes(stream, str(tmp_path / "reader-checkpoint"))
    assert [{batch for batch, _, _ in rows} for rows in triggers] == [{0}, {1}, {2}]


@ADMISSION_CONTROL
# on the newest minor (the others: the stream of every committed change)
@pytest.mark.classic_only
def test_a_stream_of_committed_changes_exactly_once(spark, job, tmp_path):
    checkpoint, _ = _run(spark, job, BATCHES)
    stream, reader_checkpoint = _change_stream(spark, checkpoint, maxBatchesPerTrigger=1), str(tmp_path / "reader-ck")
    triggers = _collect_changes(stream, reader_checkpoint)
    assert len(triggers) == 3  # one state batch per trigger
    for n, rows in enumerate(triggers):
        assert {batch for batch, _, _ in rows} == {n}
        assert {(k, v) for _, k, v in rows} == {(k, _totals_after(BATCHES[: n + 1])[k]) for k in set(BATCHES[n])}
    assert _collect_changes(stream, reader_checkpoint) == []  # restarted, it goes on where it stopped: nothing twice


# on the newest minor (the reader's checks are ours; load() itself runs on every minor)
@pytest.mark.classic_only
def test_errors_name_what_is_wrong(spark, job, tmp_path):
    empty = str(tmp_path / "nothing-here")
    os.makedirs(empty)
    with pytest.raises(Exception, match="no spark_statestore state under"):
        _read(spark, empty, store="totals")
    with pytest.raises(Exception, match="no spark_statestore state under"):  # the metrics as the records
        _metrics(spark, empty)
    checkpoint, _ = _run(spark, job, BATCHES)
    with pytest.raises(Exception, match=r"no store 'nope'; it has \['counts', 'totals'\]"):
        _read(spark, checkpoint, store="nope")
    with pytest.raises(Exception, match="option batchId 9 is after the newest committed batch \\(2\\)"):
        _read(spark, checkpoint, store="totals", batchId=9)
    damaged = os.path.join(checkpoint, "statestore", "1", "2.changelog")
    intact = open(damaged, "rb").read()
    data = bytearray(intact)
    data[len(data) // 2] ^= 0xFF
    open(damaged, "wb").write(bytes(data))
    with pytest.raises(Exception, match=r"2\.changelog.*(fails its checksum|damaged)"):
        _read(spark, checkpoint, store="totals")
    open(damaged, "wb").write(intact)
    os.remove(os.path.join(checkpoint, "statestore", "0", "0.changelog"))
    with pytest.raises(Exception, match="changes of batch 0 of partition 0 .* are not kept"):
        _read(spark, checkpoint, store="totals", readChangeFeed="true", changeStartBatchId=0)
    with pytest.raises(Exception, match="version 0 of partition 0 .* cannot be read"):
        _read(spark, checkpoint, store="totals", batchId=0)


@pytest.mark.classic_only
def test_the_reader_leaves_the_writers_local_copies_alone(spark, job, tmp_path):
    # partitions kept open by the writer's workers would go on changing their own files
    spark.conf.set("spark.statestore.keepOpen.partitions", "0")
    try:
        checkpoint, _ = _run(spark, job, BATCHES)
    finally:
        spark.conf.unset("spark.statestore.keepOpen.partitions")
    local = str(tmp_path / "local")
    before = {os.path.join(d, f): os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(local) for f in fs}
    time.sleep(0.05)
    _read(spark, checkpoint, store="totals")
    after = {os.path.join(d, f): os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(local) for f in fs}
    assert after == before


@pytest.mark.classic_only
def test_window_change_feed_shows_puts_and_expiry(spark, job):
    batches = [["a", "b"], ["a"], ["c"]] + [["z"]] * 18  # later batches move the stream time past a segment
    checkpoint, _ = _run(spark, job, batches)
    feed = _read(spark, checkpoint, store="counts", readChangeFeed="true", changeStartBatchId=0)
    puts = feed[feed["change"] == "put"]
    assert set(zip(puts["batch_id"], puts["key"], puts["window_start"])) >= {(0, "a", 0), (0, "b", 0), (1, "a", 10_000)}
    assert ((puts["window_end"] - puts["window_start"]) == 10_000).all()
    expired = feed[feed["change"] == "expire"]
    assert not expired.empty and expired["key"].isna().all()  # retention 100 s of event time: 10 s batches
    assert expired["window_start"].min() > 0


def test_reading_state_on_s3(spark, s3_endpoint, bucket, tmp_path):
    """State written to an S3-compatible server (the loopback moto server), read by Spark
    from the same `pyarrow.fs` location (credentials in the location: the workers need no
    environment)."""
    import pyarrow.fs as pafs

    from spark_statestore.partition import (
        Layout,
        PartitionOptions,
        PartitionState,
        StoreSpec,
        WorkerResources,
        record_query_layout,
    )

    location = f"s3://testing:testing@{bucket}/query?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
    specs = [StoreSpec.key_value("totals", key_serde="string", value_serde="int64")]
    record_query_layout(location, Layout.of(specs, 2))
    expected = {}
    for batch in range(3):
        for partition in (0, 1):
            resources, options = WorkerResources(str(tmp_path / "local")), PartitionOptions(partitions=2)
            state = PartitionState(location, partition, specs, resources, options)
            state.open(batch)
            key = f"p{partition}-k{batch % 2}"
            expected[key] = batch
            state.store("totals").put(key.encode(), batch.to_bytes(8, "big", signed=True))
            state.prepare()
            state.close()
    fs, root = pafs.FileSystem.from_uri(location)
    for batch in range(3):
        with fs.open_output_stream(f"{root}/commits/{batch}") as out:
            out.write(b"v1\n{}")  # Spark's commit log: one file per committed batch
    state = _read(spark, location, store="totals")
    assert dict(zip(state["key"], state["value"], strict=True)) == expected
    assert sorted(set(state["partition"])) == [0, 1]
