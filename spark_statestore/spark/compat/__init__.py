"""Every pyspark internal this package relies on, in one place: no other module touches
pyspark's private attributes or modules, or the JVM behind a session.

Spark has no public hook for some things a state layer needs, so a few internals are
used; each one is named here with what it is for, checked when this module is imported
(a pyspark that changed one, or a pyspark minor not in `minors.MINORS`, fails at import
with a `PysparkInternalError` naming it, the version and the supported range, instead of
misbehaving later), and covered by a test of its own (`tests/spark/test_spark_compat.py`).
What differs between pyspark minors is in `minors.py`, one `PysparkMinor` per minor, with
the patch it was checked on (`MINORS` is the one list of supported versions: pyproject's
bounds, `./dev` and the README's version table are tested against it):

* `WORKER_SENDS_ACCUMULATORS_LAST`: a Python worker pickles its accumulators' values
  once the task's output is complete and before it reports success
  (the worker's task function, `PysparkMinor.task_function`: `pyspark.worker.main` in
  4.0-4.2, `invoke_udf` in 4.3 -> `send_accumulator_updates`): those of its registry,
  `pyspark.accumulators._accumulatorRegistry`, which it empties when a task starts. An
  object in an accumulator the task registers itself (`_deserialize_accumulator`, under
  `tasks.TASK_END_ACCUMULATOR_ID`) whose pickling prepares the batch is how operators
  without an end-of-partition hook (applyInPandasWithState) prepare at the end of the task.
* `UDF_UNPICKLED_IN_TASK`: a Python worker unpickles the operator's function in every
  task, after it set the task's `TaskContext` (the task function: `_setTaskContext`
  before `read_udfs`), also for a partition without data. Unpickling an object inside the
  applyInPandasWithState wrapper is how that operator opens its state at the start of
  every task. While it unpickles, `read_udfs`' `eval_type` argument is on the stack: how a
  `StoreProcessor` (built on the driver before it is handed to either operator) learns
  whether its tasks run in `transformWithState` or `transformWithStateInPandas`
  (`transform_with_state_operator`), which its task records name.
* `TWS_HANDLE_TIMESTAMPS`: `StatefulProcessorHandle._statefulProcessorApiClient.
  get_timestamps("EventTime")` gives the batch's watermark in `init()`, so partitions
  without rows or timers learn it too.
* `LOCAL_PROPERTIES`: the task-local properties Spark sets for streaming tasks, the
  micro-batch id and the query id.
* `LISTENER_BUS`: `SparkContext._jsc.sc().listenerBus().waitUntilEmpty(ms)`, so that a
  Python query listener is removed only after the events already queued for it arrived.
* `DRIVER_LOG`: the JVM's log4j through `SparkContext._jvm`, to log into the driver log.
* `EXECUTOR_CORES`: the cores of an executor as Spark knows them when
  `spark.executor.cores` is not set: the local scheduler backend's `totalCores()`, or the
  executors registered in the application's status store (`statusStore().executorList`).
* `DRIVER_JVM`: `SparkSession._jsparkSession`, `._jvm` and `SparkContext._gateway`, `._jsc`:
  the JVM session the early-trigger shim registers its listener with (the JVM internals
  the shim relies on, the trigger clock of a query's execution, it finds and checks itself:
  `jvm-shim/src/.../QueryTriggers.java`), the py4j view and
  gateway it is loaded through, and whether the context is stopped.
* `ARROW_SCHEMA`: `pyspark.sql.pandas.types.to_arrow_schema`, the Arrow schema of a Spark
  schema, for the Arrow batches per-partition processing emits.
* `ACTIVE_SESSION`: `SparkSession.setActiveSession` in the JVM, to register the state
  reader's formats in a session made by `newSession()` (Spark checks a registration
  against the active session's formats).
* `STREAM_ADMISSION_CONTROL` (a capability, not an internal): Python streaming sources
  have admission control (`pyspark.sql.streaming.datasource`, `latestOffset(start, limit)`)
  from 4.2; the state reader's change stream uses it where `FACTS.stream_admission_control`.
* `ACCUMULATOR_REGISTRY`: a classic driver adds the tasks' accumulator updates to the
  object its registry (`pyspark.accumulators._accumulatorRegistry`) holds under their id;
  before 4.2 an id it does not hold fails the update, so `accept_task_end_updates` puts a
  discarding accumulator there under the end-of-task hook's id.
* `CONNECT_TRANSFORM_WITH_STATE` (a capability): the Spark Connect client has
  `transformWithStateInPandas` from 4.1 (`PysparkMinor.connect_transform_with_state`);
  `check_connect_operator` says so when a processor is built in a 4.0 Connect session.
* `ROW_TRANSFORM_WITH_STATE` (a capability): the Row-based `transformWithState`, whose
  processor gets Rows (classic and Connect), from 4.1 (`PysparkMinor.row_transform_with_state`);
  a `StoreProcessor` runs in it unchanged.
* `READER_FILTER_PUSHDOWN` (a capability): Python data source readers take Spark's filters
  (`DataSourceReader.pushFilters`) from 4.1, where `spark.sql.python.filterPushdown.enabled`
  is on (a reader that defines `pushFilters` fails without it): `register_reader` turns it on.
"""

