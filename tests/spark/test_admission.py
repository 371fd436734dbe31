"""Adaptive admission on real queries (a classic session's, and a Spark Connect client's on a
server started with the plugin): a burst of files is cut into batches whose largest task
stays near `spark.statestore.uncommitted.maxBytes`, drained back to back (each batch cut
short wakes the next), with the result of the batch reference, also across a restart in the
middle; the limit loosens again after a crossing batch; the setting is checked.

The queries use a century-long processing-time interval: batch 0 runs at start, every other
batch only because something woke the query, so "cut short is followed at once" is what
makes the burst drain, and no test waits on time."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle
from shim_queries import INTERVAL, gated, shim_session, wait_until

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StateStoreMetrics, compat, partition_function
from spark_statestore.spark.batch_facts import parse_batch_facts
from spark_statestore.spark.driver.settings import ADMISSION, StateStoreSettings

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROWS = 400  # rows per file, each a key of its own
LIMIT = 160_000  # uncommitted bytes per task: about four files' worth
STORES = [KeyValue("counts", Serdes.string(), Serdes.int64())]


def counts(batches, stores):
    """Running count per key; yields each key's new count."""
    table = stores["counts"]
    for batch in batches:
        grouped = pa.Table.from_batches([batch]).group_by("key").aggregate([("key", "count")])
        keys = grouped.column("key")
        current = np.array([c or 0 for c in table.get_all(keys)], dtype=np.int64)
        new = current + grouped.column("key_count").to_numpy()
        table.put_columns(keys, new)
        yield pa.RecordBatch.from_arrays([keys.combine_chunks(), pa.array(new)], ["key", "count"])


class Burst:
    """Input files of distinct keys (a key repeats in every tenth file), a counting query
    over them writing parquet, and the driver's batch files (under `root`: a new one, or one
    another driver process left)."""

    def __init__(self, root: Path) -> None:
        self.input, self.output = root / "input", root / "output"
        self.checkpoint = str(root / "checkpoint")
        self.input.mkdir(parents=True, exist_ok=True)
        self.files = len(list(self.input.glob("*.parquet")))

    def add(self, files: int) -> None:
        for _ in range(files):
            keys = [f"k{(self.files % 10) * ROWS + i:06d}" for i in range(ROWS)]
            staged = self.input.parent / "staged.parquet"
            pq.write_table(pa.table({"key": keys}), staged)
            os.replace(staged, self.input / f"{self.files:04d}.parquet")
            self.files += 1

    def source(self, session):
        return session.readStream.schema("key string").parquet(str(self.input))

    def start(self, session, hold=None, **trigger):
        """The counting query, with `trigger` (default: the century interval); `hold`: a
        `shim_queries.gate` its input passes through first (before any state is touched)."""
        fn = partition_function(counts, self.checkpoint, STORES, partitions=2, emit_changes=False, spark=session)
        frame = self.source(session)
        if hold is not None:
            frame = frame.mapInPandas(hold, "key string")
        return (
            frame.repartition(2, "key").mapInArrow(fn, "key string, count long").writeStream.format("parquet")
            .option("path", str(self.output)).option("checkpointLocation", self.checkpoint)
            .trigger(**(trigger or {"processingTime": INTERVAL})).start()
        )

    def facts(self, batch: int):
        path = Path(self.checkpoint) / "statestore" / "_batches" / f"{batch}.json"
        return parse_batch_facts(path.read_bytes(), batch) if path.exists() else None

    def processed(self, query) -> int:
        return sum(p.numInputRows for p in query.recentProgress)  # a Connect client's may lack the key

    def drained(self, query, rows: int, what: str, timeout: float = 300) -> int:
        """Waits until the query processed `rows` rows and the driver wrote the file of its
        last batch (after the progress Spark reports); returns that batch. `timeout` bounds a
        hang (several batches, each a Spark job: minutes on a loaded machine)."""
        wait_until(lambda: self.processed(query) == rows and self.facts(query.lastProgress["batchId"]) is not None,
                   timeout=timeout, what=what)
        return query.lastProgress["batchId"]


@pytest.fixture(scope="module")
def session(classic_spark):
    child = shim_session(classic_spark)
    child.conf.set("spark.statestore.uncommitted.maxBytes", str(LIMIT))
    child.conf.set("spark.statestore.cache.maxBytes", "0")
    yield child
    for query in child.streams.active:
        query.stop()


def peaks(checkpoint: str) -> dict[int, int]:
    """The largest task peak of uncommitted bytes per batch."""
    tasks = StateStoreMetrics(checkpoint).tasks()
    return tasks.groupby("batch_id")["uncommitted_bytes_peak"].max().to_dict()


