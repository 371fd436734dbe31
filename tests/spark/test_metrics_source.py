"""The driver's Spark metrics source `spark_statestore` (`jvm-shim/`: `StateStoreSource`)
carries the figures of real batches: per query, gauges of its latest batch and counters,
equal to what `StateStoreMetrics` reads from the tasks' durable records. In a classic
session that loads the packaged jar (read through Spark's own metrics system), and on a
Spark Connect server started with the plugin, through Spark's CSV sink."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pandas as pd
import pytest
import spark_jobs
from shim_queries import wait_until

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StateStoreMetrics, partition_function
from spark_statestore.spark.driver.jvm import metrics_source

pytestmark = pytest.mark.spark
TOTALS = [KeyValue("totals", Serdes.string(), Serdes.int64())]
PARTITIONS = 2
LIMIT = 4096  # uncommitted bytes: the batches spill, so the spill figures are not all 0
GAUGES = {  # gauge -> how it is computed from a batch summary of `StateStoreMetrics.batches()`
    "batchId": lambda s: s["batch_id"],
    "partitions": lambda s: s["partitions"],
    "rowsWritten": lambda s: s["rows_written"],
    "changelogBytes": lambda s: s["changelog_bytes"],
    "spills": lambda s: s["spills"],
    "cacheHits": lambda s: s["cache_hits"],
    "cacheMisses": lambda s: s["cache_misses"],
    "droppedRecords": lambda s: s["dropped_records"],
    "rowsExpired": lambda s: s["rows_expired"],
    "uncommittedBytesPeak": lambda s: round(s["uncommitted_bytes_peak"]),
    "openMicrosMax": lambda s: round(s["open_seconds"] * 1e6),
    "prepareMicrosMax": lambda s: round(s["prepare_seconds"] * 1e6),
    "earlyTrigger": lambda s: s["early_triggers"],
}


def run_query(spark, root: Path, name: str) -> list[dict]:
    """A partition_function query named `name` over two files of keys (one batch each), run
    to its end; the summaries of its batches as the tasks' records say."""
    inputs, checkpoint = root / "input", str(root / "checkpoint")
    inputs.mkdir(parents=True)
    for n in range(2):
        path = inputs / f"{n}.json"
        pd.DataFrame({"key": [f"k{n}-{i % 150}" for i in range(300)]}).to_json(path, orient="records", lines=True)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
    spark.conf.set("spark.statestore.uncommitted.maxBytes", str(LIMIT))
    try:
        fn = partition_function(spark_jobs.partition_totals(), checkpoint, TOTALS, partitions=PARTITIONS,
                                emit_changes=False, spark=spark)
    finally:
        spark.conf.unset("spark.statestore.uncommitted.maxBytes")
    events = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).json(str(inputs))
    query = (
        events.repartition(PARTITIONS, "key").mapInArrow(fn, "key string").writeStream.queryName(name)
        .format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    summaries = StateStoreMetrics(checkpoint).batches()
    assert [s["batch_id"] for s in summaries] == [0, 1]
    assert all(s["rows_written"] == 150 and s["spills"] > 0 for s in summaries), summaries
    return summaries


def expected(summaries: list[dict]) -> dict[str, int]:
    """The source's values after these batches: the last one's gauges and the counters."""
    values = {name: int(of(summaries[-1])) for name, of in GAUGES.items()}
    values.update(batches=len(summaries), rowsWrittenTotal=sum(s["rows_written"] for s in summaries),
                  spillsTotal=sum(s["spills"] for s in summaries),
                  earlyTriggers=sum(s["early_triggers"] for s in summaries))
    return values


@pytest.mark.versioned
def test_a_classic_sessions_metrics_system_has_the_source_with_the_figures_of_the_last_batch(classic_spark, tmp_path):
    """The shim loaded into a running classic driver registers its source with the driver's
    metrics system, named `<app id>.driver.spark_statestore`."""
    session = classic_spark.newSession()
    session.conf.set("spark.statestore.localDir", str(tmp_path / "local"))
    summaries = run_query(session, tmp_path, "classic metrics")
    prefix = f"{session.sparkContext.applicationId}.driver.spark_statestore.classic_metrics."

    def values() -> dict[str, int]:
        return {k[len(prefix):]: v for k, v in metrics_source(session).items() if k.startswith(prefix)}

    want = expected(summaries)
    # the listener sets the gauges' batch, then the counters: wait for all of the last batch's figures
    wait_until(lambda: values() == want, what=f"the source's figures to be {want}")


def last_value(path: Path) -> int | None:
    """The newest value a CSV sink wrote for one metric (`t,value` or `t,count` rows)."""
    try:
        rows = list(csv.reader(path.read_text().splitlines()))
    except FileNotFoundError:
        return None
    return int(rows[-1][1]) if len(rows) > 1 else None


# on the newest minor: each minor's source is the classic test's, its plugin start the shim's
def test_a_spark_connect_servers_csv_sink_shows_the_figures_of_a_clients_query(tmp_path):
    """A Connect server started with the plugin and Spark's CSV sink: the client's query's
    figures reach the sink's files, one per metric
    (`<app id>.driver.spark_statestore.<query name>.<metric>.csv`)."""
    pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect]")
    from connect_server import with_shim

    sink = tmp_path / "csv"
    sink.mkdir()
    sink_conf = {f"spark.metrics.conf.*.sink.csv.{k}": v for k, v in {
        "class": "org.apache.spark.metrics.sink.CsvSink", "period": "1", "unit": "seconds", "directory": str(sink),
    }.items()}
    with with_shim(str(tmp_path), sink_conf) as server:
        session = server.session()
        try:
            summaries = run_query(session, tmp_path / "job", "connect-metrics")
        finally:
            session.stop()
        want = expected(summaries)

        def written() -> dict[str, int | None]:
            files = {p.name.rsplit(".", 2)[-2]: p for p in sink.glob("*.driver.spark_statestore.connect-metrics.*.csv")}
            return {name: last_value(files[name]) if name in files else None for name in want}

        wait_until(lambda: written() == want, what=f"the CSV sink's files with {want}")
