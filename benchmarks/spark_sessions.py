"""Session windows in Spark: the session store against the merge a user writes by hand
over Spark's own state, in one run on one input.

Per user, events at most `--gap-ms` apart are one session, counted and emitted once the
watermark closed it (Spark SQL's `session_window` semantics, late events dropped):

  (a) `examples/session_counts.py`: the `Session` store in transformWithStateInPandas, a
      record merged at a time, an event-time timer at each session's end + gap
  (b) the same logic by hand over transformWithStateInPandas's ListState: per user and
      micro-batch, its sessions read once (`get`), every record merged in Python, the
      list written back once (`put`, or `clear`); the same timers; a timer reads the list,
      emits what closed and writes back the rest
  (c) Spark SQL's `session_window` aggregation (the JVM reference)
  (d) the session store per partition (`mapInArrow` on the input repartitioned by user):
      a micro-batch's records merged by `merge_batch`, then the sessions that batch's
      watermark closed taken out and emitted (`close_sessions`); no timers

(0) runs transformWithStateInPandas over the same input keeping no state and setting no
timer: the floor Spark and the Python operator set. The input ends with two files of one
event each, far later, so that every query closes every other session (one without state
in Spark's eyes, (d), runs no batch without data); (a) to (d) write parquet and must give
the same sessions, or the script exits 1. rows/s = input rows / query wall time, after a
warm-up query; each query is run `--repeats` times, best kept.

    python benchmarks/spark_sessions.py [--rows N] [--users U] [--files F] [--gap-ms G]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import session_counts
from common import print_table
from pyspark import cloudpickle
from pyspark.sql.streaming import StatefulProcessor
from session_counts import OUTPUT_SCHEMA, SessionCounts, events, generate, sink, spark_sql_query
from sessions import merge_event
from spark_state import _builder

from spark_statestore import Serdes
from spark_statestore.spark import Session, epoch_millis, partition_function

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(session_counts)
cloudpickle.register_pickle_by_value(sys.modules["sessions"])

COLUMNS = ["user", "session_start", "session_end", "events"]
LATER = 10**12  # ms: the closing files' event time


class ListStateSessions(StatefulProcessor):
    """(b) sessions per user merged by hand over a ListState of `(start, end, count)`."""

    def __init__(self, gap_ms: int) -> None:
        self.gap_ms = gap_ms

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.sessions = handle.getListState("sessions", "start long, end long, count long")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        gap = self.gap_ms
        times = sorted(
            t for frame in rows for t in epoch_millis(frame["ts"]).tolist()
        )  # none late: see `events`
        sessions = [tuple(s) for s in self.sessions.get()]
        closing = set()
        for t in times:
            sessions = merge_event(sessions, t, gap)
            closing.add(sessions[-1][1] + gap)  # the merged session comes last
        if closing:
            self.sessions.put(sessions)
            for expiry in closing - set(self.handle.listTimers()):
                self.handle.registerTimer(expiry)
        return iter(())

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        watermark = timerValues.getCurrentWatermarkInMs()
        sessions = [tuple(s) for s in self.sessions.get()]
        closed = [s for s in sessions if s[1] + self.gap_ms <= watermark]
        if not closed:
            return
        rest = [s for s in sessions if s[1] + self.gap_ms > watermark]
        if rest:
            self.sessions.put(rest)
        else:
            self.sessions.clear()
        rows = [(key[0], s, e + self.gap_ms, c) for s, e, c in closed]
        yield pd.DataFrame(rows, columns=COLUMNS)

    def close(self) -> None:
        pass


class NoState(StatefulProcessor):
    """(0) the floor: the same input read per user, no state, no timer, nothing emitted."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        sorted(t for frame in rows for t in epoch_millis(frame["ts"]).tolist())
        return iter(())

    def close(self) -> None:
        pass


def _add(a: int, b: int) -> int:
    return a + b


def partition_sessions(gap_ms: int) -> Any:
    """(d) the session store per partition: each micro-batch's records of a partition merged
    by `merge_batch`, then the sessions this batch's watermark closed taken out and emitted."""

    def run(batches: Iterator[pa.RecordBatch], stores: Any) -> Iterator[pa.RecordBatch]:
        sessions = stores["sessions"]
        late_before = sessions.observed_stream_time  # the previous batch's watermark
        for batch in batches:
            kept = [
                (u, t)
                for u, t in zip(batch.column("user").to_pylist(), batch.column("ts").to_pylist())
                if not sessions.is_late(t, late_before)
            ]
            sessions.merge_batch([u for u, _ in kept], [t for _, t in kept], [1] * len(kept), _add)
        closed = sessions.close_sessions(stores.watermark)
        yield pa.RecordBatch.from_pydict(
            {
                "user": [w.key for w, _ in closed],
                "session_start": [w.start for w, _ in closed],
                "session_end": [w.end + gap_ms for w, _ in closed],
                "events": [n for _, n in closed],
            },
            schema=pa.schema(
                [
                    ("user", pa.string()),
                    ("session_start", pa.int64()),
                    ("session_end", pa.int64()),
                    ("events", pa.int64()),
                ]
            ),
        )

    return run


def _per_partition(spark: Any, workdir: str, gap_ms: int, name: str) -> Any:
    """(d) started into `output-{name}`: the input repartitioned by user into 2, `mapInArrow`."""
    declared = [Session("sessions", Serdes.string(), Serdes.int64(), gap=gap_ms)]
    fn = partition_function(
        partition_sessions(gap_ms),
        os.path.join(workdir, f"checkpoint-{name}"),
        declared,
        partitions=2,
        emit_changes=False,
        spark=spark,
    )
    frame = events(spark, os.path.join(workdir, "input")).repartition(2, "user").mapInArrow(fn, OUTPUT_SCHEMA)
    return sink(frame, workdir, name)


