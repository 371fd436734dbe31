"""A warning, once per session and count, when a stateful query is about to run many more
state partitions than the session has task slots.

Each state partition is a task of every batch, which opens and prepares the partition's
state even when no row reaches it; with Spark's default of 200 shuffle partitions on a
2-core machine a batch runs 100 waves of them (the README's snippet over Spark Connect took
19 times as long as with 4). The count is the operator's own (`partition_function`), else
Spark's offset log's (a query that ran keeps its count), else `spark.sql.shuffle.partitions`.
The slots are the scheduler's `defaultParallelism` in a classic session; a Spark Connect
client tells them from a local master URL alone (on a cluster it cannot: nothing is said).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from spark_statestore.partition.spark_log import newest_planned_batch, spark_partitions
from spark_statestore.spark import compat

log = logging.getLogger("spark_statestore.spark")

MANY = 4  # partitions per task slot above which a batch is mostly waves of idle tasks
_said: set[tuple[int, int, int]] = set()
_lock = threading.Lock()


def state_partitions(checkpoint_location: str, partitions: int | None, get: Callable[[str], str | None]) -> int:
    """The partition count the query's state will run on (module docstring)."""
    if partitions is not None:
        return partitions
    planned = newest_planned_batch(checkpoint_location)
    kept = None if planned is None else spark_partitions(checkpoint_location, planned)
    return kept if kept is not None else int(get("spark.sql.shuffle.partitions") or 200)


def session_slots(spark: Any, get: Callable[[str], str | None]) -> int | None:
    """The session's task slots, None when it cannot be told (Connect on a cluster)."""
    if not compat.is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    master = (get("spark.master") or "").strip()
    return compat.configured_cores(master) if master.startswith("local") else None


def warn_many_partitions(spark: Any, checkpoint_location: str, partitions: int | None,
                         get: Callable[[str], str | None]) -> str | None:
    """Log the warning (once per session, count and slots) and return it; None when the
    count is fine or the slots are unknown."""
    slots = session_slots(spark, get)
    count = state_partitions(checkpoint_location, partitions, get)
    if slots is None or count <= MANY * slots:
        return None
    with _lock:
        key = (id(spark), count, slots)
        if key in _said:
            return None
        _said.add(key)
    setting = "partitions" if partitions is not None else "spark.sql.shuffle.partitions"
    message = (
        f"spark_statestore: the query at {checkpoint_location} runs its state in {count} partitions ({setting}) "
        f"on {slots} task slots: every batch runs each partition's task, {count // slots} waves of them, even "
        f"without input for most. Set {setting} near the task slots (conf/spark-defaults.conf has 4) for a new "
        f"query; a query that ran keeps its count (README: Changing the partition count)"
    )
    log.warning(message)
    return message
