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
    result is added to `accumulator` (whose param must merge lists; a `TaskEndCarrier`
    drops it)."""
    accumulator.add([_AtTaskEnd(finish)])


# An accumulator id no driver hands out (a SparkContext counts up from 0; pyspark's own
# special ids are -1 and -2).
TASK_END_ACCUMULATOR_ID = -7_892


class TaskEndCarrier:
    """What carries `run_at_task_end` to the tasks where there is no driver accumulator
    (Spark Connect): made anywhere, with no SparkContext. Unpickled in a task, it puts its
    worker half in the worker's accumulator registry (cleared at the start of every task),
    whose `_value` the worker reads once the task's output is complete
    (`WORKER_SENDS_ACCUMULATORS_LAST`): reading it runs the task's end-of-task work.
    What the worker then sends is `None`: a Connect server keeps the tasks' accumulator
    updates of a session until its client's next request, and the client ignores ids that
    are not its profiler's, so nothing but a few bytes per task travels."""

    def __reduce__(self) -> tuple:
        return _carrier_in_task, ()

    def add(self, items: list) -> None:  # noqa: ARG002 - outside a task there is nothing to run
        """Outside a task (the client's copy) nothing is collected."""


class _WorkerTaskEnd:
    """The worker half of a `TaskEndCarrier`: entries added in the task, run when read."""

    def __init__(self) -> None:
        self._items: list = []

    def add(self, items: list) -> None:
        self._items.extend(items)

    @property
    def _value(self) -> None:
        items, self._items = self._items, []
        for item in items:
            if isinstance(item, _AtTaskEnd):
                item.finish()
        return None


def _carrier_in_task() -> Any:
    from pyspark import TaskContext
    from pyspark.accumulators import _accumulatorRegistry

    if TaskContext.get() is None:
        return TaskEndCarrier()
    found = _accumulatorRegistry.get(TASK_END_ACCUMULATOR_ID)
    if found is None:
        found = _accumulatorRegistry[TASK_END_ACCUMULATOR_ID] = _WorkerTaskEnd()
    return found
