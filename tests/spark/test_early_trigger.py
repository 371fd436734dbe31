"""The early trigger end to end on a real local Spark, through every adapter: a batch whose
task passes `spark.statestore.uncommitted.maxBytes` has its next batch started as soon as
it ends, although the query's processing-time interval is a century; batches under the
limit leave the schedule alone; the decision shows in the batch's file the driver writes
(`<checkpoint>/statestore/_batches/<batch>.json`)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StateStoreMetrics, StoreProcessor, partition_function, with_stores
from spark_statestore.spark.driver.session import session_services

pytestmark = [pytest.mark.spark, pytest.mark.versioned]


@pytest.fixture(scope="session")
def spark(classic_spark):
    """These tests need the driver's JVM (py4j, the shim, accumulators): classic only."""
    return classic_spark
CENTURY = "36500 days"  # never elapses: only a wake starts the next batch
LIMIT = 4096
TOTALS = [KeyValue("totals", Serdes.string(), Serdes.int64())]


class Totals(StoreProcessor):
    stores = TOTALS

    def process_rows(self, key, rows, timer_values):
        totals = self.store("totals")
        total = (totals.get(key[0]) or 0) + sum(len(f) for f in rows)
        totals.put(key[0], total)
        yield pd.DataFrame({"key": [key[0]], "total": [total]})


def _totals(key, frames, group_state, stores):
    totals = stores["totals"]
    total = (totals.get(key[0]) or 0) + sum(len(f) for f in frames)
    totals.put(key[0], total)
    yield pd.DataFrame({"key": [key[0]], "total": [total]})


def _partition_totals(batches, stores):
    totals = stores["totals"]
    for batch in batches:
        keys = batch.column("key").to_pylist()
        totals.put_columns(keys, [(c or 0) + 1 for c in totals.get_all(keys)])
    return iter(())


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests


@pytest.fixture
def session(spark, tmp_path):
    """A session of its own (its own early-trigger services) with a small limit."""
    child = spark.newSession()
    child.conf.set("spark.statestore.localDir", str(tmp_path / "local"))
    child.conf.set("spark.statestore.uncommitted.maxBytes", str(LIMIT))
    child.conf.set("spark.statestore.cache.maxBytes", "0")  # writes reach the transaction at once
    yield child
    session_services(child).stop()


def _write(directory, name: str, keys: int) -> None:
    os.makedirs(directory, exist_ok=True)
    frame = pd.DataFrame({"key": [f"key-{i:05d}" for i in range(keys)], "ts": range(keys)})
    temp = os.path.join(directory, f".{name}.tmp")
    frame.to_json(temp, orient="records", lines=True)
    os.replace(temp, os.path.join(directory, f"{name}.json"))


def _start(session, tmp_path, adapter: str, first_keys: int):
    """A query over two input files, one per batch: batch 0 writes `first_keys` keys."""
    inputs = str(tmp_path / "input")
    _write(inputs, "0", first_keys)
    _write(inputs, "1", 3)
    now = time.time()  # the file source takes files oldest first: written in one instant, the order is a tie
    for age, name in ((20, "0"), (10, "1")):
        os.utime(os.path.join(inputs, f"{name}.json"), (now - age, now - age))
    checkpoint = str(tmp_path / "checkpoint")
    events = session.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(inputs)
    if adapter == "StoreProcessor":
        frame = events.groupBy("key").transformWithStateInPandas(
            Totals(checkpoint, spark=session), "key string, total long", "Update", "None"
        )
    elif adapter == "with_stores":
        fn = with_stores(_totals, checkpoint, TOTALS, spark=session)
        frame = events.groupBy("key").applyInPandasWithState(fn, "key string, total long", "calls long", "Update", "NoTimeout")
    else:
        fn = partition_function(_partition_totals, checkpoint, TOTALS, partitions=2, emit_changes=False, spark=session)
        frame = events.repartition(2, "key").mapInArrow(fn, "key string, total long")
    query = (
        frame.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
        .trigger(processingTime=CENTURY).start()
    )
    return query, Path(checkpoint)


def _batch_file(checkpoint: Path, batch: int) -> dict | None:
    path = checkpoint / "statestore" / "_batches" / f"{batch}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _batches(query) -> list[int]:
    return sorted({p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0})


def _wait_for(condition, timeout: float = 240.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("adapter", ["StoreProcessor", "with_stores", "partition_function"])
def test_a_batch_over_the_limit_starts_the_next_one_at_once(session, tmp_path, adapter):
    query, checkpoint = _start(session, tmp_path, adapter, first_keys=2000)  # well over 4 KiB per task
    try:
        assert _wait_for(lambda: _batches(query) == [0, 1]), f"batch 1 never started: {query.recentProgress}"
        assert _wait_for(lambda: _batch_file(checkpoint, 0) is not None)
        early = _batch_file(checkpoint, 0)["early_trigger"]
        assert early["source"] in ("in_flight", "end_of_batch") and early["woken"] is True
        assert early["limit"] == LIMIT and early["uncommitted_bytes"] > LIMIT
        assert f"limit {LIMIT}" in early["reason"]
        metrics = StateStoreMetrics(str(checkpoint))  # the same decision, joined to the batch's metrics
        assert _wait_for(lambda: 0 in set(metrics.recent().get("batch_id", ())))
        row = metrics.recent().set_index("batch_id").loc[0]
        assert row["early_triggers"] == 1 and f"limit {LIMIT}" in row["early_trigger_reason"]
        assert row["uncommitted_bytes_peak"] > LIMIT
    finally:
        query.stop()


def test_batches_under_the_limit_keep_the_schedule(session, tmp_path):
    from spark_statestore.spark.driver.jvm import query_trigger

    query, checkpoint = _start(session, tmp_path, "partition_function", first_keys=5)
    try:
        assert _wait_for(lambda: _batch_file(checkpoint, 0) is not None)  # written once batch 0 was decided
        assert _batch_file(checkpoint, 0)["early_trigger"] is None
        trigger = query_trigger(session, str(query.id))
        assert trigger.wakeable and not trigger.wake_pending and trigger.early_wakes == 0
        assert _batches(query) == [0]
        started = time.monotonic()
        query.stop()  # stops while it waits for its century
        assert time.monotonic() - started < 60
    finally:
        query.stop()


def test_a_bad_early_trigger_setting_fails_on_the_driver(spark, tmp_path):
    child = spark.newSession()
    child.conf.set("spark.statestore.earlyTrigger.enabled", "maybe")
    with pytest.raises(ValueError, match="spark.statestore.earlyTrigger.enabled must be true or false, got 'maybe'"):
        Totals(str(tmp_path / "checkpoint"), spark=child)


def test_a_session_with_early_triggers_off_gives_its_tasks_no_target(spark):
    from spark_statestore.spark.driver.early_trigger import signal_target
    from spark_statestore.spark.driver.settings import StateStoreSettings

    child = spark.newSession()
    child.conf.set("spark.statestore.earlyTrigger.enabled", "false")
    assert signal_target(child, StateStoreSettings.from_spark(child)) is None
    child.conf.set("spark.statestore.earlyTrigger.enabled", "true")
    assert signal_target(child, StateStoreSettings.from_spark(child)) is not None
