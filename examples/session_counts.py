"""Sessions per user with spark_statestore's session store, exactly once.

Counts each user's events in sessions: events at most `gap` apart belong to one session
(Spark SQL's `session_window` semantics: the session of events from `start` to `last` is
the window [start, last + gap)). The sessions live in a RocksDB session store in the
Python worker (`Session(...)` in `transformWithStateInPandas`); a record is merged into
the sessions within its gap (`merge`), and a session's count is written once, when the
watermark closed it (an event-time timer at its end + gap). Events too late to join or
start a session are dropped, as Spark SQL drops them (the watermark is on each event's own
session end: see `events`).

Run it with no arguments: it generates files of events (some late), processes them on a
local Spark, then runs Spark SQL's `session_window` aggregation over the same input and
shows that both give the same sessions::

    python examples/session_counts.py --workdir /tmp/session_counts
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
from typing import Any, Iterator

import pandas as pd

from spark_statestore import Serdes
from spark_statestore.spark import Session, StoreProcessor, epoch_millis

INPUT_SCHEMA = "user string, ts long"
OUTPUT_SCHEMA = "user string, session_start long, session_end long, events long"
WATERMARK_MS = 4_000


def _add(a: int, b: int) -> int:
    return a + b


class SessionCounts(StoreProcessor):
    """Events per user session (see module docstring)."""

    def __init__(self, checkpoint_location: str, *, gap_ms: int = 3_000, spark: Any = None) -> None:
        self.gap_ms = gap_ms
        self.stores = [Session("sessions", Serdes.string(), Serdes.int64(), gap=gap_ms)]
        super().__init__(checkpoint_location, spark=spark)

    def process_rows(
        self, key: Any, rows: Iterator[pd.DataFrame], timer_values: Any
    ) -> Iterator[pd.DataFrame]:
        user = key[0]
        sessions = self.store("sessions")
        # an event is late by the watermark the previous batch ended with (Spark's watermark
        # for late events: the store's stream time on the watermark clock; `events` has
        # Spark drop these already); this batch's watermark closes sessions (the timers)
        late_before = sessions.observed_stream_time
        times = sorted(t for frame in rows for t in epoch_millis(frame["ts"]).tolist())
        closing = set()
        for time in times:
            if sessions.is_late(time, late_before):
                continue  # its session was closed before this batch: Spark SQL drops it too
            window, _ = sessions.merge(user, time, 1, _add)
            closing.add(window.end + self.gap_ms)
        timers = set(self.handle.listTimers())
        for expiry in closing - timers:
            self.handle.registerTimer(expiry)
        return iter(())

    def process_timer(self, key: Any, timer_values: Any, expired_timer_info: Any) -> Iterator[pd.DataFrame]:
        user = key[0]
        sessions = self.store("sessions")
        watermark = timer_values.getCurrentWatermarkInMs()
        closed = [(w, n) for w, n in sessions.fetch(user) if w.end + self.gap_ms <= watermark]
        for window, _ in closed:
            sessions.remove(user, window.start, window.end)
        if closed:
            rows = [(user, w.start, w.end + self.gap_ms, n) for w, n in closed]
            yield pd.DataFrame(rows, columns=["user", "session_start", "session_end", "events"])


def generate(input_dir: str, files: int, events_per_file: int, users: int = 20, seed: int = 11) -> None:
    """Files of (user, ts) events: 5 s of event time per file over `users` users (a few
    events per user and file: some come within the gap of each other, some do not); about
    5% of the events late by 2 to 12 s. File n's modification
    time is n seconds after a fixed point, so the file source reads them in order."""
    rng = random.Random(seed)
    os.makedirs(input_dir, exist_ok=True)
    for n in range(files):
        rows = []
        for _ in range(events_per_file):
            ts = 1_000 + n * 5_000 + rng.randrange(5_000)
            if rng.random() < 0.05:
                ts = max(1, ts - rng.randrange(2_000, 12_000))
            rows.append((f"user-{rng.randrange(users)}", ts))
        temp = os.path.join(input_dir, f".{n:05d}.json.tmp")
        pd.DataFrame(rows, columns=["user", "ts"]).to_json(temp, orient="records", lines=True)
        os.utime(temp, (1_000_000 + n, 1_000_000 + n))
        os.replace(temp, os.path.join(input_dir, f"{n:05d}.json"))


def events(spark: Any, input_dir: str, gap_ms: int = 0) -> Any:
    """The input as a stream, its watermark `WATERMARK_MS` behind the largest event time.

    Spark's `session_window` drops an event whose own session, [ts, ts + gap), ended by
    the previous batch's watermark; `transformWithState` drops a row whose watermarked
    column is at or below that watermark. So, for the session store, `gap_ms` puts the
    watermark on each event's own session end (`ts + gap`) with the delay widened by the
    gap: the same watermarks as Spark SQL's, and the same events dropped."""
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(input_dir)
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    if not gap_ms:
        return frame.withWatermark("event_time", f"{WATERMARK_MS} milliseconds")
    return frame.withColumn("own_session_end", F.timestamp_millis(F.col("ts") + gap_ms)).withWatermark(
        "own_session_end", f"{WATERMARK_MS + gap_ms} milliseconds"
    )


