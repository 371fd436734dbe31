"""A `StoreProcessor` in the Row-based `transformWithState` (pyspark 4.1+), in a classic
session (`classic_only`: its workers are a Connect client's too): the same stores as in
transformWithStateInPandas, exactly once across a stop and a restart from the same
checkpoint.

The processor emits each key's running total per batch; the reference is computed from
the input files each committed batch read (the checkpoint's logs), so a batch whose
state were lost or applied twice would show as a wrong total in that batch or a later one.
"""

from __future__ import annotations

import os
from collections import Counter

import pandas as pd
import pytest
import spark_batches
import spark_jobs
from pyspark.sql import Row

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StateStoreMetrics, StoreProcessor, compat

pytestmark = [
    pytest.mark.spark,
    pytest.mark.versioned,
    pytest.mark.classic_only,
    pytest.mark.skipif(
        not compat.FACTS.row_transform_with_state, reason=f"pyspark {compat.VERSION} has no Row-based transformWithState"
    ),
]
windowed_counts = spark_jobs.windowed_counts
OUTPUT = "key string, batch long, total long"


class RowTotals(StoreProcessor):
    """A running total per key over Rows, emitted once per key and batch."""

    stores = [KeyValue("totals", Serdes.string(), Serdes.int64())]

    def process_rows(self, key, rows, timer_values):
        totals = self.store("totals")
        total = (totals.get(key[0]) or 0) + sum(1 for _ in rows)
        totals.put(key[0], total)
        yield Row(key=key[0], batch=self.batch_id, total=total)


@pytest.fixture
def job(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local-state"))
    yield str(tmp_path)
    spark.conf.unset("spark.statestore.localDir")


def run(spark, workdir, checkpoint=None):
    """One availableNow run of the Row-based query into parquet, with a new processor (a
    new driver); `checkpoint`: its location if not under `workdir`."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(__import__(__name__))  # RowTotals, for the workers
    checkpoint = checkpoint or os.path.join(workdir, "checkpoint")
    events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(
        os.path.join(workdir, "input")
    )
    out = events.groupBy("key").transformWithState(RowTotals(checkpoint), OUTPUT, "Update", "None")
    query = (
        out.writeStream.format("parquet").option("path", os.path.join(workdir, "output"))
        .option("checkpointLocation", checkpoint).outputMode("append").trigger(availableNow=True).start()
    )
    spark_jobs.finished(spark, query)
    return query


def reference(checkpoint):
    """Each key's running total after every committed batch that read rows of it."""
    committed, _, files = spark_batches.batches(checkpoint)
    counts: Counter = Counter()
    rows = []
    for batch in committed:
        added = Counter()
        for path in files.get(batch, []):
            added.update(pd.read_json(path, lines=True)["key"])
        counts.update(added)
        rows += [(key, batch, counts[key]) for key in added]
    return sorted(rows)


def run_row_totals(spark, job, checkpoint=None):
    """`run` as the adapter tables of other modules call it: (no function, the query)."""
    return None, run(spark, job, checkpoint)


def check_row_totals(job, checkpoint=None):
    """The output is the reference: each key's running total in every batch it had rows in
    (`checkpoint`: a local copy of the query's checkpoint, if not under `job`)."""
    output = pd.read_parquet(os.path.join(job, "output"))
    actual = sorted(zip(output["key"], output["batch"], output["total"], strict=True))
    expected = reference(checkpoint or os.path.join(job, "checkpoint"))
    assert len(expected) > 10
    assert actual == expected


def test_row_transform_with_state_counts_exactly_once_across_a_restart(spark, job):
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 3, 60, keys=4)
    run(spark, job)
    windowed_counts.generate(inputs, 3, 60, keys=4, start=3)
    query = run(spark, job)
    assert query.recentProgress[0]["batchId"] > 0  # it carried on from the checkpoint
    assert len(spark_batches.batches(os.path.join(job, "checkpoint"))[0]) == 6
    check_row_totals(job)
    tasks = StateStoreMetrics(os.path.join(job, "checkpoint")).tasks()
    assert len(tasks) > 0 and (tasks["operator"] == "transformWithState").all()  # not ...InPandas
