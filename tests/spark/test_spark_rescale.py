"""Changing the partition count of a stopped query in Spark: per-partition processing on
4, 7 and 2 partitions (the user's own `repartition(n, key)`, every pyspark), and
`transformWithStateInPandas` with Spark's own offline repartition in either order
(pyspark 4.2+; before that the query is refused with a message saying Spark cannot move
its own state). Output and state equal a batch reference; a rescale killed at each step
leaves the old state usable by the query."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

import spark_jobs
from spark_batches import cumulative_counts
from spark_statestore.partition.rescale import rescale
from spark_statestore.spark import compat
from test_spark_partitions import (  # noqa: F401 (job: the fixture)
    check_change_stream,
    check_group_totals,
    job,
    run_group_totals,
    run_partition_totals,
)

windowed_counts = spark_jobs.windowed_counts


def _state(spark, checkpoint: str, batch: int | None = None) -> pd.DataFrame:
    reader = spark.read.format("spark_statestore").option("checkpointLocation", checkpoint).option("store", "totals")
    if batch is not None:
        reader = reader.option("batchId", batch)
    return reader.load().toPandas()


def _check_state(spark, checkpoint: str, batch: int, partitions: int) -> None:
    """The state as of `batch` holds every key's row count, each in the partition
    Spark's `pmod(hash(key), partitions)` sends it to."""
    from pyspark.sql import functions as F

    rows = _state(spark, checkpoint, batch)
    assert dict(zip(rows["key"], rows["value"])) == cumulative_counts(checkpoint)[batch]
    frame = spark.createDataFrame(rows[["key", "partition"]])
    wrong = frame.where(F.expr(f"pmod(hash(key), {partitions})") != F.col("partition")).count()
    assert wrong == 0


# on the newest minor (the others: Spark's hash in test_murmur3, Spark's repartition below)
@pytest.mark.classic_only
def test_partition_function_on_4_then_7_then_2_partitions(spark, job):
    inputs, checkpoint = os.path.join(job, "input"), os.path.join(job, "checkpoint")
    windowed_counts.generate(inputs, 3, 80, keys=12)
    run_partition_totals(spark, job, partitions=4)
    assert rescale(checkpoint, 7).base == 2
    windowed_counts.generate(inputs, 3, 80, keys=12, start=3)
    run_partition_totals(spark, job, partitions=7)
    assert rescale(checkpoint, 2).base == 5
    windowed_counts.generate(inputs, 3, 80, keys=12, start=6)
    run_partition_totals(spark, job, partitions=2)
    check_change_stream(job)  # every batch's output leads each key from its total to the next
    for batch, partitions in [(2, 4), (5, 7), (8, 2)]:
        _check_state(spark, checkpoint, batch, partitions)
    assert sorted(_state(spark, checkpoint)["partition"].unique()) == [0, 1]


@pytest.mark.classic_only
@pytest.mark.parametrize("step", ["rescale:after-read", "rescale:after-partition", "rescale:before-switch"])
def test_a_rescale_killed_at_each_step_leaves_the_query_running_on_the_old_state(spark, job, step):
    inputs, checkpoint = os.path.join(job, "input"), os.path.join(job, "checkpoint")
    windowed_counts.generate(inputs, 2, 60, keys=8)
    run_partition_totals(spark, job, partitions=4)
    code = f"from spark_statestore.partition.rescale import rescale; rescale({checkpoint!r}, 7)"
    env = {**os.environ, "SPARK_STATESTORE_FAULT": step}
    killed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    windowed_counts.generate(inputs, 2, 60, keys=8, start=2)
    run_partition_totals(spark, job, partitions=4)
    check_change_stream(job)
    _check_state(spark, checkpoint, 3, 4)


def _run_totals(spark, job: str, files: int, start: int):
    """transformWithStateInPandas: running totals per key over `files` more input files."""
    inputs, checkpoint = os.path.join(job, "input"), os.path.join(job, "checkpoint")
    windowed_counts.generate(inputs, files, 60, keys=10, start=start)
    events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(inputs)
    out = events.groupBy("key").transformWithStateInPandas(
        spark_jobs.KeyTotals(checkpoint, spark=spark), "key string, total long", "Update", "None"
    )

    def write(frame, batch_id):
        frame.toPandas().to_parquet(os.path.join(job, "output", f"{batch_id:05d}.parquet"))

    os.makedirs(os.path.join(job, "output"), exist_ok=True)
    query = (
        out.writeStream.foreachBatch(write).outputMode("update").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return checkpoint


def _check_totals(job: str, checkpoint: str) -> None:
    """Each batch emitted every key it saw with its row count so far."""
    expected = cumulative_counts(checkpoint)
    for path in sorted(os.listdir(os.path.join(job, "output"))):
        batch = int(path.split(".")[0])
        rows = pd.read_parquet(os.path.join(job, "output", path))
        assert all(expected[batch][k] == t for k, t in zip(rows["key"], rows["total"])), f"batch {batch}"


@pytest.mark.versioned
@pytest.mark.needs_classic  # Spark's offline repartition (_streamingCheckpointManager) is not in the Connect client
@pytest.mark.skipif(not compat.FACTS.offline_repartition, reason="Spark's offline repartition needs pyspark 4.2+")
@pytest.mark.parametrize("ours_first", [True, False])
def test_group_state_with_sparks_own_repartition_in_either_order(spark, job, ours_first):
    """applyInPandasWithState: the stores' totals and Spark's own GroupState (calls per
    key) both right after both moves, on the session's 2 shuffle partitions, then 3."""
    inputs, checkpoint = os.path.join(job, "input"), os.path.join(job, "checkpoint")
    windowed_counts.generate(inputs, 3, 60, keys=10)
    run_group_totals(spark, job)
    moves = [lambda: rescale(checkpoint, 3), lambda: spark._streamingCheckpointManager.repartition(checkpoint, 3)]
    for move in moves if ours_first else reversed(moves):
        move()
    windowed_counts.generate(inputs, 3, 60, keys=10, start=3)
    run_group_totals(spark, job)
    check_group_totals(job)
    _check_state(spark, checkpoint, max(cumulative_counts(checkpoint)), 3)


@pytest.mark.needs_classic  # Spark's offline repartition is not in the Connect client: its refusal is not tested there
def test_tws_with_one_side_moved_is_refused_naming_the_other(spark, job):
    checkpoint = _run_totals(spark, job, 2, 0)
    rescale(checkpoint, 3)
    if compat.FACTS.offline_repartition:
        expected = r"runs transformWithStateInPandas on 2 partitions, but the spark_statestore state there has 3.*repartition"
    else:
        expected = "cannot move Spark's own state of transformWithStateInPandas"
    with pytest.raises(ValueError, match=expected):
        _run_totals(spark, job, 1, 2)
