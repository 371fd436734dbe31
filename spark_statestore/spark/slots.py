"""How many tasks an executor runs at once, and so each task's share of the record cache.

`spark.statestore.cache.maxBytes` is per executor (KIP-63: per instance, split evenly
among threads); one Python worker runs one task at a time, so a task's share is the
budget divided by the executor's task slots: `spark.executor.cores // spark.task.cpus`,
or for a local master its thread count (`local[4]`, `local[*]`, `local-cluster[n,cores,mem]`).
Pure functions of configuration values: usable on the driver and in tasks.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*\d+\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def task_slots(conf: Mapping[str, str], cpu_count: int | None = None) -> int:
    """Concurrent tasks per executor for this configuration (at least 1).

    `cpu_count` stands for the executor machine's cores where Spark's default uses them
    (`local[*]`, standalone executors without `spark.executor.cores`)."""
    cpus = cpu_count or os.cpu_count() or 1
    task_cpus = int(conf.get("spark.task.cpus", "1") or 1)
    if task_cpus < 1:
        raise ValueError(f"spark.task.cpus must be at least 1, got {task_cpus}")
    master = (conf.get("spark.master") or "").strip()
    cores: int | None = None
    local = _LOCAL.match(master)
    if local:
        threads = local.group(1)
        cores = 1 if threads is None else (cpus if threads == "*" else int(threads))
    else:
        cluster = _LOCAL_CLUSTER.match(master)
        if cluster:
            cores = int(cluster.group(1))
        elif conf.get("spark.executor.cores"):
            cores = int(conf["spark.executor.cores"])
        elif master.startswith(("yarn", "k8s")):
            cores = 1  # Spark's default executor cores on YARN and Kubernetes
        else:
            cores = cpus  # standalone: an executor takes every core of its worker
    return max(1, cores // task_cpus)


def cache_bytes_per_task(executor_bytes: int, conf: Mapping[str, str], cpu_count: int | None = None) -> int:
    """A task's share of an executor's record-cache budget."""
    if executor_bytes < 0:
        raise ValueError(f"spark.statestore.cache.maxBytes must be at least 0, got {executor_bytes}")
    return executor_bytes // task_slots(conf, cpu_count)
