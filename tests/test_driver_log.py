"""Each batch's line reaches the driver's output without the user configuring anything: a
driver of its own (log4j at pyspark's default WARN, Python logging not configured) prints
one `spark_statestore batch N:` line per committed batch on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.spark]

DRIVER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from spark_statestore import Serdes
    from spark_statestore.spark import KeyValue, partition_function

    inputs, checkpoint = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")

    def count(batches, stores):
        totals = stores["totals"]
        for batch in batches:
            for key in batch.column("key").to_pylist():
                totals.put(key, (totals.get(key) or 0) + 1)
        return iter(())

    fn = partition_function(count, checkpoint, [KeyValue("totals", Serdes.string(), Serdes.int64())],
                            partitions=2, emit_changes=False)
    events = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).json(inputs)
    query = (events.repartition(2, "key").mapInArrow(fn, "key string").writeStream.format("noop")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    """
)


def test_a_driver_prints_one_line_per_batch_without_any_logging_setup(tmp_path):
    inputs = tmp_path / "input"
    inputs.mkdir()
    for n in range(2):
        (inputs / f"{n}.json").write_text('{"key": "a"}\n{"key": "b"}\n')
        os.utime(inputs / f"{n}.json", (1_000_000 + n, 1_000_000 + n))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", DRIVER, str(inputs), str(tmp_path / "checkpoint")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = re.findall(r"^\d\d/\d\d/\d\d \S+ INFO spark_statestore\.spark: spark_statestore batch (\d+): partitions=2 ",
                       done.stderr, re.MULTILINE)
    assert sorted(lines) == ["0", "1"], done.stderr[-3000:]
