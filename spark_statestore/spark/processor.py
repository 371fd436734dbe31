"""`StoreProcessor`: a `transformWithStateInPandas` (or, pyspark 4.1+, Row-based
`transformWithState`) processor with spark_statestore stores.

Declare the stores, implement `process_rows` (and `process_timer` for event-time or
processing-time timers), and use `self.store(name)` inside them::

    class Totals(StoreProcessor):
        stores = [KeyValue("totals", Serdes.string(), Serdes.int64())]

        def process_rows(self, key, rows, timer_values):
            totals = self.store("totals")
            count = sum(len(frame) for frame in rows) + (totals.get(key[0]) or 0)
            totals.put(key[0], count)
            yield pd.DataFrame({"key": [key[0]], "total": [count]})

    processor = Totals(checkpoint_location)     # reads spark.conf on the driver
    df.groupBy("key").transformWithStateInPandas(processor, "key string, total long", "Update", "None")

The same class runs in `transformWithState`, where `process_rows` gets Rows and yields
Rows; the stores, their state and the checkpoint layout are the same.

Each task opens its partition's state in `init()` (batch id and partition from its
TaskContext) and prepares the batch's changelog in `close()`; the changelog commits when
Spark runs the next batch, so a failed or re-run batch never leaves partial state. The
driver's own `init()`/`close()` call (no TaskContext) opens nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Iterator, Sequence

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from spark_statestore.errors import StateStoreError
from spark_statestore.spark import compat
from spark_statestore.spark.declarations import Declaration
from spark_statestore.spark.driver.operator import build_operator
from spark_statestore.spark.driver.settings import StateStoreSettings
from spark_statestore.spark.worker.task import current_task
from spark_statestore.spark.worker.task_state import TaskState
from spark_statestore.stores.protocol import Store


class StoreProcessor(StatefulProcessor):
    """Base class of processors whose state lives in spark_statestore stores."""

    stores: ClassVar[Sequence[Declaration]] = ()

    def __init__(self, checkpoint_location: str, *, spark: Any = None) -> None:
        self._config, self.metrics = build_operator(
            checkpoint_location, self.stores, "transformWithStateInPandas", spark
        )
        self._state: TaskState | None = None
        self.handle: Any = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("metrics", None)  # driver-side only
        return state

    def __setstate__(self, state: dict) -> None:
        """Unpickled in a task: the operator that runs it (transformWithState or
        transformWithStateInPandas, unknown when the driver built it) names its task records."""
        self.__dict__.update(state)
        operator = compat.transform_with_state_operator()
        if operator is not None:
            self._config = dataclasses.replace(self._config, operator=operator)

    @property
    def settings(self) -> StateStoreSettings:
        return self._config.settings

    # -- the StatefulProcessor interface ------------------------------------------------

    def init(self, handle: Any) -> None:
        self.handle = handle
        task = current_task()
        if task is not None:
            self._state = TaskState(self._config, task).open()
            self._state.observe_watermark(compat.event_time_watermark(handle))
        self.setup(handle)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        if self._state is not None:
            self._state.observe_watermark(timerValues.getCurrentWatermarkInMs())
        return self._guarded(self.process_rows(key, rows, timerValues))

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        if self._state is not None:
            self._state.observe_watermark(timerValues.getCurrentWatermarkInMs())
        return self._guarded(self.process_timer(key, timerValues, expiredTimerInfo))

    def close(self) -> None:
        state, self._state = self._state, None
        try:
            self.teardown()
        except BaseException:
            if state is not None:
                state.abort()
            raise
        if state is not None:
            state.finish()

    def _guarded(self, results: Iterator[Any]) -> Iterator[Any]:
        """User code that fails (or output Spark stops reading) releases the partition at
        once: Spark does not call close() for a failed attempt, and the next attempt may
        run in another worker that needs the partition."""
        try:
            yield from results
        except BaseException:
            state, self._state = self._state, None
            if state is not None:
                state.abort()
            raise

    # -- for subclasses -----------------------------------------------------------------

    def setup(self, handle: Any) -> None:
        """Called in every `init()` (also the driver's, where no store is open)."""

    def process_rows(self, key: Any, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        """The rows of one grouping key (an iterator of pandas DataFrames in
        transformWithStateInPandas, of Rows in transformWithState); yield output of that kind."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_rows")

    def process_timer(self, key: Any, timer_values: Any, expired_timer_info: Any) -> Iterator[Any]:
        """A timer of `key` fired; yield output."""
        return iter(())

    def teardown(self) -> None:
        """Called in every `close()`, before the batch is prepared."""

    def store(self, name: str) -> Store:
        """The typed store `name` of this task's partition."""
        if self._state is None:
            raise StateStoreError(
                f"store {name!r} is only available while a task processes a partition "
                f"(not in the driver's init/close, and not after close)"
            )
        return self._state.store(name)

    def view(self, name: str, isolation: Any = None) -> Any:
        """A read-only view of store `name` at `isolation` (default: the configured level)."""
        if self._state is None:
            raise StateStoreError(f"store {name!r} is only available while a task processes a partition")
        return self._state.view(name, isolation)

    @property
    def batch_id(self) -> int | None:
        return None if self._state is None else self._state.task.batch_id

    @property
    def partition(self) -> int | None:
        return None if self._state is None else self._state.task.partition
