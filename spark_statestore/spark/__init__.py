"""Spark adapters: stores inside PySpark's stateful operators, committed with each
micro-batch (a thin layer over `spark_statestore.partition.PartitionState`).

The package is grouped by where its code runs: the adapters and declarations a user
writes (this level: built where the query is defined, run in tasks), `driver/` (settings,
operator building, session services, the metrics read from the checkpoint, the early trigger),
`worker/` (a Python worker's runtime and the per-task partition state), `reader/` (the
state reader data sources) and `compat/` (the one door to pyspark and JVM internals)."""

from spark_statestore.spark.declarations import KeyValue, Window
from spark_statestore.spark.frames import check_columns, epoch_millis
from spark_statestore.spark.group_state import with_stores
from spark_statestore.spark.partitions import changes_schema, partition_function
from spark_statestore.spark.driver.metrics import StateStoreMetrics
from spark_statestore.spark.processor import StoreProcessor
from spark_statestore.spark.session import Session
from spark_statestore.spark.reader import register_reader
from spark_statestore.spark.driver.settings import StateStoreSettings
from spark_statestore.spark.worker.task_state import TaskState

__all__ = [
    "KeyValue",
    "Session",
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
