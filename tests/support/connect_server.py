"""A Spark Connect server on loopback, started from the installed pyspark, for tests.

`ConnectServer(root)` starts `SparkConnectServer` through pyspark's own `spark-submit` on
a free port of 127.0.0.1 (local[2,4]: 4 attempts per task, so Spark retries tasks that
fail; the RocksDB state store provider that transformWithStateInPandas needs), with this
interpreter as the Python of its workers and the project on their `PYTHONPATH`, and
waits until a session can be opened (the server's port accepts connections, the process
is alive). Its log is kept in `root/connect-server.log`. `stop()` ends it, by its process
group (the server and the Python workers it started), first politely, then for good (as
leaving a `with` block does). `with_shim(root, conf)` starts one whose driver runs
spark_statestore's driver part from its start (the shim jar and its plugin).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Self

import pyspark

from standalone import SPARK_HOME, free_port
from paths import ROOT

SPARK_SUBMIT = os.path.join(SPARK_HOME, "bin", "spark-submit")
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PLUGIN = "io.sparkstatestore.shim.StateStorePlugin"
PROJECT = str(ROOT)
CONF = {
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


class ConnectServer:
    """See module docstring."""

    def __init__(self, root: str, conf: dict[str, str] | None = None, timeout: float = 600.0) -> None:
        os.makedirs(root, exist_ok=True)
        self.root = root
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log_path = os.path.join(root, "connect-server.log")
        settings = dict(CONF, **(conf or {}))
        settings["spark.connect.grpc.binding.port"] = str(self.port)
        settings.setdefault("spark.sql.warehouse.dir", os.path.join(root, "warehouse"))
        args = [SPARK_SUBMIT, "--class", SERVER_CLASS, "--master", "local[2,4]"]
        for key, value in settings.items():
            args += ["--conf", f"{key}={value}"]
        args.append("spark-internal")
        python_path = os.pathsep.join(p for p in (PROJECT, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, SPARK_HOME=SPARK_HOME, PYSPARK_PYTHON=sys.executable, PYTHONPATH=python_path)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                        cwd=root, start_new_session=True)
        try:
            self._wait_until_serving(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_until_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {self.process.returncode} "
                                   f"(pyspark {pyspark.__version__}; log: {self.log_path})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"the Spark Connect server did not listen on port {self.port} (log: {self.log_path})")

    def session(self):
        """A new Spark Connect session of this server."""
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(self.url).create()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self._log.close()


def with_shim(root: str, conf: dict[str, str] | None = None) -> ConnectServer:
    """A Connect server (in `root/server`) started with the shim jar and its plugin, its
    state's local copies under `root/local`, and `conf`."""
    from spark_statestore.spark.driver.jvm import shim_jar

    jar = shim_jar()
    if jar is None:
        raise RuntimeError("the shim jar is not built: run `python jvm-shim/build.py` (it needs a JDK)")
    plugin = {"spark.jars": jar, "spark.plugins": PLUGIN, "spark.statestore.localDir": os.path.join(root, "local")}
    return ConnectServer(os.path.join(root, "server"), dict(plugin, **(conf or {})))
