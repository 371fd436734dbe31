"""The checks of pyspark internals that need no running Spark, run when `compat` is
imported: each failure is a `PysparkInternalError` naming the internal, the pyspark
version and the supported range (never a raw AttributeError from pyspark's modules)."""

from __future__ import annotations

import importlib
import importlib.resources
import inspect
from typing import Any

import pyspark

from spark_statestore.spark.compat.minors import (
    PysparkInternalError,
    PysparkMinor,
    internal_error,
    minor_facts,
)


def _error(name: str, detail: str) -> PysparkInternalError:
    return internal_error(pyspark.__version__, name, detail)


def _source(name: str, owner: Any, attribute: str) -> str:
    """The source of `owner.attribute`, or the error naming `name` when it is gone."""
    where = f"{getattr(owner, '__name__', type(owner).__name__)}.{attribute}"
    found = getattr(owner, attribute, None)
    if found is None:
        raise _error(name, f"{where} is gone")
    try:
        return inspect.getsource(found)
    except (OSError, TypeError) as e:
        raise _error(name, f"the source of {where} cannot be read: {e}") from None


def _check_step_order(name: str, facts: PysparkMinor, steps: tuple[str, str], detail: str) -> None:
    """pyspark.worker's task function must do `steps[0]` before `steps[1]` (read from its source)."""
    from pyspark import worker

    source = _source(name, worker, facts.task_function)
    before, after = source.find(steps[0]), source.find(steps[1])
    if before < 0 or after < before:
        raise _error(name, f"pyspark.worker.{facts.task_function} no longer {detail}")


def _check_read_udfs(facts: PysparkMinor) -> None:
    from pyspark import worker

    read_udfs = getattr(worker, "read_udfs", None)
    if read_udfs is None:
        raise _error("UDF_UNPICKLED_IN_TASK", "pyspark.worker.read_udfs is gone")
    parameters = tuple(inspect.signature(read_udfs).parameters)
    if parameters != facts.read_udfs_parameters:
        raise _error(
            "UDF_UNPICKLED_IN_TASK",
            f"pyspark.worker.read_udfs takes {parameters}, not {facts.read_udfs_parameters}",
        )


def _check_tws_handle(facts: PysparkMinor) -> None:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

    try:
        client = importlib.import_module(facts.tws_client_module).StatefulProcessorApiClient
    except (ImportError, AttributeError) as e:
        raise _error("TWS_HANDLE_TIMESTAMPS", f"{facts.tws_client_module}.StatefulProcessorApiClient: {e}") from None
    if not callable(getattr(client, "get_timestamps", None)):
        raise _error("TWS_HANDLE_TIMESTAMPS", "StatefulProcessorApiClient.get_timestamps is gone")
    if facts.tws_client_attribute not in _source("TWS_HANDLE_TIMESTAMPS", StatefulProcessorHandle, "__init__"):
        raise _error("TWS_HANDLE_TIMESTAMPS", f"StatefulProcessorHandle keeps no {facts.tws_client_attribute}")


def _check_accumulator_values() -> None:
    """The worker sends each registered accumulator's `_value` (the end-of-task hook's
    accumulator, registered by the task itself: `compat.tasks.run_at_task_end`)."""
    from pyspark import worker_util

    source = _source("WORKER_SENDS_ACCUMULATORS_LAST", worker_util, "send_accumulator_updates")
    if "._value" not in source or "_accumulatorRegistry" not in source:
        raise _error("WORKER_SENDS_ACCUMULATORS_LAST", "send_accumulator_updates no longer sends the registry's _value")


def _defines(name: str, parts: tuple[str, ...], method: str) -> bool:
    """Whether pyspark's module file at `parts` defines `method`, read from its source (as a
    resource: importing pyspark.sql.connect without the Connect client's dependencies exits
    the process (4.2), and Python workers import pyspark from a zip file)."""
    try:
        return f"def {method}(" in importlib.resources.files("pyspark").joinpath(*parts).read_text()
    except (AttributeError, TypeError, ImportError, OSError) as e:
        raise _error(name, f"pyspark/{'/'.join(parts)} cannot be read: {e}") from None


def _check_operators(facts: PysparkMinor) -> None:
    """Which stateful operators this pyspark has: transformWithStateInPandas in the Spark
    Connect client, and the Row-based transformWithState (classic and Connect); and whether
    its Python data source readers take filters."""
    checks = [
        ("CONNECT_TRANSFORM_WITH_STATE", ("sql", "connect", "group.py"), "transformWithStateInPandas",
         facts.connect_transform_with_state),
        ("ROW_TRANSFORM_WITH_STATE", ("sql", "pandas", "group_ops.py"), "transformWithState",
         facts.row_transform_with_state),
        ("ROW_TRANSFORM_WITH_STATE", ("sql", "connect", "group.py"), "transformWithState",
         facts.row_transform_with_state),
        ("READER_FILTER_PUSHDOWN", ("sql", "datasource.py"), "pushFilters", facts.reader_filter_pushdown),
    ]
    for name, parts, method, expected in checks:
        has = _defines(name, parts, method)
        if has != expected:
            raise _error(name, f"pyspark/{'/'.join(parts)} {'has' if has else 'lacks'} {method}")


def check_internals() -> PysparkMinor:
    """Check the installed pyspark's minor and its internals that can be checked without
    a running Spark; its facts."""
    facts = minor_facts(pyspark.__version__)
    _check_step_order(
        "WORKER_SENDS_ACCUMULATORS_LAST",
        facts,
        facts.output_then_accumulators,
        "sends accumulator updates after the task's output",
    )
    _check_step_order(
        "UDF_UNPICKLED_IN_TASK", facts, facts.context_then_udfs, "sets the TaskContext before reading the UDFs"
    )
    _check_accumulator_values()
    _check_read_udfs(facts)
    _check_tws_handle(facts)
    _check_operators(facts)
    return facts
