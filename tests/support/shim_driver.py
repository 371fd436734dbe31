"""A Spark driver of its own for the early-trigger tests that need a clean JVM.

    python shim_driver.py plugin WORKDIR   the shim jar in spark.jars and spark.plugins set
    python shim_driver.py no-jar WORKDIR   no jar anywhere (as in a package built without a JDK)
    python shim_driver.py connect WORKDIR  a Spark Connect server started with the plugin, and
                                           a query of a Connect client woken by a crossing

Runs one file-source query with a century interval (plugin) or a 1 s one (no-jar), sends a
crossing signal for its first batch, an availableNow query too, and prints one JSON line:
what the session saw of the driver part before and after activation, the batches that
processed rows, the batch files, the receiver's counters and the Python side's warnings.
The driver part's log lines (INFO for `io.sparkstatestore`) go to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

LISTENER = "io.sparkstatestore.shim.EarlyTriggerListener"
# the whole run's bound on a hang (the drivers run beside the other Spark tests): less than
# the test's wait for this process, so that a wait that ran out shows in the result
DEADLINE = time.monotonic() + 480


def wait_for(predicate) -> None:
    """Poll `predicate` until true or the run's deadline (then the result says what is missing)."""
    while not predicate() and time.monotonic() < DEADLINE:
        time.sleep(0.05)


def main(mode: str, workdir: Path) -> dict:
    from pyspark.sql import SparkSession

    from spark_statestore.spark.driver import jvm
    from spark_statestore.spark.driver.early_trigger import signal_target
    from spark_statestore.spark.driver.settings import StateStoreSettings
    from spark_statestore.spark.signals import CROSSING, Signal, TARGET_KEY, send

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    if mode == "plugin":
        builder = builder.config("spark.jars", jvm.shim_jar()).config(
            "spark.plugins", "io.sparkstatestore.shim.StateStorePlugin"
        )
        interval = "36500 days"  # only a wake starts the second batch
    else:
        jvm.JAR_PATH = workdir / "not-built" / "spark-statestore-shim.jar"
        interval = "1 second"  # the query's own schedule starts the second batch
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    log4j = spark._jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel("io.sparkstatestore", log4j.Level.INFO)

    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("spark_statestore").addHandler(handler)

    def listeners() -> list[str]:
        names = [listener.getClass().getName() for listener in spark._jsparkSession.streams().listListeners()]
        return [name for name in names if name == LISTENER]

    before = {"target": spark.conf.get(TARGET_KEY, None) is not None, "listeners": listeners()}
    target = signal_target(spark, StateStoreSettings.from_spark(spark))
    status = jvm.activate_shim(spark)
    source = workdir / "input"
    source.mkdir()
    (source / "part-1.txt").write_text("a\n")
    checkpoint = workdir / "checkpoint"
    (checkpoint / "statestore").mkdir(parents=True)  # the batch files are written for state of ours
    query = (
        spark.readStream.format("text").load(str(source)).writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime=interval).start()
    )

    def batches() -> list[int]:
        return sorted({p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0})

    wait_for(lambda: len(batches()) >= 1)
    (workdir / "part-2.txt").write_text("b\n")
    os.replace(workdir / "part-2.txt", source / "part-2.txt")  # the source never sees half a file
    if target is not None:
        send(target, Signal(CROSSING, str(query.id), 0, 0, 7, 100, 10))
    # the driver part writes the batch files: without it (no jar) there are none to wait for
    second_file = checkpoint / "statestore" / "_batches" / "1.json"
    wait_for(lambda: len(batches()) >= 2 and (target is None or second_file.exists()))
    files = sorted(p.name for p in (checkpoint / "statestore" / "_batches").glob("*.json"))
    release = workdir / "release"

    def held(frames):  # the availableNow query runs until the crossings were sent
        while not release.exists():
            time.sleep(0.02)
        yield from frames

    once = spark.readStream.format("text").load(str(source)).mapInPandas(held, "value string").writeStream.format(
        "noop").option("checkpointLocation", str(workdir / "once")).trigger(availableNow=True).start()
    if target is not None:  # the driver part knows the query: without it (no jar) nothing would
        wait_for(lambda: jvm.query_trigger(spark, once.id) is not None)
        for batch in (0, 1):  # crossings of a query that never waits: said once, woken never
            send(target, Signal(CROSSING, str(once.id), batch, 0, 100 + batch, 100, 10))
        wait_for(lambda: jvm.signal_stats(spark).get("accepted", 0) >= 3)
    release.touch()
    once.awaitTermination(max(1.0, DEADLINE - time.monotonic()))
    result = {
        "before": before,
        "status": dataclasses.asdict(status),
        "target": target is not None,
        "listeners": listeners(),
        "batches": batches(),
        "decision": jvm.decision(spark, query.id, 0),
        "files": files,
        "stats": jvm.signal_stats(spark),
        "warnings": warnings,
    }
    query.stop()
    spark.stop()
    return result


def connect(workdir: Path) -> dict:
    """Start a Spark Connect server (the installed pyspark's) with the plugin on a free
    loopback port, run a query through a Connect client, send a crossing for its first batch."""
    import socket
    import subprocess

    import pyspark
    from pyspark.sql import SparkSession

    from spark_statestore.spark.driver import jvm
    from spark_statestore.spark.driver.early_trigger import signal_target
    from spark_statestore.spark.driver.settings import StateStoreSettings
    from spark_statestore.spark.signals import CROSSING, Signal, send

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = os.path.dirname(pyspark.__file__)
    server = subprocess.Popen(
        [os.path.join(home, "bin", "spark-submit"), "--master", "local[1]",
         "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", "spark.ui.enabled=false", "--jars", jvm.shim_jar(),
         "--conf", "spark.plugins=io.sparkstatestore.shim.StateStorePlugin", "spark-internal"],
        env=dict(os.environ, SPARK_HOME=home), stdout=subprocess.DEVNULL, stderr=open(workdir / "server.log", "w"),
    )
    try:
        while True:  # the server starts slowly on a busy machine
            try:
                spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
                spark.range(1).collect()
                break
            except Exception:
                if time.monotonic() > DEADLINE or server.poll() is not None:
                    raise
                time.sleep(1)
        target = signal_target(spark, StateStoreSettings.defaults())
        source, checkpoint = workdir / "input", workdir / "checkpoint"
        source.mkdir()
        (checkpoint / "statestore").mkdir(parents=True)
        (source / "part-1.txt").write_text("a\n")
        query = (
            spark.readStream.format("text").load(str(source)).writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="36500 days").start()
        )
        files = checkpoint / "statestore" / "_batches"
        wait_for((files / "0.json").exists)
        (workdir / "part-2.txt").write_text("b\n")
        os.replace(workdir / "part-2.txt", source / "part-2.txt")
        send(target, Signal(CROSSING, str(query.id), 0, 0, 7, 100, 10))
        wait_for((files / "1.json").exists)
        result = {
            "session": type(spark).__module__,
            "target": target is not None,
            "files": sorted(p.name for p in files.glob("*.json")),
            "batch_1": json.loads((files / "1.json").read_text()) if (files / "1.json").exists() else None,
        }
        query.stop()
        spark.stop()
        return result
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    mode, workdir = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(connect(workdir) if mode == "connect" else main(mode, workdir)))
