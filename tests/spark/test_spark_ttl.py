"""TTL stores in every Spark adapter, end to end: a key's counts restart once its entry
expired on the store's clock (event time: the batch's watermark; processing time: the
batch's timestamp), exactly as a reference computed from Spark's offset log says, also
where a batch's first attempts failed after writing; the TWS handle's processing time is
that same timestamp; expiry is counted in the metrics; the state reader shows the live
entries and the change feed the expiries."""

from __future__ import annotations

import glob
import json
import os

import pandas as pd
import pytest

import spark_ttl_jobs as jobs
from spark_batches import batches
from spark_jobs import skip_without_tws
from spark_statestore.spark import StateStoreMetrics, partition_function, register_reader, with_stores

pytestmark = [pytest.mark.spark, pytest.mark.classic_only]


@pytest.fixture
def job(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local-state"))
    yield str(tmp_path / "job")
    spark.conf.unset("spark.statestore.localDir")


def _events(spark, job):
    from pyspark.sql import functions as F

    return (
        spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1)
        .json(os.path.join(job, "input"))
        .withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", "5 seconds")
    )


def _run(out, job, checkpoint):
    query = (
        out.writeStream.format("parquet").option("path", os.path.join(job, "output"))
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return query


def _expected(checkpoint):
    """(batch, key) -> (seen, recent) by the reference: an entry written in batch M is
    visible in batch N while clock(M) + ttl > clock(N), where an entry written before the
    clock first moved (the event-time clock: while the watermark is Spark's 0, none yet)
    is written at the clock's first time."""
    committed, _, files = batches(checkpoint)
    clocks = {}
    for batch in committed:
        with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
            meta = json.loads(f.read().splitlines()[1])
        clocks[batch] = {"seen": meta["batchWatermarkMs"], "recent": meta["batchTimestampMs"]}
    ttls = {"seen": jobs.EVENT_TTL, "recent": jobs.PROCESSING_TTL}
    stored: dict = {"seen": {}, "recent": {}}  # key -> (expiry or None: pending, count)
    first: dict = {}  # clock -> its first time

    def expiry_of(name, expiry):
        return expiry if expiry is not None else first.get(name, float("inf")) + ttls[name]

    out, expiries = {}, 0
    for batch in committed:
        rows = pd.concat([pd.read_json(p, lines=True) for p in files.get(batch, [])] or [pd.DataFrame({"key": []})])
        for name in ("seen", "recent"):
            if clocks[batch][name] > 0:
                first.setdefault(name, clocks[batch][name])
        for key, added in rows["key"].value_counts().items():
            counts = []
            for name in ("seen", "recent"):
                now = clocks[batch][name]
                expiry, count = stored[name].get(key, (None, 0))
                if count and expiry_of(name, expiry) <= now:
                    count, expiries = 0, expiries + (name == "seen")
                stored[name][key] = (now + ttls[name] if name in first else None, count + added)
                counts.append(count + added)
            out[(batch, key)] = tuple(counts)
    final = clocks[committed[-1]]["seen"]
    live = {k: c for k, (e, c) in stored["seen"].items() if expiry_of("seen", e) > final}
    return out, expiries, clocks, live


def _check(spark, job, checkpoint, query):
    output = pd.concat(pd.read_parquet(p) for p in glob.glob(os.path.join(job, "output", "*.parquet")))
    expected, expiries, clocks, live = _expected(checkpoint)
    assert expiries >= 3  # the data makes event-time entries expire
    got = {(b, k): (s, r) for b, k, s, r in zip(output["batch_id"], output["key"], output["seen"], output["recent"])}
    assert got == expected
    tasks = StateStoreMetrics(checkpoint).tasks()
    mine = tasks[tasks["query_id"] == str(query.id)]
    assert mine["rows_expired"].sum() > 0
    assert (mine.query(f"batch_id == {jobs.FAILING_BATCH}")["attempt"] > 0).all()
    return output, clocks, live


@pytest.mark.versioned  # the other adapters' TTL is the same store code: on the newest minor
def test_tws_processor(spark, job):
    skip_without_tws(spark)
    jobs.generate(os.path.join(job, "input"), 7)
    checkpoint = os.path.join(job, "checkpoint")
    processor = jobs.TtlCounts(checkpoint)
    out = _events(spark, job).groupBy("key").transformWithStateInPandas(processor, jobs.SCHEMA, "Append", "EventTime")
    query = _run(out, job, checkpoint)
    output, clocks, live = _check(spark, job, checkpoint, query)
    for batch, clock in zip(output["batch_id"], output["clock"]):  # the handle's time is the offset log's
        assert clock == clocks[batch]["recent"]
    register_reader(spark)
    read = spark.read.format("spark_statestore").option("checkpointLocation", checkpoint).option("store", "seen")
    state = read.load().toPandas()
    assert dict(zip(state["key"], state["value"], strict=True)) == live
    feed = read.option("readChangeFeed", "true").option("changeStartBatchId", "0").load().toPandas()
    assert "k6" in set(feed.loc[feed["change"] == "expire", "key"]) and set(feed["change"]) <= {"put", "expire"}


def test_with_stores(spark, job):
    from pyspark.sql.streaming.state import GroupStateTimeout

    jobs.generate(os.path.join(job, "input"), 7)
    checkpoint = os.path.join(job, "checkpoint")
    fn = with_stores(jobs.group_counts, checkpoint, jobs.STORES)
    out = _events(spark, job).groupBy("key").applyInPandasWithState(
        fn, jobs.SCHEMA, "unused long", "Append", GroupStateTimeout.NoTimeout
    )
    _check(spark, job, checkpoint, _run(out, job, checkpoint))


def test_partition_function(spark, job):
    jobs.generate(os.path.join(job, "input"), 7)
    checkpoint = os.path.join(job, "checkpoint")
    fn = partition_function(jobs.partition_counts, checkpoint, jobs.STORES, partitions=2, emit_changes=False)
    out = _events(spark, job).repartition(2, "key").mapInArrow(fn, jobs.SCHEMA)
    _check(spark, job, checkpoint, _run(out, job, checkpoint))
