"""Every adapter in one session: queries of transformWithStateInPandas (StoreProcessor),
applyInPandasWithState (with_stores) and per-partition processing (partition_function),
one after another with state reads between them, and side by side (also two of the same
adapter at once). Each query's metrics must be exactly its own batches' (issue 28: a
query's task records vanished after another test had run in the session)."""

from __future__ import annotations

import collections
import os

import pandas as pd
import pytest
import spark_jobs

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StateStoreMetrics, compat, partition_function, register_reader, with_stores
from spark_statestore.spark.driver.session import session_services

pytestmark = pytest.mark.spark
TOTALS = [KeyValue("totals", Serdes.string(), Serdes.int64())]
BATCHES = [["a", "b", "a"], ["b", "c", "d", "d"]]
PARTITIONS = 2  # the session's spark.sql.shuffle.partitions, and partition_function's


@pytest.fixture
def workdir(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local"))
    register_reader(spark)
    yield tmp_path
    spark.conf.unset("spark.statestore.localDir")


def _write_inputs(inputs: str) -> None:
    os.makedirs(inputs)
    for n, keys in enumerate(BATCHES):
        path = os.path.join(inputs, f"{n:03d}.json")
        pd.DataFrame({"key": keys, "ts": [n] * len(keys)}).to_json(path, orient="records", lines=True)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))  # the file source takes files by modification time


def _start(spark, adapter: str, job: str):
    """Start a query of `adapter` over BATCHES (one file per batch); its checkpoint and query."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    inputs, checkpoint = os.path.join(job, "input"), os.path.join(job, "checkpoint")
    _write_inputs(inputs)
    events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(inputs)
    if adapter == "StoreProcessor":
        spark_jobs.skip_without_tws(spark)
        out = events.groupBy("key").transformWithStateInPandas(
            spark_jobs.KeyTotals(checkpoint, spark=spark), "key string, total long", "Update", "None"
        )
    elif adapter == "with_stores":
        fn = with_stores(spark_jobs.group_totals(), checkpoint, TOTALS, spark=spark)
        out = events.groupBy("key").applyInPandasWithState(
            fn, "key string, total long, batch_id long, calls long", "calls long", "Update",
            GroupStateTimeout.NoTimeout,
        )
    else:
        fn = partition_function(spark_jobs.partition_totals(), checkpoint, TOTALS, partitions=PARTITIONS,
                                emit_changes=False, spark=spark)
        out = events.repartition(PARTITIONS, "key").mapInArrow(fn, "key string")
    query = (
        out.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    return checkpoint, query


def _check(spark, checkpoint: str, query) -> None:
    """The query's task records are one per batch and partition, and count the keys each
    batch wrote; the state read back holds the totals."""
    spark_jobs.finished(spark, query)
    metrics = StateStoreMetrics(checkpoint)
    tasks = metrics.tasks()
    mine = tasks[tasks["query_id"] == str(query.id)]
    assert len(mine) == len(tasks), "another query's records under this checkpoint"
    assert sorted(zip(mine["batch_id"], mine["partition"])) == [
        (b, p) for b in range(len(BATCHES)) for p in range(PARTITIONS)
    ], f"task records of query {query.id}"
    written = mine.groupby("batch_id")["rows_written"].sum().to_dict()
    assert written == {n: len(set(keys)) for n, keys in enumerate(BATCHES)}
    recent = metrics.recent()
    assert recent["rows_written"].tolist() == [len(set(keys)) for keys in BATCHES]
    assert StateStoreMetrics(checkpoint).recent().equals(recent)  # a new reader (a restarted driver) sees the same
    read = spark.read.format("spark_statestore_metrics").load(checkpoint).toPandas()
    assert read["rows_written"].tolist() == recent["rows_written"].tolist()
    assert read["batch_id"].tolist() == recent["batch_id"].tolist()
    state = spark.read.format("spark_statestore").option("checkpointLocation", checkpoint).load().toPandas()
    expected = collections.Counter(k for keys in BATCHES for k in keys)
    assert dict(zip(state["key"], state["value"], strict=True)) == expected


# every ordered pair of the three adapters, each query followed by a read of its state
SEQUENCE = ["StoreProcessor", "with_stores", "StoreProcessor", "partition_function", "with_stores",
            "partition_function", "StoreProcessor"]


def test_adapters_one_after_another(spark, workdir):
    for n, adapter in enumerate(SEQUENCE):
        _check(spark, *_start(spark, adapter, str(workdir / f"{n}-{adapter}")))


@pytest.mark.parametrize(
    "adapters",
    [("StoreProcessor", "with_stores", "partition_function"), ("partition_function", "partition_function"),
     ("StoreProcessor", "StoreProcessor")],
)
def test_adapters_side_by_side(spark, workdir, adapters):
    running = [_start(spark, adapter, str(workdir / f"{n}-{adapter}")) for n, adapter in enumerate(adapters)]
    for checkpoint, query in running:
        _check(spark, checkpoint, query)


@pytest.mark.parametrize("adapter", ["StoreProcessor", "partition_function"])
def test_an_operator_in_a_new_session_after_its_parent_had_one(spark, workdir, adapter):
    """A session made by `newSession()` has services of its own: its operator registers the
    state reader in it although its parent (the active session) registered it already."""
    if compat.is_connect(spark):
        pytest.skip("a Spark Connect client has no newSession(); each client session is its own already")
    _check(spark, *_start(spark, adapter, str(workdir / "parent")))
    child = spark.newSession()
    child.conf.set("spark.statestore.localDir", str(workdir / "child-local"))
    child.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    try:
        _check(child, *_start(child, adapter, str(workdir / "child")))
        assert session_services(child) is not session_services(spark)
    finally:
        session_services(child).stop()
