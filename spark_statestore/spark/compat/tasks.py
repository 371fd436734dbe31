"""Internals used inside tasks (Python workers), and in what is built for them."""

from __future__ import annotations

from typing import Any, Callable

import pyspark

from spark_statestore.spark.compat.minors import PysparkMinor, internal_error


def arrow_schema(ddl: str) -> Any:
    """The Arrow schema of a Spark DDL schema, as mapInArrow expects its output."""
    from pyspark.sql.types import DataType

    try:
        from pyspark.sql.pandas.types import to_arrow_schema
    except ImportError as e:
        raise internal_error(pyspark.__version__, "ARROW_SCHEMA", f"to_arrow_schema is gone: {e}") from e
    return to_arrow_schema(DataType.fromDDL(ddl))


def event_time_watermark(facts: PysparkMinor, handle: Any) -> int:
    """The batch's event-time watermark from a TWS processor handle (-1: none yet)."""
    client = getattr(handle, facts.tws_client_attribute, None)
    if client is None:
        raise internal_error(
            pyspark.__version__, "TWS_HANDLE_TIMESTAMPS", f"the handle {type(handle).__name__} has no API client"
        )
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