from __future__ import annotations

from typing import Any

import pyspark

from spark_statestore.errors import StateStoreError
from spark_statestore.spark.compat import minors, tasks
from spark_statestore.spark.compat.checks import check_internals
from spark_statestore.spark.compat.driver import (
    active_session,
    classic_python_exec,
    connect_host,
    context_stopped,
    drain_listener_bus,
    driver_jvm,
    driver_logger,
    configured_cores,
    executor_cores,
    is_connect,
    jvm_session,
    py4j_gateway,
)
from spark_statestore.spark.compat.minors import PysparkInternalError, minors_with
from spark_statestore.spark.compat.tasks import accept_task_end_updates, arrow_schema, run_at_task_end

__all__ = [
    "BATCH_ID_PROPERTY",
    "FACTS",
    "QUERY_ID_PROPERTY",
    "VERSION",
    "PysparkInternalError",
    "accept_task_end_updates",
    "active_session",
    "classic_python_exec",
    "connect_host",
    "arrow_schema",
    "check_connect_operator",
    "check_internals",
    "configured_cores",
    "context_stopped",
    "drain_listener_bus",
    "driver_jvm",
    "driver_logger",
    "event_time_watermark",
    "executor_cores",
    "internal_error",
    "is_connect",
    "jvm_session",
    "minors_with",
    "py4j_gateway",
    "run_at_task_end",
    "transform_with_state_operator",
]

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"  # see READER_FILTER_PUSHDOWN
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
# a streaming query's tasks run in the job group of its run: the run's id (StreamExecution.runId)
RUN_ID_PROPERTY = "spark.jobGroup.id"
_TRANSFORM_WITH_STATE = {  # PythonEvalType's names (the Row ones from 4.1) -> the operator
    "SQL_TRANSFORM_WITH_STATE_PANDAS_UDF": "transformWithStateInPandas",
    "SQL_TRANSFORM_WITH_STATE_PANDAS_INIT_STATE_UDF": "transformWithStateInPandas",
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF": "transformWithState",
    "SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_INIT_STATE_UDF": "transformWithState",
}

VERSION: str = pyspark.__version__
FACTS = check_internals()  # the installed pyspark minor's facts (it raises if unsupported)


def internal_error(name: str, detail: str) -> PysparkInternalError:
    """The error that names a pyspark internal which is missing or behaves differently."""
    return minors.internal_error(pyspark.__version__, name, detail)


def event_time_watermark(handle: Any) -> int:
    """The batch's event-time watermark from a TWS processor handle (-1: none yet)."""
    return tasks.event_time_watermark(FACTS, handle)


def transform_with_state_operator() -> str | None:
    """The transformWithState operator whose function this Python worker is unpickling
    (`UDF_UNPICKLED_IN_TASK`): "transformWithState" (Row-based) or
    "transformWithStateInPandas"; None outside a task's unpickling or for another operator."""
    from pyspark.util import PythonEvalType

    eval_type = tasks.unpickling_eval_type()
    operators = {getattr(PythonEvalType, kind, None): name for kind, name in _TRANSFORM_WITH_STATE.items()}
    return None if eval_type is None else operators.get(eval_type)


def check_connect_operator(spark: Any, operator: str) -> None:
    """Fail, saying why, when `operator` cannot run in `spark` because its Spark Connect
    client lacks it (`CONNECT_TRANSFORM_WITH_STATE`)."""
    if operator == "transformWithStateInPandas" and not FACTS.connect_transform_with_state and is_connect(spark):
        raise StateStoreError(
            f"transformWithStateInPandas is in the Spark Connect client from pyspark 4.1 "
            f"({minors_with('connect_transform_with_state')}); this client is pyspark {VERSION}. "
            f"Use a classic SparkSession, a newer pyspark client, or with_stores (applyInPandasWithState) "
            f"or partition_function (mapInArrow) in this session"
        )
