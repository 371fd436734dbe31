"""The record cache's share of a task in Spark: task slots from executor cores and
`spark.task.cpus`, the cache bytes each task gets, and where the cores come from."""

from __future__ import annotations

import pytest

from spark_statestore.spark.driver.slots import share_per_task, task_cpus, task_slots


@pytest.mark.parametrize(
    "cores,cpus,slots",
    [(1, 1, 1), (4, 1, 4), (4, 2, 2), (5, 2, 2), (1, 4, 1)],
)
def test_task_slots(cores, cpus, slots):
    assert task_slots(cores, cpus) == slots


def test_shares_per_task():
    assert share_per_task(10_485_760, 4) == 2_621_440
    assert share_per_task(0, 4) == 0
    with pytest.raises(ValueError, match="spark.task.cpus must be at least 1, got '0'"):
        task_cpus({"spark.task.cpus": "0"}.get)
    with pytest.raises(ValueError, match="spark.task.cpus must be an integer, got 'x'"):
        task_cpus({"spark.task.cpus": "x"}.get)


@pytest.mark.spark
def test_executor_cores_come_from_spark(spark):
    """The shared session runs local[2,4]: Spark's local scheduler has 2 cores (a Spark
    Connect client reads them from the master URL); an explicit spark.executor.cores wins."""
    from spark_statestore.spark import compat
    from spark_statestore.spark.driver.settings import session_conf

    assert compat.executor_cores(spark, session_conf(spark)) == 2
    assert compat.executor_cores(spark, {"spark.executor.cores": "6"}.get) == 6
    with pytest.raises(ValueError, match="spark.executor.cores must be an integer, got 'six'"):
        compat.executor_cores(spark, {"spark.executor.cores": "six"}.get)


def test_executor_cores_told_by_the_master_url():
    """What a Spark Connect client assumes without spark.executor.cores."""
    import os

    from spark_statestore.spark.compat import configured_cores

    assert [configured_cores(m) for m in ("local[2,4]", "local[3]", "local", "local-cluster[2, 3, 1024]")] == [2, 3, 1, 3]
    assert configured_cores("local[*]") == (os.cpu_count() or 1)
    assert configured_cores("spark://10.0.0.1:7077") == 1 and configured_cores(None) == 1
