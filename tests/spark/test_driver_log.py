"""Each batch's `spark_statestore batch N:` line is in the driver's log4j log, at WARN
(logger `spark_statestore.batches`), where a default Spark log shows it, and never on
stdout, which belongs to the user's job: in a plain script (log4j at pyspark's default
level) with the JVM shim's driver part logging it, and with early triggers off (the Python
side logs it into log4j); under Spark Connect, in the server's log (the documented
`./dev connect-server`), not on the client."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import paths

pytestmark = [pytest.mark.spark]

ROOT = str(paths.ROOT)
LINE = re.compile(r"^\d\d/\d\d/\d\d \S+ WARN \S+: spark_statestore batch (\d+): ", re.MULTILINE)

QUERY = textwrap.dedent(
    """
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
CLASSIC = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from spark_statestore import Serdes
    from spark_statestore.spark import KeyValue, partition_function

    inputs, checkpoint, early = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.statestore.earlyTrigger.enabled", early)
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    """
) + QUERY
CONNECT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from spark_statestore import Serdes
    from spark_statestore.spark import KeyValue, partition_function

    inputs, checkpoint, url = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = SparkSession.builder.remote(url).getOrCreate()
    print("partitions", spark.conf.get("spark.sql.shuffle.partitions"),
          spark.conf.get("spark.sql.streaming.stateStore.providerClass"))
    """
) + QUERY


def _inputs(tmp_path):
    inputs = tmp_path / "input"
    inputs.mkdir()
    for n in range(2):
        (inputs / f"{n}.json").write_text('{"key": "a"}\n{"key": "b"}\n')
        os.utime(inputs / f"{n}.json", (1_000_000 + n, 1_000_000 + n))
    return str(inputs)


def _env():
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        env.pop(name, None)
    return env


@pytest.mark.parametrize("early", ["true", "false"], ids=["by the shim", "by the python side"])
def test_a_plain_script_logs_one_warn_line_per_batch_to_the_driver_log_not_stdout(tmp_path, early):
    done = subprocess.run([sys.executable, "-c", CLASSIC, _inputs(tmp_path), str(tmp_path / "checkpoint"), early],
                          capture_output=True, text=True, env=_env(), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(LINE.findall(done.stderr)) == ["0", "1"], done.stderr[-3000:]
    assert "spark_statestore batch" not in done.stdout
    # the same figures either way: the shim's from the tasks' reports, the Python side's from their records
    assert re.findall(r"spark_statestore batch \d+: (?:query \S+ )?partitions=2 rows_written=2 ", done.stderr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".venv", "bin", "spark-submit")),
                    reason="./dev connect-server runs .venv's spark-submit: ./dev test makes .venv")
def test_the_documented_connect_server_has_the_conf_and_logs_the_batches(tmp_path):
    """`./dev connect-server` as the README gives it (plus a free port): its sessions have
    conf/spark-defaults.conf's settings, and each batch's line is in the server's log."""
    port = _free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            ["./dev", "connect-server", "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.ui.enabled=false", "--conf", f"spark.statestore.localDir={tmp_path / 'local'}"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not listen"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        done = subprocess.run([sys.executable, "-c", CONNECT, _inputs(tmp_path), str(tmp_path / "checkpoint"),
                               f"sc://127.0.0.1:{port}"], capture_output=True, text=True, env=_env(),
                              timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "partitions 4 org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider" in done.stdout
        assert "spark_statestore batch" not in done.stdout + done.stderr  # the client's output is the user's
        deadline = time.monotonic() + 60  # the server logs a batch when its listener hears of its end
        while sorted(LINE.findall(log_path.read_text())) != ["0", "1"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert sorted(LINE.findall(log_path.read_text())) == ["0", "1"], log_path.read_text()[-3000:]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(60)
