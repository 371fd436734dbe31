"""What the driver checks when an operator is built. The Python Spark starts for tasks must
import spark_statestore, naming the setting and what to do (before, the first task failed
in a worker with `No module named 'spark_statestore'` after a page of Java); where it cannot
tell (a path only workers have, a remote Connect server) it says nothing. Many more state
partitions than task slots are warned about once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from spark_statestore.spark.driver import worker_python
from spark_statestore.spark.driver.worker_python import WorkerPythonError, check_worker_python
import paths

ROOT = str(paths.ROOT)


def _python_without_the_package(tmp_path, name="python3"):
    """An interpreter that cannot import spark_statestore (isolated, no site-packages),
    counting its starts in a file next to it."""
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\necho x >> "{tmp_path}/starts"\nexec "{sys.executable}" -I -S "$@"\n')
    path.chmod(0o755)
    return str(path)


def _starts(tmp_path) -> int:
    starts = tmp_path / "starts"
    return len(starts.read_text().splitlines()) if starts.exists() else 0


def _classic(python_exec):
    return SimpleNamespace(sparkContext=SimpleNamespace(pythonExec=python_exec))


LOCAL = {"spark.master": "local[2]"}


class _Connect:  # what compat.is_connect takes for a Spark Connect session
    __module__ = "pyspark.sql.connect.session"

    def __init__(self, host):
        self.client = SimpleNamespace(_builder=SimpleNamespace(host=host))


def _conf(**values):
    values = {**LOCAL, **values}
    return lambda key: values.get(key)


@pytest.fixture(autouse=True)
def _fresh_cache():
    worker_python.import_problem.cache_clear()
    yield
    worker_python.import_problem.cache_clear()


def test_a_worker_python_without_the_package_is_refused_naming_it_once_per_interpreter(tmp_path, monkeypatch):
    python = _python_without_the_package(tmp_path)
    monkeypatch.setenv("PYSPARK_PYTHON", python)
    for _ in range(3):
        with pytest.raises(WorkerPythonError) as raised:
            check_worker_python(_classic(python), _conf())
    message = str(raised.value)
    assert python in message and "PYSPARK_PYTHON" in message and "spark.pyspark.python" in message
    assert "No module named 'spark_statestore'" in message and sys.executable in message
    assert _starts(tmp_path) == 1  # cached per interpreter


def test_the_default_python3_is_named_as_spark_default(tmp_path, monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    _python_without_the_package(tmp_path)
    with pytest.raises(WorkerPythonError, match="from Spark's default: python3 on PATH"):
        check_worker_python(_classic("python3"), _conf())


def test_a_python_that_has_it_passes(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    check_worker_python(_classic(sys.executable), _conf())


def test_what_cannot_be_told_here_is_not_checked(tmp_path, monkeypatch):
    """A path only the cluster's machines have; a cluster master (its machines may have
    another interpreter at a path this one has); a Connect server on another host (its conf
    names an interpreter that is broken here); a Connect server whose conf names none."""
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/venvs/stream/bin/python")
    check_worker_python(_classic("/opt/venvs/stream/bin/python"), _conf())
    broken = _python_without_the_package(tmp_path)
    monkeypatch.setenv("PYSPARK_PYTHON", broken)
    check_worker_python(_classic(broken), _conf(**{"spark.master": "spark://master:7077"}))
    check_worker_python(_Connect("spark.example.com"), _conf(**{"spark.pyspark.python": broken}))
    check_worker_python(_Connect("localhost"), _conf())
    assert _starts(tmp_path) == 0
    with pytest.raises(WorkerPythonError, match="the server's spark.pyspark.python"):
        check_worker_python(_Connect("127.0.0.1"), _conf(**{"spark.pyspark.python": broken}))


@pytest.mark.spark
def test_a_script_run_without_the_venv_python_for_workers_fails_on_the_driver(tmp_path):
    """The README's "In Spark" case: a script run with the venv's interpreter, nothing
    exported, Spark's workers would start `python3` from PATH, which lacks the package. The
    operator's build fails in the driver with the error, before any task."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _python_without_the_package(bindir)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        from pyspark.sql import SparkSession
        from spark_statestore import Serdes
        from spark_statestore.spark import KeyValue, partition_function

        spark = SparkSession.builder.master("local[1]").getOrCreate()
        try:
            partition_function(lambda batches, stores: iter(()), "%s",
                               [KeyValue("totals", Serdes.string(), Serdes.int64())], partitions=1)
        finally:
            spark.stop()
    """ % (tmp_path / "checkpoint")))
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300, check=False)
    assert done.returncode == 1
    assert "WorkerPythonError: Spark's Python workers would run python3 (from Spark's default" in done.stderr
    assert "Set spark.pyspark.python (or PYSPARK_PYTHON" in done.stderr
    assert not (tmp_path / "checkpoint" / "statestore").exists()  # refused before anything was written


def test_many_more_state_partitions_than_task_slots_are_warned_once(tmp_path, caplog):
    """Spark's default 200 shuffle partitions on a 2-slot session: said once, naming the
    setting and both numbers; a count near the slots, or a cluster a Connect client cannot
    see, says nothing."""
    from spark_statestore.spark.driver.partition_slots import warn_many_partitions

    classic = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=2))
    checkpoint = str(tmp_path)
    caplog.set_level("WARNING", logger="spark_statestore.spark")
    for _ in range(3):
        warn_many_partitions(classic, checkpoint, None, _conf(**{"spark.sql.shuffle.partitions": "200"}))
    warned = [r.getMessage() for r in caplog.records if "task slots" in r.getMessage()]
    assert len(warned) == 1 and "200 partitions (spark.sql.shuffle.partitions) on 2 task slots" in warned[0]
    assert warn_many_partitions(classic, checkpoint, 8, _conf()) is None
    assert "16 partitions (partitions) on 2 task slots" in warn_many_partitions(classic, checkpoint, 16, _conf())
    assert warn_many_partitions(_Connect("h"), checkpoint, None, _conf(**{"spark.master": "spark://m:7077"})) is None
    assert "on 2 task slots" in warn_many_partitions(_Connect("h"), checkpoint, None, _conf(**{"spark.master": "local[2]"}))
