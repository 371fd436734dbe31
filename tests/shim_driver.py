"""A Spark driver of its own for the early-trigger tests that need a clean JVM.

    python shim_driver.py classpath WORKDIR   the shim jar given with spark.jars
    python shim_driver.py no-jar WORKDIR      no jar anywhere (as in a package built without a JDK)

Runs one file-source query, tries to wake it, and prints one JSON line: the shim status,
whether the wake was accepted, the batches that processed rows, and the governor's
warnings.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path


def main(mode: str, workdir: Path) -> dict:
    from pyspark.sql import SparkSession

    from spark_statestore.spark.driver import jvm
    from spark_statestore.spark.driver.governor import EarlyTriggerGovernor
    from spark_statestore.spark.signals import CrossingSignal

    builder = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
    )
    if mode == "classpath":
        builder = builder.config("spark.jars", jvm.shim_jar())
        interval = "36500 days"  # only a wake starts the second batch
    else:
        jvm.JAR_PATH = workdir / "not-built" / "spark-statestore-shim.jar"
        interval = "1 second"  # the query's own schedule starts the second batch
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("spark_statestore").addHandler(handler)

    shim = jvm.SessionShim(spark)
    governor = EarlyTriggerGovernor(True, shim)
    source = workdir / "input"
    source.mkdir()
    (source / "part-1.txt").write_text("a\n")
    query = (
        spark.readStream.format("text").load(str(source)).writeStream.format("noop")
        .option("checkpointLocation", str(workdir / "checkpoint")).trigger(processingTime=interval).start()
    )

    def batches() -> list[int]:
        return sorted({p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0})

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 120
        while len(batches()) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    wait_for(1)
    (workdir / "part-2.txt").write_text("b\n")
    os.replace(workdir / "part-2.txt", source / "part-2.txt")  # the source never sees half a file
    woke = shim.wake(query.id)
    governor.on_signal(CrossingSignal(query.id, 0, 0, 0, 100, 10))
    wait_for(2)
    result = {"status": dataclasses.asdict(shim.status), "woke": woke, "batches": batches(), "warnings": warnings}
    query.stop()
    spark.stop()
    return result


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]))))