def reference(session, burst: Burst) -> dict[str, int]:
    rows = session.read.parquet(str(burst.input)).groupBy("key").count().collect()
    return {r["key"]: r["count"] for r in rows}


class KafkaBurst(Burst):
    """The burst's rows as records of a Kafka topic of 3 partitions (a "file" is ROWS
    records), read by Spark's Kafka source with the user's `maxOffsetsPerTrigger`."""

    def __init__(self, root: Path, kafka, max_offsets: int) -> None:
        from conftest import topic_name

        self.kafka, self.max_offsets, self.topic = kafka, max_offsets, topic_name("burst")
        self.output, self.checkpoint, self.files = root / "output", str(root / "checkpoint"), 0
        kafka.create_topic(self.topic, 3)

    def add(self, files: int) -> None:
        for _ in range(files):
            keys = [f"k{(self.files % 10) * ROWS + i:06d}" for i in range(ROWS)]
            self.kafka.produce(self.topic, [(key, key, 0) for key in keys])
            self.files += 1

    def source(self, session):
        from pyspark.sql import functions as F

        return (session.readStream.format("kafka").option("kafka.bootstrap.servers", self.kafka.bootstrap)
                .option("subscribe", self.topic).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", self.max_offsets).load()
                .select(F.col("value").cast("string").alias("key")))

    def reference(self) -> dict[str, int]:
        from collections import Counter

        return dict(Counter(record.value.decode() for record in self.kafka.records(self.topic)))


def result(session, burst: Burst) -> dict[str, int]:
    """The last count of each key the query wrote, checking no count was written twice."""
    rows = session.read.parquet(str(burst.output)).collect()
    written = [(r["key"], r["count"]) for r in rows]
    assert len(written) == len(set(written)), "a count was written twice"
    final: dict[str, int] = {}
    for key, count in written:
        final[key] = max(final.get(key, 0), count)
    return final


def crossed_in_flight(facts) -> bool:
    """A batch whose task crossed the limit while it ran: its successor starts the moment it
    ends, before the driver has set the successor's limit from it (the only case where a
    batch runs under an older limit; the governor's end-of-batch decisions come after the
    limit is set)."""
    return facts.early_trigger is not None and facts.early_trigger.source == "in_flight"


def within_limits(facts: list) -> None:
    """Each batch admitted at most the limit set after the batch before, but for the in-flight
    case (`crossed_in_flight`). A wake that reaches the query after the batch it was meant to
    start began (the end-of-batch wake of a batch that crossed in flight) is dropped, so it
    cannot start the batch after under an older limit."""
    for n in range(1, len(facts)):
        if crossed_in_flight(facts[n - 1]):
            continue  # it started as the batch before ended, under the limit set before
        assert facts[n].admission[0].admitted <= facts[n - 1].admission[0].limit, (n, summary(facts))


def summary(facts: list) -> list[tuple]:
    """(batch, admitted, limit set after it, crossed in flight) per batch, for a failure message."""
    return [(n, f.admission[0].admitted, f.admission[0].limit, crossed_in_flight(f)) for n, f in enumerate(facts)]


def drain_a_burst(session, root: Path, wake_query) -> None:
    """The burst of both kinds of session: batch 0 over one file sets the first limit; 24 more
    files, and `wake_query(query)` starts the next batch (under the century interval nothing
    else would). The burst is cut into at least three batches, each within the limit set after
    the batch before, its largest task within 1.25x the uncommitted limit; every batch but the
    last was cut short, and the burst drained with no other wake (each cut short batch was
    followed at once); `metrics.recent()` has the admission decisions of the driver's files,
    and the output is the batch reference's."""
    burst = Burst(root)
    burst.add(1)
    query = burst.start(session)
    wait_until(lambda: burst.facts(0) is not None, what="batch 0 and its file")
    first = burst.facts(0).admission
    assert len(first) == 1 and first[0].unit == "files" and first[0].admitted == 1 and first[0].limit >= 1
    assert first[0].reason.startswith("set: ")
    burst.add(24)
    wake_query(query)
    last = burst.drained(query, 25 * ROWS, "the burst drained by wakes alone")
    batches = [burst.facts(b) for b in range(1, last + 1)]
    admitted = [f.admission[0].admitted for f in batches]
    assert sum(admitted) == 24 and len(admitted) >= 3, admitted
    every = [burst.facts(0)] + batches
    within_limits(every)
    for n in range(1, len(every)):
        if not crossed_in_flight(every[n - 1]):
            # a batch that took its whole limit was cut short (and woke the next)
            assert every[n].admission[0].cut_short == (every[n].admission[0].admitted == every[n - 1].admission[0].limit)
    assert all(f.admission[0].cut_short for f in batches[:-1])
    by_batch = peaks(burst.checkpoint)
    assert max(by_batch[b] for b in range(1, len(batches) + 1)) <= 1.25 * LIMIT, by_batch
    columns = ["admission_limit", "admission_cut_short", "admission_reason"]
    recent = StateStoreMetrics(burst.checkpoint).recent(100).set_index("batch_id")[columns]
    files = {b: {c: burst.facts(b).metrics()[c] for c in columns} for b in range(last + 1)}
    assert recent.to_dict("index") == files
    query.stop()
    assert result(session, burst) == reference(session, burst)


