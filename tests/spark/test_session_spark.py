"""Session stores in Spark: the session example against Spark SQL's `session_window`, and
`Session(...)` declared in applyInPandasWithState and per-partition processing, read back
by the state reader and its change feed."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pandas as pd
import paths
import pytest

from spark_statestore import Serdes
from spark_statestore.spark import Session, partition_function, register_reader, with_stores

pytestmark = pytest.mark.spark
EXAMPLES = str(paths.EXAMPLES)
GAP = 3_000


@pytest.fixture
def workdir(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local"))
    register_reader(spark)
    yield str(tmp_path)
    spark.conf.unset("spark.statestore.localDir")


def test_session_counts_equal_spark_sqls_session_window(classic_spark, tmp_path):
    """The example run as a user runs it (its own process and classic Spark): the sessions
    it closed with the session store are the ones Spark SQL's session_window gives."""
    spark, workdir = classic_spark, str(tmp_path)
    register_reader(spark)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        env.pop(name, None)
    script = os.path.join(EXAMPLES, "session_counts.py")
    # 50 users, 100 events a file: late events that join a session still open, and some
    # whose own session the watermark closed (before the example put its watermark on each
    # event's own session end, it dropped events Spark SQL keeps: 142 sessions against 141)
    args = ["--workdir", workdir, "--files", "6", "--events-per-file", "100", "--users", "50"]
    done = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "same sessions: True" in done.stdout, done.stdout
    columns = ["user", "session_start", "session_end", "events"]
    store, sql = (
        pd.read_parquet(os.path.join(workdir, f"output-{name}"))[columns]
        .sort_values(columns)
        .reset_index(drop=True)
        for name in ("store", "sql")
    )
    assert len(sql) > 3 and store.equals(sql), (store, sql)
    rows = pd.concat(pd.read_json(p, lines=True) for p in glob.glob(os.path.join(workdir, "input", "*.json")))
    late = rows.sort_values("ts")  # some events come after later ones by more than the watermark delay
    assert store["events"].sum() < len(late)
    state = (
        spark.read.format("spark_statestore")
        .option("checkpointLocation", os.path.join(workdir, "checkpoint-store"))
        .option("store", "sessions")
        .load()
        .toPandas()
    )
    assert (state["session_start"] <= state["session_end"]).all()


SESSIONS = [Session("sessions", Serdes.string(), Serdes.int64(), gap=GAP)]
BATCHES = [[("a", 1_000), ("a", 2_000), ("b", 1_500)], [("a", 4_500), ("b", 9_000), ("a", 20_000)]]


def _write(inputs: str) -> None:
    os.makedirs(inputs)
    for n, rows in enumerate(BATCHES):
        path = os.path.join(inputs, f"{n:03d}.json")
        pd.DataFrame(rows, columns=["key", "ts"]).to_json(path, orient="records", lines=True)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))


@pytest.mark.parametrize("adapter", ["with_stores", "partition_function"])
def test_a_session_store_is_declared_like_key_value_and_window(spark, workdir, adapter):
    from pyspark.sql.streaming.state import GroupStateTimeout

    inputs, checkpoint = os.path.join(workdir, "input"), os.path.join(workdir, "checkpoint")
    _write(inputs)

    def _merge_group(key, frames, state, stores):  # defined here: pickled by value for the workers
        sessions = stores["sessions"]
        for frame in frames:
            for t in frame["ts"]:
                sessions.merge(key[0], int(t), 1, lambda a, b: a + b)
        yield pd.DataFrame({"key": [key[0]]})

    def _merge_partition(batches, stores):
        sessions = stores["sessions"]
        for batch in batches:
            for key, t in zip(batch.column("key").to_pylist(), batch.column("ts").to_pylist()):
                sessions.merge(key, t, 1, lambda a, b: a + b)
            yield batch.select(["key"])

    events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(inputs)
    if adapter == "with_stores":
        fn = with_stores(_merge_group, checkpoint, SESSIONS, spark=spark)
        out = events.groupBy("key").applyInPandasWithState(
            fn, "key string", "calls long", "Update", GroupStateTimeout.NoTimeout
        )
    else:
        fn = partition_function(
            _merge_partition, checkpoint, SESSIONS, partitions=2, emit_changes=False, spark=spark
        )
        out = events.repartition(2, "key").mapInArrow(fn, "key string")
    query = (
        out.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    reader = (
        spark.read.format("spark_statestore")
        .option("checkpointLocation", checkpoint)
        .option("store", "sessions")
    )
    state = reader.load().toPandas()
    got = sorted(zip(state["key"], state["session_start"], state["session_end"], state["value"]))
    assert got == [
        ("a", 1_000, 4_500, 3),
        ("a", 20_000, 20_000, 1),
        ("b", 1_500, 1_500, 1),
        ("b", 9_000, 9_000, 1),
    ]
    changes = reader.option("readChangeFeed", "true").option("changeStartBatchId", 0).load().toPandas()
    assert set(changes["session_end"].dropna()) >= {4_500, 20_000}
