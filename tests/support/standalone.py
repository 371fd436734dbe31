"""A Spark standalone cluster on loopback, started from the installed pyspark, for tests.

`StandaloneCluster(root, workers=2)` starts a master and workers with one core each, every
worker with its own work directory and its own local directories (`SPARK_LOCAL_DIRS`) on
its own loopback address (127.0.0.2, 127.0.0.3, ...; the master on 127.0.0.1) and free ports, and waits until the master lists them alive (its JSON status
page). Each daemon runs in its own process group, so stopping it (or killing it for good)
takes its executors along; `kill_executor(i)` SIGKILLs only the executor JVMs a worker
launched, found by their working directory (the worker's work directory). Everything the
cluster started is stopped by `stop()`, by process id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Worker:
    index: int
    process: subprocess.Popen
    work_dir: str
    local_dir: str
    host: str
    alive: bool = True


class StandaloneCluster:
    """See module docstring."""

    def __init__(self, root: str, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.cores, self.memory = cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.workers: list[Worker] = []
        self._logs: list = []
        os.makedirs(root, exist_ok=True)
        self.master = self._daemon(
            "master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                       "--webui-port", str(self.ui_port)], {}
        )
        self._wait(lambda: self.status() is not None, "the master to start")
        for _ in range(workers):
            self.add_worker()

    def _daemon(self, name: str, args: list[str], env: dict) -> subprocess.Popen:
        log = open(os.path.join(self.root, f"{name}.log"), "w")
        self._logs.append(log)
        # the daemons and the executors they launch (which inherit their environment) run the
        # tests' JVM options (conftest's SPARK_SUBMIT_OPTS reaches drivers only)
        jvm = {"JAVA_TOOL_OPTIONS": os.environ["SPARK_SUBMIT_OPTS"]} if os.environ.get("SPARK_SUBMIT_OPTS") else {}
        environment = dict(os.environ, SPARK_HOME=SPARK_HOME, SPARK_NO_DAEMONIZE="1", PYSPARK_PYTHON=sys.executable,
                           **jvm, **env)
        return subprocess.Popen([SPARK_CLASS, *args], stdout=log, stderr=subprocess.STDOUT, env=environment,
                                start_new_session=True)

    def _wait(self, condition, what: str, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.3)
        raise TimeoutError(f"timed out waiting for {what} (logs in {self.root})")

    def status(self) -> dict | None:
        """The master's JSON status, None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as response:
                return json.load(response)
        except OSError:
            return None

    def alive_workers(self) -> int:
        status = self.status() or {}
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def add_worker(self) -> Worker:
        index = len(self.workers)
        work_dir = os.path.join(self.root, f"worker-{index}", "work")
        local_dir = os.path.join(self.root, f"worker-{index}", "local")
        os.makedirs(work_dir)
        os.makedirs(local_dir)
        host = worker_host(index)
        process = self._daemon(
            f"worker-{index}",
            ["org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", str(self.cores),
             "--memory", self.memory, "--work-dir", work_dir, "--webui-port", str(free_port()), self.master_url],
            {"SPARK_LOCAL_DIRS": local_dir, "SPARK_WORKER_DIR": work_dir, "SPARK_LOCAL_IP": host},
        )
        worker = Worker(index, process, work_dir, local_dir, host)
        self.workers.append(worker)
        expected = sum(1 for w in self.workers if w.alive)
        self._wait(lambda: self.alive_workers() >= expected, f"worker {index} to register")
        return worker

    def executor_pids(self, index: int) -> list[int]:
        """Executor JVMs worker `index` launched (their working directory is under its work dir)."""
        work_dir = os.path.realpath(self.workers[index].work_dir)
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if cwd.startswith(work_dir) and b"CoarseGrainedExecutorBackend" in cmdline:
                found.append(int(pid))
        return found

    def executor_registered(self, index: int) -> bool:
        """Whether an executor worker `index` launched has registered with its driver (from
        the executor's own log in the worker's work directory)."""
        for directory, _, files in os.walk(self.workers[index].work_dir):
            if "stderr" in files:
                with open(os.path.join(directory, "stderr"), errors="replace") as f:
                    if "Successfully registered with driver" in f.read():
                        return True
        return False

    def kill_executor(self, index: int) -> list[int]:
        """SIGKILL the executors of worker `index` (the worker lives on and may start new ones)."""
        pids = self.executor_pids(index)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` and everything it started, for good."""
        worker = self.workers[index]
        pids = self.executor_pids(index)
        _killpg(worker.process, signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.alive = False

    def stop(self) -> None:
        for worker in self.workers:
            if worker.alive:
                self.kill_executor(worker.index)
                _killpg(worker.process, signal.SIGTERM)
        _killpg(self.master, signal.SIGTERM)
        for process in [w.process for w in self.workers] + [self.master]:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                _killpg(process, signal.SIGKILL)
                process.wait(20)
        for log in self._logs:
            log.close()


def worker_host(index: int) -> str:
    """Worker `index`'s own loopback address (127.0.0.2, 127.0.0.3, ...): Spark tells hosts
    apart by address, and speculation never runs a second attempt on the host of the first."""
    return f"127.0.0.{2 + index}"


def _killpg(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