def session_store_query(spark: Any, workdir: str, processor: SessionCounts) -> Any:
    """Sessions counted with the session store."""
    counts = (
        events(spark, os.path.join(workdir, "input"), processor.gap_ms)
        .groupBy("user")
        .transformWithStateInPandas(processor, OUTPUT_SCHEMA, "Append", "EventTime")
    )
    return sink(counts, workdir, "store")


def spark_sql_query(spark: Any, workdir: str, gap_ms: int) -> Any:
    """The same sessions by Spark SQL's `session_window` aggregation."""
    from pyspark.sql import functions as F

    counts = (
        events(spark, os.path.join(workdir, "input"))
        .groupBy("user", F.session_window("event_time", f"{gap_ms} milliseconds").alias("s"))
        .agg(F.count("*").alias("events"))
        .select(
            "user",
            F.unix_millis("s.start").alias("session_start"),
            F.unix_millis("s.end").alias("session_end"),
            "events",
        )
    )
    return sink(counts, workdir, "sql")


def sink(frame: Any, workdir: str, name: str) -> Any:
    """`frame` started into parquet at `output-{name}` (availableNow, checkpoint `checkpoint-{name}`)."""
    return (
        frame.writeStream.format("parquet")
        .outputMode("append")
        .option("path", os.path.join(workdir, f"output-{name}"))
        .option("checkpointLocation", os.path.join(workdir, f"checkpoint-{name}"))
        .trigger(availableNow=True)
        .start()
    )


def run(spark: Any, workdir: str, gap_ms: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both queries over the input in `workdir`; their sessions, sorted."""
    processor = SessionCounts(os.path.join(workdir, "checkpoint-store"), gap_ms=gap_ms, spark=spark)
    for query in (session_store_query(spark, workdir, processor), spark_sql_query(spark, workdir, gap_ms)):
        query.awaitTermination()
    columns = ["user", "session_start", "session_end", "events"]
    out = []
    for name in ("store", "sql"):
        frame = spark.read.parquet(os.path.join(workdir, f"output-{name}")).toPandas()
        out.append(frame[columns].sort_values(columns).reset_index(drop=True))
    return out[0], out[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", default=os.path.abspath("out/session_counts"))
    parser.add_argument("--files", type=int, default=8, help="input files to generate (one per micro-batch)")
    parser.add_argument("--events-per-file", type=int, default=60)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--gap-ms", type=int, default=3_000)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    shutil.rmtree(args.workdir, ignore_errors=True)
    generate(os.path.join(args.workdir, "input"), args.files, args.events_per_file, args.users)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName("session_counts")
        .master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    store, sql = run(spark, args.workdir, args.gap_ms)
    print(f"{len(store)} closed sessions from the session store, {len(sql)} from Spark SQL's session_window")
    print(store.head(10).to_string(index=False))
    print("same sessions:", store.equals(sql))
    spark.stop()


if __name__ == "__main__":
    main()