def _closing_files(input_dir: str, first: int) -> None:
    """Two files of one event each, far later than the rest: the batch after the second
    runs at a watermark past every other session's end, so every query closes them all
    (a query without state in Spark's eyes, (d), runs no batch without data)."""
    for n in (first, first + 1):
        path = os.path.join(input_dir, f"{n:05d}.json")
        pd.DataFrame({"user": ["~later"], "ts": [LATER]}).to_json(path, orient="records", lines=True)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))


def _grouped(spark: Any, workdir: str, processor: Any, gap_ms: int, name: str) -> Any:
    """`processor` per user over the input (its watermark on each event's own session end),
    started into `output-{name}`."""
    frame = (
        events(spark, os.path.join(workdir, "input"), gap_ms)
        .groupBy("user")
        .transformWithStateInPandas(processor, OUTPUT_SCHEMA, "Append", "EventTime")
    )
    return sink(frame, workdir, name)


def _timed(start: Any, workdir: str, name: str) -> float:
    """Wall time of the availableNow query `start()` starts (into `output-{name}`), from a
    fresh checkpoint and output."""
    for part in ("output", "checkpoint"):
        shutil.rmtree(os.path.join(workdir, f"{part}-{name}"), ignore_errors=True)
    started = time.perf_counter()
    query = start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{name} failed: {query.exception()}")
    return seconds


def _sessions(spark: Any, workdir: str, name: str) -> pd.DataFrame:
    frame = spark.read.parquet(os.path.join(workdir, f"output-{name}")).toPandas()
    return frame[COLUMNS].sort_values(COLUMNS).reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=4, help="micro-batches (one input file each)")
    parser.add_argument("--gap-ms", type=int, default=3_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-spark-sessions-")
    spark = _builder().config("spark.sql.shuffle.partitions", "2").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        warmup = os.path.join(workdir, "warmup")
        generate(os.path.join(warmup, "input"), 2, 500, users=50)
        session_counts.run(spark, warmup, args.gap_ms)
        generate(os.path.join(workdir, "input"), args.files, args.rows // args.files, users=args.users)
        _closing_files(os.path.join(workdir, "input"), args.files)
        rows = args.files * (args.rows // args.files) + 2
        gap = args.gap_ms
        queries = [
            (
                "(0) transformWithStateInPandas without state (floor)",
                "floor",
                lambda: _grouped(spark, workdir, NoState(), gap, "floor"),
            ),
            (
                "(a) Session store in transformWithStateInPandas",
                "store",
                lambda: _grouped(
                    spark,
                    workdir,
                    SessionCounts(os.path.join(workdir, "checkpoint-store"), gap_ms=gap, spark=spark),
                    gap,
                    "store",
                ),
            ),
            (
                "(b) merged by hand over transformWithStateInPandas ListState",
                "kv",
                lambda: _grouped(spark, workdir, ListStateSessions(gap), gap, "kv"),
            ),
            ("(c) Spark SQL session_window", "sql", lambda: spark_sql_query(spark, workdir, gap)),
            (
                "(d) Session store per partition (mapInArrow, merge_batch)",
                "partition",
                lambda: _per_partition(spark, workdir, gap, "partition"),
            ),
        ]
        best: dict[str, float] = {}
        for _ in range(args.repeats):
            for label, name, start in queries:
                seconds = _timed(start, workdir, name)
                best[label] = min(best.get(label, float("inf")), seconds)
                print(f"{label}: {seconds:.1f} s", flush=True)
        results = {label: rows / seconds for label, seconds in best.items()}
        found = {name: _sessions(spark, workdir, name) for name in ("store", "kv", "sql", "partition")}
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if found["store"].empty:
        sys.exit("no query closed a session: nothing to compare (more events, or a smaller gap)")
    for name in ("kv", "sql", "partition"):
        if not found["store"].equals(found[name]):
            sys.exit(
                f"the session store and {name} emitted different sessions "
                f"({len(found['store'])} and {len(found[name])})"
            )
    labels = [label for label, _, _ in queries]
    floor, ours, kv = (results[labels[i]] for i in range(3))
    print(
        f"\n{rows:,} rows, {args.users:,} users, {args.files} micro-batches, gap {args.gap_ms} ms, local[2], "
        f"2 shuffle partitions; {len(found['store']):,} closed sessions, the same from each query"
    )
    print_table(
        ["query", "rows/s", "vs (a)"], [[label, rate, rate / ours] for label, rate in results.items()]
    )
    for label, rate in (("(a)", ours), ("(b)", kv)):
        print(
            f"{label} time per event above the no-state floor: {max(0.0, 1 / rate - 1 / floor) * 1e6:.1f} us"
        )
    partition, sql_rate = results[labels[4]], results[labels[3]]
    print(
        f"in one operator, transformWithStateInPandas: session store / hand-written merge over its ListState "
        f"rows per second = {ours / kv:.2f}"
    )
    print(
        f"(d) per partition: {partition / ours:.2f}x (a), {partition / sql_rate:.2f}x Spark SQL's session_window"
    )
    print(
        f"headline: session store per partition / hand-written merge over TWS ListState rows per second = "
        f"{partition / kv:.2f}"
    )


if __name__ == "__main__":
    main()
