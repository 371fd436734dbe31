"""An operator built with another checkpoint path than the query's `checkpointLocation`
fails at its second batch, naming the path it was given and the commit log entry it
missed, instead of keeping its state where no restart or reader looks."""

from __future__ import annotations

import os
import sys

import pandas as pd
import pytest
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, partition_function

pytestmark = [pytest.mark.spark]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests


def count_keys(batches, stores):
    totals = stores["totals"]
    for batch in batches:
        for key in batch.column("key").to_pylist():
            totals.put(key, (totals.get(key) or 0) + 1)
    return iter(())


def test_an_operator_on_another_path_than_the_query_fails_naming_it(spark, tmp_path):
    inputs = tmp_path / "input"
    inputs.mkdir()
    for n in range(3):
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
    message = str(raised.value)
    assert "runs batch 1, but the commit log under this operator's checkpoint location" in message, message
    assert operator_checkpoint in message and os.path.join(operator_checkpoint, "commits", "0") in message
    assert os.path.exists(os.path.join(query_checkpoint, "commits", "0"))  # batch 0 ran and committed
