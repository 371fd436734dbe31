"""applyInPandasWithState with spark_statestore stores beside the GroupState.

    def running_totals(key, frames, group_state, stores):
        totals = stores["totals"]
        total = (totals.get(key[0]) or 0) + sum(len(f) for f in frames)
        totals.put(key[0], total)
        yield pd.DataFrame({"key": [key[0]], "total": [total]})

    fn = with_stores(running_totals, checkpoint, [KeyValue("totals", Serdes.string(), Serdes.int64())])
    df.groupBy("key").applyInPandasWithState(fn, "key string, total long", "count long", "Update", "NoTimeout")

The operator calls the function once per key, with no hook at the start or end of a
partition, and not at all for a partition without data. The wrapper opens the
partition's state when the task receives the function (see `OpenAtTaskStart`; the same
`TaskState` as every adapter) and prepares the batch's changelog when the task ends,
through the task's entry in the metrics accumulator (in a Spark Connect session, which has
none, a `compat.TaskEndCarrier` pickled with the function), which the Python worker sends
once the task's output is complete and before the task reports success (see
`TaskState.finish_at_task_end`). So a batch's
changes are durable before Spark commits the batch, a failed attempt prepares nothing,
and the partition is released by the task itself: the next batch of the partition can
run in any Python worker. (A worker whose task raises exits, releasing its locks.)
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from spark_statestore.errors import StateStoreError
from spark_statestore.spark import compat
from spark_statestore.spark.declarations import Declaration
from spark_statestore.spark.driver.operator import OperatorConfig, build_operator
from spark_statestore.spark.worker.task import TaskInfo, current_task
from spark_statestore.spark.worker.task_state import TaskState, state_of_current_task

GroupFunction = Callable[[Any, Iterator[Any], Any, TaskState], Iterator[Any]]


def with_stores(
    func: GroupFunction, checkpoint_location: str, stores: Sequence[Declaration], *, spark: Any = None
) -> Callable[[Any, Iterator[Any], Any], Iterator[Any]]:
    """Wrap `func(key, frames, group_state, stores)` for `applyInPandasWithState`;
    `stores[name]` is the typed store `name` of the key's partition. Settings and the
    checkpoint location are checked here, on the driver; the session's metrics are
    `metrics_for(spark)`."""
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}: {func!r}")
    config, _ = build_operator(checkpoint_location, stores, "applyInPandasWithState", spark)
    opener = OpenAtTaskStart(config)

    def apply_with_stores(key: Any, frames: Iterator[Any], group_state: Any) -> Iterator[Any]:
        opener.check()
        task = current_task()
        if task is None:
            raise StateStoreError("applyInPandasWithState with stores runs in tasks of a streaming query only")
        yield from group_stream(func, config, task, key, frames, group_state)

    apply_with_stores.__name__ = getattr(func, "__name__", "apply_with_stores")
    return apply_with_stores


class OpenAtTaskStart:
    """Part of the wrapped function: pyspark unpickles an operator's function in every task
    once the task's context is set (`compat.UDF_UNPICKLED_IN_TASK`), and unpickling this
    object opens the partition's state then and arranges its preparation at the end of
    the task. So every partition prepares a version in every batch, also one whose
    partition had no data (the function is never called then), as with the other
    adapters, and a missing durable version is always noticed."""

    def __init__(self, config: OperatorConfig, opened_in_task: bool = False) -> None:
        self.config = config
        self.opened_in_task = opened_in_task

    def __reduce__(self) -> tuple:
        return _opened_in_task, (self.config,)

    def check(self) -> None:
        """Called in a task: the state must have been opened when the function arrived."""
        if not self.opened_in_task:
            raise compat.internal_error(
                "UDF_UNPICKLED_IN_TASK", "the function of applyInPandasWithState was not unpickled in its task"
            )


def _opened_in_task(config: OperatorConfig) -> OpenAtTaskStart:
    task = current_task()  # None outside a task
    if task is not None:
        state_of_current_task(config, task)
    return OpenAtTaskStart(config, task is not None)


def group_stream(
    func: GroupFunction, config: OperatorConfig, task: TaskInfo, key: Any, frames: Iterator[Any], group_state: Any
) -> Iterator[Any]:
    """One key's call: the task's state (opened by its first key, prepared when the task
    ends), `func`'s output; whatever ends it early, a failure or the consumer closing this
    generator, releases the partition unprepared."""
    state = state_of_current_task(config, task)
    try:
        state.observe_watermark(_watermark(group_state))
        yield from func(key, frames, group_state, state)
    except BaseException:
        state.abort()
        raise


def _watermark(group_state: Any) -> int:
    """The batch's watermark (-1 when the query has none: pyspark raises then)."""
    from pyspark.errors import PySparkRuntimeError

    try:
        return int(group_state.getCurrentWatermarkMs())
    except PySparkRuntimeError as e:
        if e.getCondition() == "CANNOT_WITHOUT":
            return -1
        raise