@pytest.mark.versioned  # the per-minor facts (ReadLimits.java): the limit map, the file source's log
@pytest.mark.spark
def test_a_burst_is_cut_into_bounded_batches_drained_back_to_back(session, tmp_path):
    from spark_statestore.spark.driver.jvm import wake

    def wake_query(query) -> None:
        assert wake(session, str(query.id))

    drain_a_burst(session, tmp_path, wake_query)


@pytest.mark.spark  # on the newest minor: each minor's admission is the classic test's, its plugin start the shim's
def test_a_burst_is_cut_into_bounded_batches_over_spark_connect(tmp_path):
    """The same burst from a Spark Connect client, on a Connect server started with the
    plugin and the limits in its conf. The client has no JVM to wake the query with: it sends
    the crossing signal a task of batch 0 would (to the receiver the driver publishes in its
    conf), which wakes the query once; the rest is the driver's admission."""
    pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect]")
    from connect_server import with_shim

    from spark_statestore.spark.signals import CROSSING, SECRET_KEY, TARGET_KEY, Signal, SignalTarget, send

    conf = {"spark.statestore.uncommitted.maxBytes": str(LIMIT), "spark.statestore.cache.maxBytes": "0"}
    with with_shim(str(tmp_path / "connect"), conf) as server:
        session = server.session()
        try:
            target = SignalTarget.parse(session.conf.get(TARGET_KEY), session.conf.get(SECRET_KEY))

            def wake_query(query) -> None:
                no_tasks = 1 << 62  # a task attempt id no task of the query has
                assert send(target, Signal(CROSSING, str(query.id), 0, 0, no_tasks, LIMIT + 1, LIMIT))

            drain_a_burst(session, tmp_path / "burst", wake_query)
        finally:
            session.stop()


@pytest.mark.kafka
@pytest.mark.spark
def test_a_kafka_burst_is_cut_into_bounded_batches_under_the_users_max_offsets(session, kafka, tmp_path):
    """Spark's Kafka source (`ReadLimit.maxRows`): batch 0 reads one file's worth of records
    and sets the first limit; a burst of 24 times that, produced at once, is cut into batches
    of at most the limit set after the batch before, drained back to back by the governor's
    wakes, each task's uncommitted peak within 1.25x the limit, the user's
    `maxOffsetsPerTrigger` an upper bound of every batch; the counts are the topic's."""
    from spark_statestore.spark.driver.jvm import wake

    user_max = 8 * ROWS
    burst = KafkaBurst(tmp_path, kafka, user_max)
    burst.add(1)
    query = burst.start(session)
    wait_until(lambda: burst.facts(0) is not None, what="batch 0 and its file")
    first = burst.facts(0).admission
    assert len(first) == 1 and first[0].unit == "rows" and first[0].admitted == ROWS and first[0].limit >= 1
    burst.add(24)
    assert wake(session, str(query.id))
    last = burst.drained(query, 25 * ROWS, "the Kafka burst drained by wakes alone")
    every = [burst.facts(b) for b in range(last + 1)]
    admitted = [f.admission[0].admitted for f in every[1:]]
    assert sum(admitted) == 24 * ROWS and len(admitted) >= 4, summary(every)
    assert max(admitted) <= user_max and min(f.admission[0].limit for f in every) < user_max, summary(every)
    within_limits(every)
    assert all(f.admission[0].cut_short for f in every[1:-1]), summary(every)
    by_batch = peaks(burst.checkpoint)
    assert max(by_batch[b] for b in range(1, last + 1)) <= 1.25 * LIMIT, by_batch
    query.stop()
    assert result(session, burst) == burst.reference()


