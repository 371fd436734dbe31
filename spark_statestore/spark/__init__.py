"""Spark adapters: stores inside PySpark's stateful operators, committed with each
micro-batch (a thin layer over `spark_statestore.partition.PartitionState`).

The package is grouped by where its code runs: the adapters and declarations a user
writes (this level: built where the query is defined, run in tasks), `driver/` (settings,
operator building, session services, the metrics read from the checkpoint, the early trigger),
`worker/` (a Python worker's runtime and the per-task partition state), `reader/` (the
state reader data sources) and `compat/` (the one door to pyspark and JVM internals)."""

from importlib import import_module as _import_module
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from spark_statestore.spark import compat  # noqa: F401  (on an unsupported pyspark, the import fails here)

if _TYPE_CHECKING:
    from spark_statestore.spark.declarations import KeyValue, Window
    from spark_statestore.spark.driver.metrics import StateStoreMetrics
    from spark_statestore.spark.driver.settings import StateStoreSettings
    from spark_statestore.spark.frames import check_columns, epoch_millis
    from spark_statestore.spark.group_state import with_stores
    from spark_statestore.spark.partitions import changes_schema, partition_function
    from spark_statestore.spark.processor import StoreProcessor
    from spark_statestore.spark.reader import register_reader
    from spark_statestore.spark.worker.task_state import TaskState

# Each name is imported from its module when first used: a Python worker that Spark starts
# to plan a read of the state (a fresh process per `load()`) imports only the reader, not
# pandas and the operator adapters (about a second per load).
_WHERE = {
    "KeyValue": "declarations",
    "Window": "declarations",
    "StateStoreMetrics": "driver.metrics",
    "StateStoreSettings": "driver.settings",
    "check_columns": "frames",
    "epoch_millis": "frames",
    "with_stores": "group_state",
    "changes_schema": "partitions",
    "partition_function": "partitions",
    "StoreProcessor": "processor",
    "register_reader": "reader",
    "TaskState": "worker.task_state",
}


def __getattr__(name: str) -> _Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "KeyValue",
    "StateStoreMetrics",
    "StateStoreSettings",
    "StoreProcessor",
    "TaskState",
    "Window",
    "changes_schema",
    "check_columns",
    "epoch_millis",
    "partition_function",
    "register_reader",
    "with_stores",
]
