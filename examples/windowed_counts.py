"""Windowed event counts with spark_statestore window stores, exactly once.

Counts events per key in tumbling (10 s) and sliding (30 s, every 10 s) event-time windows
with a 5 s grace period, in `transformWithStateInPandas`. Each count lives in a RocksDB
window store in the Python worker; a window's final count is written once, when the
watermark passes its end plus the grace period (an event-time timer), and an event's windows
closed by then are dropped and counted in the metrics: the windows Spark SQL's window
aggregation gives with a watermark delay of this job's delay plus the grace period (see
`watermarked`).

Run it with no arguments (`./dev example`): it generates a stream of files with event times
and some late events, processes it on a local Spark and stops when the input is done. It
also runs under spark-submit::

    spark-submit examples/windowed_counts.py --workdir /tmp/windowed_counts

`--continuous` keeps generating input and processing it until interrupted.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import threading
import time
from typing import Any, Iterator

import numpy as np
import pandas as pd

from spark_statestore import Serdes

from spark_statestore.spark import StoreProcessor, Window, check_columns, compat, epoch_millis

OUTPUT_SCHEMA = "key string, kind string, window_start long, window_end long, count long"
INPUT_SCHEMA = "key string, ts long"
DELAY_MS = 10_000  # the watermark's delay behind the largest event time


class WindowedCounts(StoreProcessor):
    """Counts per key in tumbling and sliding windows; emits each window once, when closed."""

    def __init__(
        self,
        checkpoint_location: str,
        *,
        tumbling_ms: int = 10_000,
        sliding_ms: int | None = 30_000,
        slide_ms: int = 10_000,
        grace_ms: int = 5_000,
        time_column: str = "ts",
        spark: Any = None,
    ) -> None:
        self.windows = {"tumbling": (tumbling_ms, tumbling_ms)}
        if sliding_ms is not None:  # None: tumbling windows only
            if sliding_ms % slide_ms:
                raise ValueError(f"sliding_ms must be a multiple of slide_ms, got {sliding_ms} and {slide_ms}")
            self.windows["sliding"] = (sliding_ms, slide_ms)
        self.grace_ms = grace_ms
        self.time_column = time_column
        # retention = size + grace: with the watermark clock a window stays until its timer fired
        self.stores = [
            Window(kind, size + grace_ms, size, key_serde=Serdes.string(), value_serde=Serdes.int64())
            for kind, (size, _) in self.windows.items()
        ]
        super().__init__(checkpoint_location, spark=spark)
        # an event counts in its windows until the last of them closes: at most this long
        # after its event time (a window [start, start + size) holding it ends by ts + size)
        self.lateness_ms = max(size for size, _ in self.windows.values()) + grace_ms
        from pyspark.sql import SparkSession

        session = spark or SparkSession.getActiveSession()
        # windows written, for progress lines (a Spark Connect session has no accumulators)
        self.emitted = None if compat.is_connect(session) else session.sparkContext.accumulator(0)

    def process_rows(self, key: Any, rows: Iterator[pd.DataFrame], timer_values: Any) -> Iterator[pd.DataFrame]:
        name = key[0]
        if name is None:
            raise ValueError("windowed_counts input column 'key' has null values")
        frame = pd.concat(list(rows), ignore_index=True)
        check_columns(frame, {self.time_column: "integer"}, where="windowed_counts input")
        times = epoch_millis(frame[self.time_column])
        if (times < 0).any():
            raise ValueError(f"windowed_counts input column {self.time_column!r} has negative event times")
        timers: set[int] | None = None  # the key's timers, asked once (sliding and tumbling
        # windows can end at the same time, and Spark warns when a timer is registered twice)
        for kind, (size, slide) in self.windows.items():
            store = self.store(kind)
            live_after = store.observed_stream_time - store.retention_period
            first = times - times % slide
            starts = np.concatenate([first - j * slide for j in range(size // slide)])
            starts = starts[starts >= 0]
            for start, count in zip(*np.unique(starts, return_counts=True), strict=True):
                start, count = int(start), int(count)
                if start <= live_after:
                    store.put(name, count, start)  # late: the store drops and counts it
                    continue
                current = store.get(name, start)
                store.put(name, (current or 0) + count, start)
                expiry = start + size + self.grace_ms
                if current is None:  # a new window needs its timer
                    timers = set(self.handle.listTimers()) if timers is None else timers
                    if expiry not in timers:
                        self.handle.registerTimer(expiry)
                        timers.add(expiry)
        return iter(())

    def process_timer(self, key: Any, timer_values: Any, expired_timer_info: Any) -> Iterator[pd.DataFrame]:
        expiry = expired_timer_info.getExpiryTimeInMs()
        name = key[0]
        out = []
        for kind, (size, _) in self.windows.items():
            start = expiry - self.grace_ms - size
            store = self.store(kind)
            count = store.get(name, start) if start >= 0 else None
            if count:
                out.append((name, kind, start, start + size, count))
                store.put(name, None, start)  # emitted: nothing needs it any more
        if out:
            if self.emitted is not None:
                self.emitted.add(len(out))
            yield pd.DataFrame(out, columns=["key", "kind", "window_start", "window_end", "count"])


def generate(input_dir: str, files: int, events_per_file: int, keys: int = 8, seed: int = 7, start: int = 0) -> None:
    """Files of events: event time advances ~10 s per file from 1 ms after the epoch; 5% of
    events are late by up to 40 s (those that would fall at or before the epoch stay on time:
    Spark's first watermark is the epoch, so they would be dropped before any lateness).
    File n's modification time is n seconds after a fixed point, so a streaming file source
    (which goes by modification time) reads them in order even when they are written within
    one clock tick."""
    rng = random.Random(seed + start)
    os.makedirs(input_dir, exist_ok=True)
    for n in range(start, start + files):
        rows = tick_events(rng, n, events_per_file, keys)
        temp = os.path.join(input_dir, f".{n:05d}.json.tmp")
        pd.DataFrame(rows, columns=["key", "ts"]).to_json(temp, orient="records", lines=True)
        os.utime(temp, (1_000_000 + n, 1_000_000 + n))  # the file source takes files by modification time
        os.replace(temp, os.path.join(input_dir, f"{n:05d}.json"))


def tick_events(rng: random.Random, tick: int, count: int, keys: int) -> list[tuple[str, int]]:
    """`count` (key, event time) events of one tick: 10 s of event time from tick * 10 s +
    1 ms, 5% of them late by 5 to 40 s (those that would fall at or before the epoch stay
    on time)."""
    rows = []
    for _ in range(count):
        ts = tick * 10_000 + 1 + rng.randrange(9_999)
        if rng.random() < 0.05:
            late = ts - rng.randrange(5_000, 40_000)
            ts = late if late > 0 else ts
        rows.append((f"sensor-{rng.randrange(keys)}", ts))
    return rows


def watermarked(events: Any, processor: WindowedCounts, delay_ms: int = DELAY_MS) -> Any:
    """`events` with the query's watermark, `delay_ms` behind the largest event time.

    Spark drops an input row of transformWithState whose watermarked column is at or
    before the previous batch's watermark, while Spark SQL's window aggregation drops a
    row from a window only when that window ended by then (each of a row's windows on its
    own). So the watermark is on `window_close`, the event time plus the processor's
    `lateness_ms`, with the delay widened by as much (the same watermarks): Spark drops
    only events whose windows all closed, and the window stores drop the closed windows of
    the others."""
    from pyspark.sql import functions as F

    return events.withColumn(
        "window_close", F.timestamp_millis(F.col(processor.time_column) + processor.lateness_ms)
    ).withWatermark("window_close", f"{delay_ms + processor.lateness_ms} milliseconds")


def build_query(spark: Any, workdir: str, processor: WindowedCounts, trigger: dict, checkpoint: str | None = None) -> Any:
    """The query: input files under `workdir`, output there too, the checkpoint there or at
    `checkpoint` (an `s3a://` location, say)."""
    events = watermarked(
        spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(os.path.join(workdir, "input")),
        processor,
    )
    counts = events.groupBy("key").transformWithStateInPandas(
        processor, OUTPUT_SCHEMA, "Append", "EventTime"
    )
    return (
        counts.writeStream.format("parquet")
        .option("path", os.path.join(workdir, "output"))
        .option("checkpointLocation", checkpoint or os.path.join(workdir, "checkpoint"))
        .trigger(**trigger)
        .queryName("windowed_counts")
        .start()
    )


class Progress:
    """Prints one line per micro-batch as the query runs: input rows, rows written to state,
    windows emitted, late events Spark dropped behind the watermark (all their windows had
    closed), updates of closed windows the window stores dropped (one per key, window and
    batch: the windows of a late event some of whose windows were still open), and the
    state's open and prepare times (slowest task)."""

    def __init__(self, spark: Any, processor: WindowedCounts) -> None:
        from pyspark.sql.streaming.listener import StreamingQueryListener

        printer = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                printer.batch(event.progress)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.spark = spark
        self.processor = processor
        self.emitted = 0
        self.listener = _Listener()
        spark.streams.addListener(self.listener)

    def batch(self, progress: Any) -> None:
        metrics = self.processor.metrics.recent(1000)
        mine = metrics[metrics["batch_id"] == progress.batchId] if not metrics.empty else metrics
        row = mine.iloc[-1] if not mine.empty else None
        late = sum(int(op.numRowsDroppedByWatermark or 0) for op in (progress.stateOperators or []))
        closed = 0 if row is None else int(row["dropped_records"])
        state = (
            f"state rows written {int(row['rows_written']):>6}, open {row['open_seconds'] * 1000:5.0f} ms, "
            f"prepare {row['prepare_seconds'] * 1000:5.0f} ms"
            if row is not None
            else "no state task ran"
        )
        emitted, self.emitted = self.processor.emitted.value - self.emitted, self.processor.emitted.value
        print(
            f"batch {progress.batchId:>3}: {progress.numInputRows:>6} input rows, {emitted:>5} windows emitted, "
            f"{late:>4} late events and {closed:>4} closed-window updates dropped, {state}",
            flush=True,
        )

    def stop(self) -> None:
        """Stop printing, once the progress events Spark already queued were printed."""
        from spark_statestore.spark.compat import drain_listener_bus

        drain_listener_bus(self.spark)
        self.spark.streams.removeListener(self.listener)


def session_builder(master: str | None) -> Any:
    """The job's SparkSession builder: local defaults when run with python, spark-submit's
    settings when run under it (only the state store provider TWS needs is added)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("windowed_counts").config(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = (
            builder.master(master or "local[*]")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.adaptive.enabled", "false")  # stateful queries run without it anyway
            .config("spark.ui.showConsoleProgress", "false")
        )
    return builder


def session(master: str | None) -> Any:
    """The job's SparkSession (see session_builder)."""
    return session_builder(master).getOrCreate()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=os.path.abspath("out/windowed_counts"),
                        help="input, output and checkpoint go here (default: ./out/windowed_counts)")
    parser.add_argument("--files", type=int, default=12, help="input files to generate (one per micro-batch)")
    parser.add_argument("--events-per-file", type=int, default=2_000)
    parser.add_argument("--continuous", action="store_true", help="keep generating and processing until Ctrl-C")
    parser.add_argument("--fresh", action="store_true", help="delete the workdir first")
    parser.add_argument("--master", default=None, help="Spark master (default: local[*] unless spark-submit sets one)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.fresh:
        shutil.rmtree(args.workdir, ignore_errors=True)
    input_dir = os.path.join(args.workdir, "input")
    existing = len([n for n in os.listdir(input_dir) if n.endswith(".json")]) if os.path.isdir(input_dir) else 0
    if existing:
        print(f"resuming: {args.workdir} holds {existing} input files and the query's checkpoint; this run adds "
              f"{args.files} more and goes on from the committed state (--fresh starts over)")
    generate(input_dir, args.files, args.events_per_file, start=existing)

    spark = session(args.master)
    spark.sparkContext.setLogLevel("WARN")
    processor = WindowedCounts(os.path.join(args.workdir, "checkpoint"))
    print(f"input:      {input_dir}")
    print(f"output:     {os.path.join(args.workdir, 'output')}  (parquet)")
    print(f"checkpoint: {os.path.join(args.workdir, 'checkpoint')}  (state under statestore/)")
    progress = Progress(spark, processor)
    if args.continuous:
        stop = threading.Event()

        def feed() -> None:
            n = existing + args.files
            while not stop.wait(2.0):
                generate(input_dir, 1, args.events_per_file, start=n)
                n += 1

        threading.Thread(target=feed, daemon=True).start()
        query = build_query(spark, args.workdir, processor, {"processingTime": "2 seconds"})
        try:
            while query.isActive:
                time.sleep(1)
        except KeyboardInterrupt:
            stop.set()
            query.stop()
    else:
        query = build_query(spark, args.workdir, processor, {"availableNow": True})
        query.awaitTermination()
    progress.stop()
    output = spark.read.parquet(os.path.join(args.workdir, "output"))
    print(f"\n{output.count()} final window counts, for example:")
    output.orderBy("window_start", "kind", "key").show(8, truncate=False)
    metrics = processor.metrics.recent(100)
    if not metrics.empty:
        late, closed = int(metrics["rows_dropped_by_watermark"].fillna(0).sum()), int(metrics["dropped_records"].sum())
        print(f"batches: {len(metrics)}, rows written to state: {int(metrics['rows_written'].sum())}, "
              f"late events dropped: {late}, closed-window updates dropped: {closed}")
    spark.stop()


if __name__ == "__main__":
    main()