@pytest.mark.spark
@pytest.mark.parametrize("source", ["files", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_a_restart_in_the_middle_of_a_limited_run_loses_and_duplicates_nothing(session, tmp_path, request, source):
    """Stopped while the burst drains (batch 3, planned, is held running), restarted: the new
    run re-runs the batch that was planned, goes on from the previous run's estimate, and the
    result is the reference; from files, and from a Kafka topic."""
    from spark_statestore.spark.driver.jvm import wake

    control = tmp_path / "control"
    if source == "kafka":
        burst = KafkaBurst(tmp_path / "burst", request.getfixturevalue("kafka"), 8 * ROWS)
    else:
        burst = Burst(tmp_path / "burst")
    burst.add(1)
    with gated(session, control, {3}) as hold:
        query = burst.start(session, hold)
        wait_until(lambda: burst.facts(0) is not None, what="batch 0")
        burst.add(30)
        assert wake(session, str(query.id))
        wait_until(lambda: (control / "running-3").exists(), what="two limited batches, and batch 3 held")
        query.stop()  # batch 3 never ends in this run
        first_run = burst.processed(query)
        assert first_run < 31 * ROWS  # stopped before the burst drained
        (control / "release-3").touch()
        query = burst.start(session, hold)
        wait_until(lambda: first_run + burst.processed(query) == 31 * ROWS, what="the rest, by the new run")
    assert result(session, burst) == (burst.reference() if source == "kafka" else reference(session, burst))


@pytest.mark.versioned  # the clock's hook before the first trigger, on each minor
@pytest.mark.spark
def test_a_burst_that_lands_while_the_query_is_stopped_starts_under_the_last_limit(session, tmp_path):
    """Restarted at once after a stop (the driver may not have heard the first run end yet),
    with a burst that landed meanwhile and no batch left planned: the new run's first batch is
    bounded by the limit the first run ended with, and the rest drains back to back."""
    burst = Burst(tmp_path)
    burst.add(1)
    query = burst.start(session)
    wait_until(lambda: burst.facts(0) is not None, what="batch 0")
    limit = burst.facts(0).admission[0].limit
    assert 1 <= limit < 24
    query.stop()
    burst.add(24)
    query = burst.start(session)
    last = burst.drained(query, 24 * ROWS, "the burst drained by the restarted run")
    facts = [burst.facts(b) for b in range(0, last + 1)]
    assert facts[1].admission[0].admitted <= limit, summary(facts)
    assert facts[1].admission[0].cut_short, summary(facts)
    within_limits(facts)
    query.stop()
    assert result(session, burst) == reference(session, burst)


class HeldBus:
    """A listener that, once armed, holds the streaming listener bus in the next progress
    event it gets (after the shim's listener got it) until released: what a loaded driver's
    bus running behind looks like to the shim."""

    def __init__(self) -> None:
        import threading

        from pyspark.sql.streaming import StreamingQueryListener

        self.armed, self.holding, self.released = threading.Event(), threading.Event(), threading.Event()
        held = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                if held.armed.is_set() and not held.holding.is_set():
                    held.holding.set()
                    held.released.wait(600)  # released by the test however it ends

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        self.listener = Listener()


@pytest.mark.spark
def test_the_end_of_a_run_told_after_the_next_run_began_keeps_the_next_runs_reports(session, tmp_path):
    """The bus tells the first run's end only after the restarted run's first batch ended (its
    tasks' reports received): those reports stay with the new run, so that batch still gets
    its admission decision, is cut short and the burst drains. (The end of a run forgot every
    report of the query, the new run's too: its first batch had no decision, and nothing woke
    the century-interval query.)"""
    from spark_statestore.spark.driver.jvm import wake

    burst = Burst(tmp_path)
    burst.add(1)
    query = burst.start(session)
    wait_until(lambda: burst.facts(0) is not None, what="batch 0")
    bus = HeldBus()
    session.streams.addListener(bus.listener)
    try:
        bus.armed.set()
        burst.add(1)
        assert wake(session, str(query.id))
        wait_until(bus.holding.is_set, what="the bus held in batch 1's progress")
        first_run = burst.processed(query)
        query.stop()  # its end waits on the held bus
        burst.add(24)
        query = burst.start(session)
        wait_until(lambda: any(p["batchId"] == 2 for p in query.recentProgress), what="the new run's first batch")
    finally:
        bus.released.set()
        session.streams.removeListener(bus.listener)
    wait_until(lambda: burst.facts(2) is not None, what="the file of batch 2")
    assert burst.facts(2).admission, "the new run's first batch had no admission decision: its reports were lost"
    assert burst.facts(2).admission[0].cut_short
    burst.drained(query, 24 * ROWS, "the burst drained by the restarted run")
    assert first_run == 2 * ROWS
    query.stop()
    assert result(session, burst) == reference(session, burst)


@pytest.mark.spark
def test_a_crossing_batch_tightens_the_limit_and_it_comes_back_up(session, tmp_path):
    """A burst of files that each write three times the state of batch 0's: its first batch
    crosses the limit, and the next limit is tighter (headroom halved); a later burst of small
    files loosens it again."""
    from spark_statestore.spark.driver.jvm import wake

    global ROWS
    burst = Burst(tmp_path)
    burst.add(1)
    query = burst.start(session)
    wait_until(lambda: burst.facts(0) is not None, what="batch 0")
    small, ROWS = ROWS, ROWS * 3
    try:
        burst.add(6)
    finally:
        ROWS = small
    assert wake(session, str(query.id))
    large = burst.drained(query, small + 6 * 3 * small, "the large burst drained")
    burst.add(12)
    assert wake(session, str(query.id))
    last = burst.drained(query, 13 * small + 6 * 3 * small, "the small burst drained")
    limits = [burst.facts(b).admission[0].limit for b in range(0, last + 1)]
    assert "crossed" in burst.facts(1).admission[0].reason and limits[1] < limits[0], limits
    assert burst.facts(1).admission[0].reason.startswith("lowered: ")
    assert limits[-1] > max(limits[1:large + 1]), limits  # back up after the burst
    query.stop()
    assert result(session, burst) == reference(session, burst)


def rows_source(available: Path):
    """A Python streaming data source of rows `k<i % 4000>`, as many as the number in the file
    `available` says; `latestOffset(start, limit)` honours `ReadMaxRows` (pyspark 4.2+)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadMaxRows

    class Reader(DataSourceStreamReader):
        def initialOffset(self):
            return {"row": 0}

        def latestOffset(self, start, limit):
            end = int(available.read_text())
            if isinstance(limit, ReadMaxRows):
                end = min(end, start["row"] + limit.max_rows)
            return {"row": end}

        def partitions(self, start, end):
            return [InputPartition((start["row"], end["row"]))]

        def read(self, partition):
            first, end = partition.value
            for i in range(first, end):
                yield (f"k{i % 4000:06d}",)

    class Source(DataSource):
        @classmethod
        def name(cls):
            return "admission_rows"

        def schema(self):
            return "key string"

        def streamReader(self, schema):
            return Reader()

    return Source


@pytest.mark.versioned  # runs where the minor has admission control for Python sources (4.2)
@pytest.mark.spark
@pytest.mark.skipif(not compat.FACTS.stream_admission_control,
                    reason="Python streaming data sources have no admission control before pyspark 4.2")
def test_a_python_streaming_source_is_bounded_in_rows(session, tmp_path):
    from spark_statestore.spark.driver.jvm import wake

    burst = Burst(tmp_path)
    available = tmp_path / "available"
    available.write_text(str(ROWS))
    session.dataSource.register(rows_source(available))
    fn = partition_function(counts, burst.checkpoint, STORES, partitions=2, emit_changes=False, spark=session)
    query = (
        session.readStream.format("admission_rows").load().repartition(2, "key").mapInArrow(fn, "key string, count long")
        .writeStream.format("parquet").option("path", str(burst.output)).option("checkpointLocation", burst.checkpoint)
        .trigger(processingTime=INTERVAL).start()
    )
    wait_until(lambda: burst.facts(0) is not None, what="batch 0")
    assert burst.facts(0).admission[0].unit == "rows" and burst.facts(0).admission[0].admitted == ROWS
    available.write_text(str(25 * ROWS))
    assert wake(session, str(query.id))
    last = burst.drained(query, 25 * ROWS, "the burst drained by wakes alone")
    facts = [burst.facts(b) for b in range(0, last + 1)]
    assert len(facts) >= 4
    within_limits(facts)
    query.stop()
    counted = result(session, burst)
    assert counted == {f"k{i:06d}": 25 * ROWS // 4000 + (i < 25 * ROWS % 4000) for i in range(4000)}


def test_the_setting_is_checked():
    assert StateStoreSettings.defaults().admission is True
    assert StateStoreSettings.from_conf({ADMISSION: " False "}.get).admission is False
    with pytest.raises(ValueError, match=f"{ADMISSION} must be true or false, got 'maybe'"):
        StateStoreSettings.from_conf({ADMISSION: "maybe"}.get)
