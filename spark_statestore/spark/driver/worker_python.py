"""Whether the Python that Spark starts for a session's tasks can import spark_statestore,
checked on the driver when an operator is built.

Without it the first task fails inside a worker (`No module named 'spark_statestore'`,
after a page of Java), and nothing is said where the query was defined. The interpreter is
the one Spark starts: a classic session's `SparkContext.pythonExec` (the driver's
`PYSPARK_PYTHON`, which spark-submit sets from `spark.pyspark.python`, else Spark's default
`python3` from `PATH`); a Spark Connect server's `spark.pyspark.python` when its conf has it. It is tried once per interpreter and `PYTHONPATH` in this process (one short
subprocess), and only where it says something about the workers: on a local master (a
cluster's machines may have another file at the same path), in a classic session or
through a Spark Connect server on loopback, and for an interpreter that exists here.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import shutil
import subprocess
import sys
from typing import Any, Callable

from spark_statestore.errors import StateStoreError
from spark_statestore.spark import compat

PROBE_SECONDS = 60  # an import takes well under a second; a loaded machine may take longer


class WorkerPythonError(StateStoreError):
    """The Python that Spark starts for tasks cannot import spark_statestore."""


def worker_python(spark: Any, get: Callable[[str], str | None]) -> tuple[str, str] | None:
    """The interpreter the session's Python workers run and where that was decided, or
    None when it cannot be told from here (module docstring)."""
    if compat.is_connect(spark):
        configured = get("spark.pyspark.python")  # the server's PYSPARK_PYTHON is in its environment only
        return (configured, "the server's spark.pyspark.python") if configured else None
    python = compat.classic_python_exec(spark) or "python3"  # spark-submit's spark.pyspark.python sets it
    if os.environ.get("PYSPARK_PYTHON"):
        return python, "PYSPARK_PYTHON / spark.pyspark.python"
    return python, "Spark's default: python3 on PATH, as neither PYSPARK_PYTHON nor spark.pyspark.python is set"


def _runs_here(spark: Any, get: Callable[[str], str | None]) -> bool:
    """Whether the session's workers run on this machine's files: a local master (`local`,
    `local[N]`, `local-cluster[...]`) of a classic session, or of a Connect server on
    loopback. On a cluster the workers' interpreter may be another file of the same path,
    which a check here would judge wrongly."""
    master = (get("spark.master") or "").strip()
    if not master.startswith("local"):
        return False
    host = compat.connect_host(spark)
    if host is None:
        return not compat.is_connect(spark)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=32)
def import_problem(python: str, pythonpath: str | None) -> str | None:
    """Why `python` (with `PYTHONPATH=pythonpath`) cannot import spark_statestore, None if it
    can (cached: one subprocess per interpreter)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    try:
        done = subprocess.run(
            [python, "-c", "import spark_statestore"], capture_output=True, text=True, env=env,
            timeout=PROBE_SECONDS, check=False, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None  # not an answer: the task will tell
    except OSError as e:
        return f"it cannot be started: {e}"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"it exited with {done.returncode}"


def check_worker_python(spark: Any, get: Callable[[str], str | None]) -> None:
    """`WorkerPythonError` naming the setting and what to do when the session's Python
    workers would fail to import spark_statestore (module docstring: when it is checked)."""
    found = worker_python(spark, get)
    if found is None or not _runs_here(spark, get):
        return
    python, source = found
    resolved = python if os.sep in python else shutil.which(python)
    if resolved is None or not os.path.exists(resolved):
        return  # a path that only the workers' machines have (or none here): they will tell
    problem = import_problem(resolved, os.environ.get("PYTHONPATH"))
    if problem is not None:
        raise WorkerPythonError(
            f"Spark's Python workers would run {python} (from {source}), which cannot import "
            f"spark_statestore ({problem}). Set spark.pyspark.python (or PYSPARK_PYTHON before "
            f"the session starts) to an interpreter that has spark_statestore installed, such as "
            f"this driver's {sys.executable}, or install spark_statestore into {python}"
        )
