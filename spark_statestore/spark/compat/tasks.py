"""Internals used inside tasks (Python workers), and in what is built for them."""

from __future__ import annotations

import sys
from typing import Any, Callable

import pyspark
from pyspark.accumulators import AccumulatorParam

from spark_statestore.spark.compat.minors import PysparkMinor, internal_error


def arrow_schema(ddl: str) -> Any:
    """The Arrow schema of a Spark DDL schema, as mapInArrow expects its output."""
    from pyspark.sql.types import DataType

    try:
        from pyspark.sql.pandas.types import to_arrow_schema
    except ImportError as e:
        raise internal_error(pyspark.__version__, "ARROW_SCHEMA", f"to_arrow_schema is gone: {e}") from e
    return to_arrow_schema(DataType.fromDDL(ddl))


def unpickling_eval_type() -> int | None:
    """The eval type of the function `pyspark.worker.read_udfs` is unpickling on this stack
    (its `eval_type` argument: a task's operator function is unpickled there,
    `UDF_UNPICKLED_IN_TASK`), or None when nothing on the stack is `read_udfs`."""
    from pyspark import worker

    code, frame = worker.read_udfs.__code__, sys._getframe(1)
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    return None if frame is None else frame.f_locals["eval_type"]


def event_time_watermark(facts: PysparkMinor, handle: Any) -> int:
    """The batch's event-time watermark from a TWS processor handle (-1: none yet)."""
    client = getattr(handle, facts.tws_client_attribute, None)
    if client is None:
        raise internal_error(
            pyspark.__version__, "TWS_HANDLE_TIMESTAMPS", f"the handle {type(handle).__name__} has no API client"
        )
    return int(client.get_timestamps("EventTime")[1])


# The id of the accumulator that carries end-of-task hooks: SparkContext numbers its own
# accumulators from 0 up and pyspark's special ones are -1 and -2.
TASK_END_ACCUMULATOR_ID = -6_180_339


class _Hooks(AccumulatorParam):
    """In a task: the hooks to run at its end, in a list."""

    def zero(self, value: Any) -> list:  # noqa: ARG002 - the interface's signature
        return []

    def addInPlace(self, value1: list, value2: list) -> list:
        value1.extend(value2)
        return value1


class _Discard(_Hooks):
    """On the driver: what arrives of the hooks (None each) is dropped."""

    def addInPlace(self, value1: list, value2: list) -> list:  # noqa: ARG002
        return value1


class _AtTaskEnd:
    """An accumulator entry that runs `finish()` when the worker sends the accumulators
    (see `WORKER_SENDS_ACCUMULATORS_LAST`); the driver receives None. An exception fails
    the task."""

    def __init__(self, finish: Callable[[], Any]) -> None:
        self.finish = finish

    def __reduce__(self) -> tuple:
        self.finish()
        return _none, ()


def _none() -> None:
    return None


def run_at_task_end(finish: Callable[[], Any]) -> None:
    """Run `finish()` after the task's output is complete, before the task succeeds.

    The worker sends the values of every accumulator in its registry at the end of the
    task (the registry is emptied when a task starts), so the hook rides on an accumulator
    the task registers itself: nothing is built for it on the driver, and a session
    without accumulators (Spark Connect) needs none."""
    from pyspark.accumulators import Accumulator, _accumulatorRegistry

    hooks = _accumulatorRegistry.get(TASK_END_ACCUMULATOR_ID)
    if hooks is None or type(hooks.accum_param) is not _Hooks:
        hooks = Accumulator(TASK_END_ACCUMULATOR_ID, [], _Hooks())
    hooks.add([_AtTaskEnd(finish)])


def accept_task_end_updates() -> None:
    """Let this driver receive the end-of-task hooks' (empty) updates: pyspark before 4.2
    fails on an update for an id its registry does not hold (`ACCUMULATOR_REGISTRY`)."""
    from pyspark.accumulators import Accumulator, _accumulatorRegistry

    if TASK_END_ACCUMULATOR_ID not in _accumulatorRegistry:
        Accumulator(TASK_END_ACCUMULATOR_ID, [], _Discard())
