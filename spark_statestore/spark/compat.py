"""Every pyspark internal this package relies on, in one place.

Spark has no public hook for some things a state layer needs, so a few internals are
used; each one is named here with what it is for, checked when this module is imported
(a pyspark that changed one fails at import, naming it, instead of misbehaving later),
and covered by a test of its own (`tests/test_spark_compat.py`):

* `WORKER_SENDS_ACCUMULATORS_LAST`: a Python worker pickles its accumulators' values
  once the task's output is complete and before it reports success
  (`pyspark.worker.invoke_udf` -> `send_accumulator_updates`). An object in an
  accumulator whose pickling prepares the batch is how operators without an
  end-of-partition hook (applyInPandasWithState) prepare at the end of the task.
* `UDF_UNPICKLED_IN_TASK`: a Python worker unpickles the operator's function in every
  task, after it set the task's `TaskContext` (`invoke_udf`: `_setTaskContext` before
  `read_udfs`), also for a partition without data. Unpickling an object inside the
  applyInPandasWithState wrapper is how that operator opens its state at the start of
  every task.
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
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable

import pyspark

from spark_statestore.errors import StateStoreError

log = logging.getLogger("spark_statestore.spark")

TESTED_VERSIONS = ("4.3",)
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


class PysparkInternalError(StateStoreError):
    """A pyspark internal this package relies on is missing or behaves differently."""


def internal_error(name: str, detail: str) -> PysparkInternalError:
    """The error that names a pyspark internal which is missing or behaves differently."""
    return PysparkInternalError(
        f"pyspark {pyspark.__version__} changed an internal spark_statestore relies on: {name} ({detail}); "
        f"spark_statestore is tested with pyspark {', '.join(TESTED_VERSIONS)}"
    )


def _check_worker_step_order(name: str, first: str, then: str, detail: str) -> None:
    """`pyspark.worker.invoke_udf` must do `first` before `then` (read from its source)."""
    from pyspark import worker

    source = inspect.getsource(worker.invoke_udf)
    before, after = source.find(first), source.find(then)
    if before < 0 or after < before:
        raise internal_error(name, f"pyspark.worker.invoke_udf no longer {detail}")


def _check_tws_handle() -> None:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
    from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient

    if not callable(getattr(StatefulProcessorApiClient, "get_timestamps", None)):
        raise internal_error("TWS_HANDLE_TIMESTAMPS", "StatefulProcessorApiClient.get_timestamps is gone")
    if "_statefulProcessorApiClient" not in inspect.getsource(StatefulProcessorHandle.__init__):
        raise internal_error("TWS_HANDLE_TIMESTAMPS", "StatefulProcessorHandle keeps no _statefulProcessorApiClient")


def check_internals() -> None:
    """Check the internals that can be checked without a running Spark (at import)."""
    _check_worker_step_order(
        "WORKER_SENDS_ACCUMULATORS_LAST",
        "dump_stream",
        "send_accumulator_updates",
        "sends accumulator updates after the task's output",
    )
    _check_worker_step_order(
        "UDF_UNPICKLED_IN_TASK", "_setTaskContext", "read_udfs(", "sets the TaskContext before reading the UDFs"
    )
    _check_tws_handle()


check_internals()
if not pyspark.__version__.startswith(TESTED_VERSIONS):
    log.warning(
        "spark_statestore is tested with pyspark %s; this is pyspark %s",
        ", ".join(TESTED_VERSIONS),
        pyspark.__version__,
    )


# -- in tasks ---------------------------------------------------------------------------


def event_time_watermark(handle: Any) -> int:
    """The batch's event-time watermark from a TWS processor handle (-1: none yet)."""
    client = getattr(handle, "_statefulProcessorApiClient", None)
    if client is None:
        raise internal_error("TWS_HANDLE_TIMESTAMPS", f"the handle {type(handle).__name__} has no API client")
    return int(client.get_timestamps("EventTime")[1])


class _AtTaskEnd:
    """An accumulator entry that runs `finish()` when the worker sends the accumulators
    (see `WORKER_SENDS_ACCUMULATORS_LAST`); what `finish()` returns is what the driver
    receives. An exception fails the task."""

    def __init__(self, finish: Callable[[], Any]) -> None:
        self.finish = finish

    def __reduce__(self) -> tuple:
        return _identity, (self.finish(),)


def _identity(value: Any) -> Any:
    return value


def run_at_task_end(accumulator: Any, finish: Callable[[], Any]) -> None:
    """Run `finish()` after the task's output is complete, before the task succeeds; its
    result is added to `accumulator` (whose param must merge lists)."""
    accumulator.add([_AtTaskEnd(finish)])


# -- on the driver ----------------------------------------------------------------------


def drain_listener_bus(spark: Any, timeout_ms: int = 10_000) -> None:
    """Wait until Spark delivered the listener events it already queued."""
    try:
        bus = spark.sparkContext._jsc.sc().listenerBus()
    except Exception as e:
        raise internal_error("LISTENER_BUS", f"SparkContext._jsc.sc().listenerBus() failed: {e}") from e
    bus.waitUntilEmpty(timeout_ms)


def driver_logger(spark: Any) -> Callable[[str], None] | None:
    """A function logging INFO lines into the driver's log4j log (None without a JVM,
    as in Spark Connect)."""
    jvm = getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return None
    try:
        jlogger = jvm.org.apache.logging.log4j.LogManager.getLogger("spark_statestore")
    except Exception as e:
        raise internal_error("DRIVER_LOG", f"log4j is not reachable through SparkContext._jvm: {e}") from e
    return jlogger.info


def executor_cores(spark: Any, get: Callable[[str], str | None]) -> int:
    """Cores of one executor of this session: `spark.executor.cores` when set; in local
    mode the scheduler's cores; else the most cores of a registered executor (1, Spark's
    default on YARN and Kubernetes, while none has registered)."""
    configured = get("spark.executor.cores")
    if configured:
        try:
            return int(configured)
        except ValueError:
            raise ValueError(f"spark.executor.cores must be an integer, got {configured!r}") from None
    try:
        context = spark.sparkContext._jsc.sc()
        backend = context.schedulerBackend()
        if backend.getClass().getSimpleName() == "LocalSchedulerBackend":
            return int(backend.totalCores())
        executors = context.statusStore().executorList(True)
        cores = [int(executors.apply(i).totalCores()) for i in range(executors.size())
                 if executors.apply(i).id() != "driver"]
    except Exception as e:
        raise internal_error("EXECUTOR_CORES", f"the scheduler or status store cannot be asked: {e}") from e
    return max(cores, default=1)
