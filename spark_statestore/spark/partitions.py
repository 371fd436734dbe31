"""Per-partition processing (`mapInArrow` / `mapInPandas`) on the partition's stores.

    def totals(batches, stores):                      # all records of one partition
        counts = stores["totals"]
        for batch in batches:
            keys, added = ...                         # vectorized: one get_all per batch
            current = counts.get_all(keys)
            counts.put_columns(keys, [(c or 0) + a for c, a in zip(current, added)])
        return iter(())

    fn = partition_function(totals, checkpoint, [KeyValue("totals", Serdes.string(), Serdes.int64())],
                            partitions=8, output_schema=changes_schema("string", "long"))
    events.repartition(8, "key").mapInArrow(fn, changes_schema("string", "long"))

The state of a partition is opened when its iterator starts and prepared when it ends
(the same `TaskState` as every adapter). With the record cache on, what the function
writes reaches the stores at flushes, which forward one `Change(new, old)` per key:
the output is that de-duplicated change stream (KIP-63), one row per forwarded change,
emitted as flushes happen (evictions) and at the end of the partition. The partition
count is kept with the state: a query cannot come back with another one.

Window stores on the watermark clock (the default) work as in the other adapters: during
batch N their stream time is the watermark batch N-1 ended with, and they advance to
batch N's watermark (Spark's offset log: the same for every partition and attempt) when
the batch is prepared. `stores.watermark` is batch N's watermark (ms; 0 in a query
without one, as Spark's offset log has it), so a function can emit the windows it
closes, as Spark SQL's append mode does: those ending at or before it
(`fetch_all_columns(0, stores.watermark - size)`), which expire by batch N+1.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import pandas as pd

from spark_statestore.cache.change import Change
from spark_statestore.errors import StateStoreError
from spark_statestore.spark import compat
from spark_statestore.spark.declarations import Declaration
from spark_statestore.spark.driver.operator import OperatorConfig, build_operator
from spark_statestore.spark.worker.task import TaskInfo, current_task
from spark_statestore.spark.worker.task_state import TaskState

PartitionFunc = Callable[[Iterator[Any], TaskState], "Iterator[Any] | None"]
CHANGE_COLUMNS = ["batch_id", "store", "key", "new_value", "old_value", "window_start"]


def changes_schema(key_type: str, value_type: str) -> str:
    """The Spark DDL of the change stream, for keys and values of the given Spark types."""
    return (
        f"batch_id long, store string, key {key_type}, new_value {value_type}, "
        f"old_value {value_type}, window_start long"
    )


def partition_function(
    func: PartitionFunc,
    checkpoint_location: str,
    stores: Sequence[Declaration],
    *,
    partitions: int,
    output_schema: str | None = None,
    arrow: bool = True,
    emit_changes: bool = True,
    spark: Any = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Wrap `func(batches, stores)` for `mapInArrow` (`arrow=True`) or `mapInPandas`.

    The output is what `func` yields followed, interleaved as flushes happen, by the
    changes the cached stores forward (as rows of `changes_schema(...)`; give that schema
    as `output_schema`, as it also goes to mapInArrow/mapInPandas). With
    `emit_changes=False` the output is only what `func` yields. `partitions` must be the
    number of partitions the input is repartitioned into by key."""
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}: {func!r}")
    operator = "mapInArrow" if arrow else "mapInPandas"
    config, _ = build_operator(checkpoint_location, stores, operator, spark, partitions)
    rows = ChangeRows(config, arrow, compat.arrow_schema(output_schema) if arrow and output_schema else None)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        task = current_task()
        if task is None:
            raise StateStoreError(f"{operator} with stores runs in tasks of a streaming query only")
        yield from partition_stream(func, config, task, batches, rows if emit_changes else None)

    run.__name__ = getattr(func, "__name__", "partition_function")
    return run


class ChangeRows:
    """Forwarded changes as output batches (Arrow record batches or pandas frames)."""

    def __init__(self, config: OperatorConfig, arrow: bool, arrow_schema: Any) -> None:
        self.declarations = {d.name: d for d in config.declarations}
        self.arrow = arrow
        self.arrow_schema = arrow_schema

    def __call__(self, batch_id: int, forwarded: list[tuple[str, Change]]) -> Any:
        frame = changes_frame(batch_id, forwarded, self.declarations)
        if not self.arrow:
            return frame
        import pyarrow as pa

        return pa.RecordBatch.from_pandas(frame, schema=self.arrow_schema, preserve_index=False)


def partition_stream(
    func: PartitionFunc, config: OperatorConfig, task: TaskInfo, batches: Iterator[Any], rows: ChangeRows | None
) -> Iterator[Any]:
    """One task of per-partition processing: open the partition's state, run `func`, emit
    the forwarded changes as `rows` (if given), prepare at the end. Whatever ends it early,
    a failure or the consumer closing this generator, releases the partition unprepared."""
    forwarded: list[tuple[str, Change]] = []
    on_changes = None
    if rows is not None:
        on_changes = lambda name, changes: forwarded.extend((name, c) for c in changes)  # noqa: E731
    state = TaskState(config, task, on_changes=on_changes).open()
    try:
        for item in func(batches, state) or ():
            yield item
            if forwarded:
                yield rows(task.batch_id, forwarded)  # type: ignore[misc]
                forwarded.clear()
        state.flush_caches()  # the end of the partition
        if forwarded:
            yield rows(task.batch_id, forwarded)  # type: ignore[misc]
            forwarded.clear()
        state.finish()
    except BaseException:
        state.abort()  # a failure, or Spark closing the output early (GeneratorExit)
        raise


def changes_frame(batch_id: int, forwarded: list[tuple[str, Change]], declarations: dict) -> pd.DataFrame:
    """Forwarded changes as rows, keys and values decoded with their stores' serdes."""
    rows = []
    for name, change in forwarded:
        declaration = declarations[name]
        decode_key, decode_value = declaration.key_serde.decode, declaration.value_serde.decode
        rows.append(
            (
                batch_id,
                name,
                decode_key(change.key),
                None if change.new_value is None else decode_value(change.new_value),
                None if change.old_value is None else decode_value(change.old_value),
                change.window_start,
            )
        )
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS)
