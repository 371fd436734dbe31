"""An operator built with another checkpoint path than the query's `checkpointLocation` is
refused before batch 0 runs (the JVM shim finds each operator's path in the query's plan
when the query starts), naming both paths, instead of keeping its state where no restart or
reader looks; also with a query of one batch, in a classic session and through a Spark
Connect server with the plugin."""

from __future__ import annotations

import os
import sys

import pandas as pd
import pytest
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, compat, partition_function

pytestmark = [pytest.mark.spark]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests


def count_keys(batches, stores):
    totals = stores["totals"]
    for batch in batches:
        for key in batch.column("key").to_pylist():
            totals.put(key, (totals.get(key) or 0) + 1)
    return iter(())


def _run_on_another_path(spark, tmp_path, files: int):
    inputs = tmp_path / "input"
    inputs.mkdir()
    for n in range(files):
        pd.DataFrame({"key": ["a", "b"]}).to_json(inputs / f"{n}.json", orient="records", lines=True)
        os.utime(inputs / f"{n}.json", (1_000_000 + n, 1_000_000 + n))
    query_checkpoint, operator_checkpoint = str(tmp_path / "query"), str(tmp_path / "operator")
    fn = partition_function(count_keys, operator_checkpoint, [KeyValue("totals", Serdes.string(), Serdes.int64())],
                            partitions=2, emit_changes=False)
    events = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).json(str(inputs))
    query = (events.repartition(2, "key").mapInArrow(fn, "key string").writeStream.format("noop")
             .option("checkpointLocation", query_checkpoint).trigger(availableNow=True).start())
    with pytest.raises(Exception) as raised:
        query.awaitTermination()
    return str(raised.value), query_checkpoint, operator_checkpoint


def _refused_before_batch_0(message, query_checkpoint, operator_checkpoint):
    assert "has checkpointLocation" in message and "built with checkpoint location" in message, message
    assert query_checkpoint in message and operator_checkpoint in message
    assert not os.path.exists(os.path.join(query_checkpoint, "commits", "0"))  # no batch ran
    assert not os.path.exists(os.path.join(operator_checkpoint, "statestore", "0"))  # no state was written


@pytest.mark.parametrize("files", [1, 3], ids=["one batch", "three batches"])
def test_an_operator_on_another_path_than_the_query_is_refused_before_batch_0(spark, tmp_path, files):
    if compat.is_connect(spark):
        pytest.skip("the suite's Connect server runs without the plugin: the next test starts one with it")
    _refused_before_batch_0(*_run_on_another_path(spark, tmp_path, files))


def test_over_connect_with_the_plugin_too(tmp_path):
    from connect_server import with_shim

    with with_shim(str(tmp_path / "connect")) as server:
        session = server.session()
        try:
            _refused_before_batch_0(*_run_on_another_path(session, tmp_path, 1))
        finally:
            session.stop()


def test_the_same_path_written_another_way_runs(spark, tmp_path):
    """`file://` and a trailing slash on one side only are the same location: no refusal."""
    if compat.is_connect(spark):
        pytest.skip("the check runs where the shim runs: the suite's Connect server has no plugin")
    inputs = tmp_path / "input"
    inputs.mkdir()
    pd.DataFrame({"key": ["a", "b"]}).to_json(inputs / "0.json", orient="records", lines=True)
    checkpoint = str(tmp_path / "cp")
    fn = partition_function(count_keys, f"file://{checkpoint}/", [KeyValue("totals", Serdes.string(), Serdes.int64())],
                            partitions=2, emit_changes=False)
    events = spark.readStream.schema("key string").json(str(inputs))
    query = (events.repartition(2, "key").mapInArrow(fn, "key string").writeStream.format("noop")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    assert os.path.exists(os.path.join(checkpoint, "commits", "0"))
