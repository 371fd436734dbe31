"""How many tasks an executor runs at once, and so each task's share of the per-executor
budgets (`spark.statestore.cache.maxBytes`, `spark.statestore.rocksdb.memoryBytes`).

KIP-63 splits an instance's cache evenly among its threads; here one Python worker runs
one task at a time, so a task's share is the budget divided by the executor's task
slots: its cores divided by `spark.task.cpus`. The cores are Spark's own answer, asked on
the driver when an operator is built (`compat.executor_cores`): `spark.executor.cores`
when set, the local scheduler's cores in local mode, else the cores of the executors
registered so far. A Spark Connect client cannot ask the scheduler: without
`spark.executor.cores` it takes the cores the master URL tells (`local[N]` -> N) and
assumes 1 on a cluster (`compat.configured_cores`).
"""

from __future__ import annotations

from typing import Any, Callable

from spark_statestore.spark import compat
from spark_statestore.validation import check_int


def task_slots(executor_cores: int, task_cpus: int) -> int:
    """Concurrent tasks of an executor with `executor_cores` cores (at least 1)."""
    return max(1, check_int(executor_cores, "executor_cores", 1) // check_int(task_cpus, "spark.task.cpus", 1))


def task_cpus(get: Callable[[str], str | None]) -> int:
    raw = get("spark.task.cpus") or "1"
    try:
        cpus = int(raw)
    except ValueError:
        raise ValueError(f"spark.task.cpus must be an integer, got {raw!r}") from None
    if cpus < 1:
        raise ValueError(f"spark.task.cpus must be at least 1, got {raw!r}")
    return cpus


def session_task_slots(spark: Any, get: Callable[[str], str | None]) -> int:
    """The task slots of the session's executors (see module docstring)."""
    return task_slots(compat.executor_cores(spark, get), task_cpus(get))


def share_per_task(executor_bytes: int, slots: int) -> int:
    """A task's share of a per-executor byte budget."""
    return executor_bytes // max(1, slots)
