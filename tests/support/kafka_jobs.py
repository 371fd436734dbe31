"""Queries of every adapter over Spark's Kafka source, for the Kafka tests and their driver.

Each keeps a running total of records per Kafka key in a `totals` store; a failure can be
injected in the first attempt of chosen batches (`raise_in`: the task raises; `kill_in`:
its Python worker is killed with SIGKILL; `hold_in`: the task waits until the driver is
killed, marking `held` first, once per checkpoint). The state read back must equal the count
of each key's records in the topic: a batch applied twice or lost shows there.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import Any

import spark_jobs
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StoreProcessor, partition_function, with_stores

cloudpickle.register_pickle_by_value(sys.modules[__name__])
TOTALS = [KeyValue("totals", Serdes.string(), Serdes.int64())]
ADAPTERS = ("StoreProcessor", "transformWithState", "with_stores", "partition_function")
PARTITIONS = 2  # the tests' spark.sql.shuffle.partitions, and partition_function's


def hold(checkpoint: str, batch: int, hold_in: Any) -> None:
    """In a batch of `hold_in`, the first time for this checkpoint: mark `held` and wait to
    be killed with the driver (a restarted driver finds the mark and goes on)."""
    if batch in hold_in and not spark_jobs.injected(checkpoint, "held"):
        from pyspark import TaskContext

        spark_jobs.record_injection(checkpoint, "held", batch, TaskContext.get().partitionId())
        time.sleep(600)


class KafkaTotals(StoreProcessor):
    """transformWithStateInPandas / transformWithState: a running total per key."""

    stores = TOTALS

    def __init__(self, checkpoint_location: str, *, rows: bool = False, raise_in=(), kill_in=(), hold_in=(),
                 spark: Any = None) -> None:
        self.rows, self.raise_in, self.kill_in, self.hold_in = rows, tuple(raise_in), tuple(kill_in), tuple(hold_in)
        super().__init__(checkpoint_location, spark=spark)

    def process_rows(self, key: Any, rows: Any, timer_values: Any) -> Any:
        store = self.store("totals")
        added = sum(1 for _ in rows) if self.rows else sum(len(frame) for frame in rows)
        total = (store.get(key[0]) or 0) + added
        store.put(key[0], total)
        batch, attempt = spark_jobs.task_attempt()
        hold(self._config.checkpoint_location, batch, self.hold_in)
        spark_jobs.maybe_fail(batch, attempt, self.raise_in, self.kill_in, self._config.checkpoint_location)
        if self.rows:
            from pyspark.sql import Row

            yield Row(key=key[0], total=total)
        else:
            import pandas as pd

            yield pd.DataFrame({"key": [key[0]], "total": [total]})


def _held(fn: Any, checkpoint: str, hold_in: Any) -> Any:
    """`fn` (a with_stores or partition function) holding the batches of `hold_in`."""
    if not hold_in:
        return fn

    def held(*args: Any) -> Any:
        hold(checkpoint, spark_jobs.task_attempt()[0], hold_in)
        return fn(*args)

    return held


def kafka_source(spark: Any, bootstrap: str, topic: str, max_offsets: int | None = None) -> Any:
    """The topic as a stream (Spark's Kafka source), from its earliest offsets."""
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if max_offsets:
        source = source.option("maxOffsetsPerTrigger", max_offsets)
    return source.load()


def kafka_events(spark: Any, bootstrap: str, topic: str, max_offsets: int | None = None) -> Any:
    """The topic as a stream of (key string) rows."""
    from pyspark.sql import functions as F

    return kafka_source(spark, bootstrap, topic, max_offsets).select(F.col("key").cast("string").alias("key"))


def start(spark: Any, adapter: str, bootstrap: str, topic: str, checkpoint: str, trigger: dict, *,
          raise_in=(), kill_in=(), hold_in=(), max_offsets: int | None = None) -> Any:
    """Start `adapter`'s totals query over `topic` (output to the noop sink)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    events = kafka_events(spark, bootstrap, topic, max_offsets)
    failures = {"raise_in": raise_in, "kill_in": kill_in}
    if adapter in ("StoreProcessor", "transformWithState"):
        rows = adapter == "transformWithState"
        processor = KafkaTotals(checkpoint, rows=rows, hold_in=hold_in, spark=spark, **failures)
        operator = events.groupBy("key").transformWithState if rows else \
            events.groupBy("key").transformWithStateInPandas
        out = operator(processor, "key string, total long", "Update", "None")
    elif adapter == "with_stores":
        fn = with_stores(_held(spark_jobs.group_totals(checkpoint=checkpoint, **failures), checkpoint, hold_in),
                         checkpoint, TOTALS, spark=spark)
        out = events.groupBy("key").applyInPandasWithState(
            fn, "key string, total long, batch_id long, calls long", "calls long", "Update",
            GroupStateTimeout.NoTimeout,
        )
    elif adapter == "partition_function":
        fn = partition_function(_held(spark_jobs.partition_totals(checkpoint=checkpoint, **failures), checkpoint,
                                      hold_in),
                                checkpoint, TOTALS, partitions=PARTITIONS, emit_changes=False, spark=spark)
        out = events.repartition(PARTITIONS, "key").mapInArrow(fn, "key string")
    else:
        raise ValueError(f"adapter must be one of {ADAPTERS}, got {adapter!r}")
    return (out.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
            .trigger(**trigger).queryName(f"kafka_{adapter}").start())


def expected_totals(records: list[Any]) -> dict[str, int]:
    """Each key's count of records: what the totals must be once the topic was read."""
    return dict(Counter(r.key.decode() for r in records))


def state_totals(spark: Any, checkpoint: str) -> dict[str, int]:
    """The totals store, read back from the durable state (READ_COMMITTED)."""
    state = (spark.read.format("spark_statestore").option("checkpointLocation", checkpoint)
             .option("store", "totals").load().toPandas())
    return dict(zip(state["key"], (int(v) for v in state["value"]), strict=True))


def committed_ends(checkpoint: str) -> dict[int, int]:
    """The offsets per partition the newest committed batch read up to ({} before any)."""
    import spark_batches

    if not os.path.isdir(os.path.join(checkpoint, "commits")):
        return {}
    committed, _, ranges = spark_batches.kafka_batches(checkpoint)
    ends: dict[int, int] = {}
    for batch in committed:
        for (_, partition), (_, until) in ranges[batch].items():
            ends[partition] = until
    return ends
