"""Jobs of the TTL Spark tests, one per adapter (shipped to the workers by value): each
keeps, per key, a count on the event-time clock ("seen", TTL 15 s) and one on the
processing-time clock ("recent", TTL 1.5 s), and emits `(batch_id, key, seen, recent,
clock)` for every key of a batch (`clock`: the TWS handle's processing time, -1 elsewhere).
The first attempt of every task of batch `FAILING_BATCH` fails after writing."""

from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Any

import pandas as pd
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StoreProcessor

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EVENT_TTL, PROCESSING_TTL = 15_000, 1_500
FAILING_BATCH = 3
STORES = [
    KeyValue("seen", Serdes.string(), Serdes.int64(), ttl=datetime.timedelta(seconds=15), ttl_clock="event_time"),
    KeyValue("recent", Serdes.string(), Serdes.int64(), ttl=PROCESSING_TTL),
]
SCHEMA = "batch_id long, key string, seen long, recent long, clock long"


def generate(input_dir: str, files: int) -> None:
    """File n: event times from n*10 s + 1 s (0 is not after the first watermark); key k<i>
    has 1 + (n + i) % 3 rows where (n * (i + 1)) % 4 != 1 (so keys skip batches); k6 is in
    files 0 and 5 only (its entry is deleted as expired in a batch without it: an `expire`
    in the change feed that does not depend on Spark running a last batch without data).
    Files are read in their order (modification times a second apart)."""
    os.makedirs(input_dir, exist_ok=True)
    start = int(time.time())
    for n in range(files):
        rows = [
            (f"k{i}", n * 10_000 + 1_000 + j)
            for i in range(7)
            if (n in (0, 5) if i == 6 else (n * (i + 1)) % 4 != 1)
            for j in range(1 + (n + i) % 3)
        ]
        temp = os.path.join(input_dir, f".{n:05d}.json.tmp")
        pd.DataFrame(rows, columns=["key", "ts"]).to_json(temp, orient="records", lines=True)
        path = os.path.join(input_dir, f"{n:05d}.json")
        os.replace(temp, path)
        # the file source orders files by modification time (milliseconds): files written
        # within one millisecond may be read in any order, and a file read after a later one
        # is late data; a second apart, the batches follow the files
        stamp = start - files + n
        os.utime(path, (stamp, stamp))


def _batch_id() -> int:
    from pyspark import TaskContext

    return int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))


def _fail_first_attempt(batch: int) -> None:
    from pyspark import TaskContext

    if batch == FAILING_BATCH and TaskContext.get().attemptNumber() == 0:
        raise RuntimeError(f"injected failure in batch {batch}")


def _count(stores: Any, batch: int, keys: list, added: list, clock: int = -1) -> pd.DataFrame:
    """Add `added` rows to each key's counts (vectorized: one get_all per store)."""
    out = {"batch_id": [batch] * len(keys), "key": keys, "clock": [clock] * len(keys)}
    for name in ("seen", "recent"):
        store = stores[name]
        totals = [(c or 0) + a for c, a in zip(store.get_all(keys), added)]
        store.put_columns(keys, totals)
        out[name] = totals
    _fail_first_attempt(batch)
    return pd.DataFrame(out)[["batch_id", "key", "seen", "recent", "clock"]]


class TtlCounts(StoreProcessor):
    stores = STORES

    def process_rows(self, key: Any, rows: Any, timer_values: Any) -> Any:
        added = sum(len(frame) for frame in rows)
        yield _count(self._state, self.batch_id, [key[0]], [added], timer_values.getCurrentProcessingTimeInMs())


def group_counts(key: Any, frames: Any, group_state: Any, stores: Any) -> Any:
    yield _count(stores, _batch_id(), [key[0]], [sum(len(f) for f in frames)])


def partition_counts(batches: Any, stores: Any) -> Any:
    from collections import Counter

    import pyarrow as pa

    batch = _batch_id()
    added: Counter = Counter()
    for records in batches:
        added.update(records.column("key").to_pylist())
    if added:
        keys = sorted(added)
        frame = _count(stores, batch, keys, [added[k] for k in keys])
        yield pa.RecordBatch.from_pandas(frame, preserve_index=False)
