"""The early-trigger governor in the driver's JVM on real Spark queries: decisions driven by
messages crafted here (as tasks send them) and by real tasks, and the batch files the driver
writes (`<checkpoint>/statestore/_batches/<batch>.json`)."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest
from shim_queries import LIMIT, FileStream, Held, batches, early, gated, report, shim_session, wait_until

from spark_statestore.spark import compat
from spark_statestore.spark.signals import CROSSING



@pytest.fixture(scope="module")
def session(classic_spark):
    """py4j to the driver's JVM: a classic session (Connect: test_early_trigger_shim)."""
    child = shim_session(classic_spark)
    yield child
    for query in child.streams.active:
        query.stop()


@pytest.mark.versioned
@pytest.mark.spark
def test_the_first_crossing_in_flight_wakes_the_query_once(session, tmp_path):
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    with Held(session, tmp_path, {1}) as held:
        held.stream.add("b")
        assert wake(session, held.id)
        held.running(1)
        report(session, held.id, 1, 2, LIMIT + 1, kind=CROSSING)
        report(session, held.id, 1, 3, LIMIT + 9, kind=CROSSING)  # the same batch: decided already
        report(session, held.id, 1, 3, LIMIT + 9)  # and at its end
        wait_until(lambda: query_trigger(session, held.id).wake_pending, what="the remembered wake")
        held.stream.add("c")
        held.release(1)
        wait_until(lambda: batches(held.query) == [0, 1, 2], what="batch 2 right after batch 1")
        assert early(held, 1) == {
            "source": "in_flight", "partition": 2, "uncommitted_bytes": LIMIT + 1, "limit": LIMIT,
            "woken": True,
            "reason": f"partition 2 had {LIMIT + 1} uncommitted bytes > limit {LIMIT} (in flight)",
        }
        assert early(held, 2) is None
        assert query_trigger(session, held.id).early_wakes == 2  # the test's wake and the governor's


@pytest.mark.spark
def test_end_of_task_reports_decide_when_the_batch_ends(session, tmp_path):
    """Reports sent while the batch runs are all read when it ends (the largest peak decides),
    also when the receiver's thread had not handled them yet."""
    from spark_statestore.spark.driver.jvm import wake

    with Held(session, tmp_path, {1}) as held:
        held.stream.add("b")
        assert wake(session, held.id)
        held.running(1)
        for partition, size in ((0, 10), (1, LIMIT + 100), (2, LIMIT + 50)):
            report(session, held.id, 1, partition, size)
        held.stream.add("c")
        held.release(1)
        wait_until(lambda: batches(held.query) == [0, 1, 2], what="batch 2 right after batch 1")
        decided = early(held, 1)
        assert (decided["source"], decided["partition"], decided["uncommitted_bytes"]) == (
            "end_of_batch", 1, LIMIT + 100)
        assert decided["reason"].endswith("(end of batch)")


@pytest.mark.spark
def test_a_run_of_early_batches_goes_on_while_a_whole_interval_would_cross(session, tmp_path):
    """After an early batch, a batch under the limit still has the next one start early when a
    whole interval of its input would cross; the first batch whose input would not ends the
    run, and the interval comes back (a task without a limit never crosses it)."""
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    with Held(session, tmp_path, {1, 2, 3}) as held:
        held.stream.add("b")
        assert wake(session, held.id)
        peaks = {1: [LIMIT + 1], 2: [LIMIT // 5], 3: [0, 0]}
        for batch, sizes in peaks.items():
            held.running(batch)
            for partition, size in enumerate(sizes):
                report(session, held.id, batch, partition, size)
            if batch == 3:
                report(session, held.id, batch, 5, 1 << 40, limit=-1)  # no limit: never a crossing
            held.stream.add(f"after-{batch}")
            held.release(batch)
        wait_until(lambda: held.stream.batch_file(3) is not None, what="the file of batch 3")
        assert early(held, 1)["source"] == "end_of_batch"
        second = early(held, 2)
        assert (second["source"], second["woken"]) == ("projected", True)
        assert "over a whole trigger interval" in second["reason"] and second["uncommitted_bytes"] > LIMIT
        assert early(held, 3) is None  # a whole interval of nothing stays under the limit
        assert batches(held.query) == [0, 1, 2, 3] and not query_trigger(session, held.id).wake_pending


@pytest.mark.spark
def test_only_the_crossing_query_is_woken(session, tmp_path):
    from spark_statestore.spark.driver.jvm import decision, query_trigger

    crossing, idle = Held(session, tmp_path / "crossing", set()), Held(session, tmp_path / "idle", set())
    crossing.stream.add("b")
    idle.stream.add("b")
    report(session, idle.id, 0, 0, LIMIT, kind=CROSSING)  # at the limit is not past it
    report(session, crossing.id, 0, 0, LIMIT + 1, kind=CROSSING)  # late for batch 0: starts batch 1 at once
    wait_until(lambda: batches(crossing.query) == [0, 1], what="the crossing query's next batch")
    assert decision(session, crossing.id, 0)["source"] == "in_flight"  # its file was written before
    assert decision(session, idle.id, 0) is None
    assert batches(idle.query) == [0] and not query_trigger(session, idle.id).wake_pending
    crossing.query.stop()
    idle.query.stop()


@pytest.mark.spark
def test_a_batch_re_run_after_a_restart_in_the_same_session_is_woken(session, tmp_path):
    """Issue 24: the re-run of a batch in a new run of its query has task attempt numbers
    starting at 0 again; its task's signal is a new one (its task attempt id is), and the
    batch is decided again."""
    from spark_statestore.spark.driver.jvm import signal_stats, wake

    stream = FileStream(tmp_path / "stream")
    control = tmp_path / "control"
    stream.add("small")
    with gated(session, control, {1}, session.target) as hold:
        query = stream.start(session, hold)
        wait_until(lambda: stream.batch_file(0) is not None, what="batch 0")
        before = signal_stats(session)
        stream.add("big")
        assert wake(session, query.id)
        wait_until(lambda: (control / "running-1").exists(), what="batch 1 running")
        wait_until(lambda: signal_stats(session).get("accepted", 0) == before.get("accepted", 0) + 1,
                   what="the first run's crossing")
        query.stop()  # batch 1 never ends in this run
        (control / "running-1").unlink()
        (control / "release-1").touch()
        stream.add("small")
        restarted = stream.start(session, hold)
        wait_until(lambda: batches(restarted) == [1, 2], what="the re-run batch 1, then batch 2 at once")
        decided = stream.batch_file(1)["early_trigger"]
        assert (decided["source"], decided["woken"]) == ("in_flight", True)
        stats = signal_stats(session)
        assert stats.get("accepted", 0) == before.get("accepted", 0) + 2
        assert stats.get("replayed", 0) == before.get("replayed", 0)


@pytest.mark.versioned
@pytest.mark.spark
def test_every_batch_has_a_file_with_what_the_driver_saw(session, tmp_path):
    """Queries of any trigger whose checkpoint holds our state get a file per batch: its
    start, the input rows Spark dropped as late, and the early trigger (none here); a query
    without our state gets none."""
    from pyspark.sql import functions as F

    stream = FileStream(tmp_path / "stream")
    stream.add("100")
    frame = (
        session.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(stream.input))
        .select(F.col("value").cast("long").cast("timestamp").alias("ts"))
        .withWatermark("ts", "0 seconds").dropDuplicates(["ts"])
    )
    query = (
        frame.writeStream.format("noop").option("checkpointLocation", stream.checkpoint)
        .trigger(processingTime="0 seconds").start()
    )
    # Spark drops a row as late only behind the watermark of the batch before (the one a
    # batch evicts by is its own): the row comes after a batch that ran with 100 s (one with
    # no data, which Spark runs since the watermark moved)
    wait_until(lambda: any(p["eventTime"].get("watermark") == "1970-01-01T00:01:40.000Z"
                           for p in query.recentProgress), what="a batch with the watermark at 100 s")
    stream.add("10", "200")  # 10 is behind the watermark of 100 s: dropped as late
    wait_until(lambda: any(sum(o["numRowsDroppedByWatermark"] for o in p["stateOperators"])
                           for p in query.recentProgress), what="the late row dropped")
    query.stop()  # then no batch runs: after the late row's batch, a batch with no data may still come
    progress = {}
    for p in query.recentProgress:  # an idle progress repeats the last batch's id: the batch's own comes first
        progress.setdefault(p["batchId"], p)
    for batch_id, p in progress.items():
        wait_until(lambda b=batch_id: stream.batch_file(b) is not None, what=f"the file of batch {batch_id}")
        record = stream.batch_file(batch_id)
        started = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        assert record == {
            "query_id": str(query.id), "run_id": str(query.runId), "batch_id": batch_id,
            "timestamp_ms": round(started.timestamp() * 1000),
            "rows_dropped_by_watermark": sum(o["numRowsDroppedByWatermark"] for o in p["stateOperators"]),
            "early_trigger": None, "admission": [],  # no task reported a peak: nothing to size a limit on
        }
    assert sum(stream.batch_file(b)["rows_dropped_by_watermark"] for b in progress) == 1
    assert sorted(os.listdir(Path(stream.checkpoint) / "statestore" / "_batches")) == sorted(
        f"{b}.json" for b in progress)  # no temporary file left

    other = tmp_path / "no-state"
    (other / "input").mkdir(parents=True)
    (other / "input" / "a.txt").write_text("a\n")
    plain = (
        session.readStream.format("text").load(str(other / "input")).writeStream.format("noop")
        .option("checkpointLocation", str(other / "checkpoint")).trigger(availableNow=True).start()
    )
    assert plain.awaitTermination(300)
    assert not (other / "checkpoint" / "statestore").exists()


def _shim_class(session, name: str):
    """A class of the driver's shim jar (package-private: reached by reflection)."""
    from spark_statestore.spark.driver.jvm import _facade

    facade, _ = _facade(session, load=False)
    return facade.getClass().getClassLoader().loadClass(f"io.sparkstatestore.shim.{name}")


def _last_limits(session, checkpoint: Path) -> dict[str, int]:
    """What the driver's shim finds as the last admission limits under `checkpoint` (for a
    run in a new driver process): `BatchFiles.lastLimits`, reached by reflection (the record
    is package-private)."""
    from spark_statestore.spark.compat import driver_jvm, py4j_gateway

    gateway, jvm = py4j_gateway(session), driver_jvm(session)
    batch_files = _shim_class(session, "BatchFiles")
    [constructor] = batch_files.getDeclaredConstructors()
    constructor.setAccessible(True)
    arguments = gateway.new_array(jvm.java.lang.Object, 3)
    arguments[0], arguments[1] = str(checkpoint), session.sparkContext._jsc.hadoopConfiguration()
    arguments[2] = 10  # batches retained: unused by the read
    files = constructor.newInstance(arguments)
    method = batch_files.getDeclaredMethod("lastLimits", gateway.new_array(jvm.java.lang.Class, 0))
    method.setAccessible(True)
    return dict(method.invoke(files, gateway.new_array(jvm.java.lang.Object, 0)))


def _admission(limit) -> str:
    return json.dumps({"admission": [{"source": "files", "limit": limit}]})


@pytest.mark.spark
def test_the_last_limits_ignore_a_file_named_with_more_digits_than_a_batch_id(session, tmp_path):
    """A file of 19 or more digits among the batch files is foreign: the limits are those of
    the latest batch file all the same (before: its name overflowed a long, the whole read
    failed, and a run in a new driver started without the last limits)."""
    directory = tmp_path / "statestore" / "_batches"
    directory.mkdir(parents=True)
    (directory / "4.json").write_text(_admission(7))
    (directory / "5.json").write_text(_admission(9))
    for foreign in ("9" * 19, "1" + "0" * 18, "1" * 40):  # over a long, one that fits, far over
        (directory / f"{foreign}.json").write_text(_admission(1))
    assert _last_limits(session, tmp_path) == {"files": 9}


@pytest.mark.spark
@pytest.mark.parametrize("damaged", [
    _admission(2**64 + 1),  # beyond a long (read as 1 before)
    _admission("3"), _admission(1.5), _admission(True),  # not an integer (3, 1 and 1 before)
    json.dumps({"admission": [{"limit": 3}]}),  # no source (the source "" before)
    json.dumps({"admission": {"files": {"source": "files", "limit": 3}}}),  # not a list (its values before)
    json.dumps({"admission": ["files"]}),  # an entry that is no object (-1, limit lifted, before)
    _admission(3)[:-3],  # cut short
], ids=["beyond-long", "string", "fraction", "boolean", "no-source", "not-a-list", "not-an-object", "cut"])
def test_the_last_limits_skip_a_damaged_file_for_the_newest_good_one(session, tmp_path, damaged):
    """A batch file whose admission is not what the shim writes is skipped: the limits are
    those of the newest good file before it (before: a limit beyond a long wrapped round, a
    string or a fraction was read as a number, and the good file's limits were lost)."""
    directory = tmp_path / "statestore" / "_batches"
    directory.mkdir(parents=True)
    (directory / "4.json").write_text(_admission(7))
    (directory / "5.json").write_text(damaged)
    assert _last_limits(session, tmp_path) == {"files": 7}


def _read_limits(session, method: str, *arguments):
    """Calls the static `ReadLimits.<method>` of the driver's shim with `arguments`."""
    from spark_statestore.spark.compat import driver_jvm, py4j_gateway

    gateway, jvm = py4j_gateway(session), driver_jvm(session)
    [found] = [m for m in _shim_class(session, "ReadLimits").getDeclaredMethods() if m.getName() == method]
    found.setAccessible(True)
    array = gateway.new_array(jvm.java.lang.Object, len(arguments))
    for i, argument in enumerate(arguments):
        array[i] = argument
    return found.invoke(None, array)


def _python_limit(session, max_rows: str):
    """A Python data source's read limit (4.2+) of `max_rows`, as pyspark writes it."""
    jvm = session.sparkContext._jvm
    limit = jvm.org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingSourceReadLimit
    return limit(f'{{"_type": "ReadMaxRows", "max_rows": {max_rows}}}')


@pytest.mark.spark
@pytest.mark.skipif(not compat.FACTS.stream_admission_control, reason="no Python source admission control")
def test_a_python_row_limit_beyond_a_long_bounds_nothing_a_long_counts(session):
    """Python's ints are unbounded: a `ReadMaxRows` beyond a long is no bound beside ours
    (before: NumberFormatException, and the source kept the user's limit alone), and a count
    that is not a whole number is none (before: `1e20` was read as 1 row)."""
    huge = _python_limit(session, "9" * 20)
    assert _read_limits(session, "count", huge) == 2**63 - 1
    assert json.loads(_read_limits(session, "bounded", None, "rows", 5, huge).json())["max_rows"] == 5
    assert _read_limits(session, "count", _python_limit(session, "1e20")) == -1


@pytest.mark.spark
def test_a_file_source_offset_beyond_a_long_is_unreadable_like_a_missing_one(session):
    """Spark writes a file source's logOffset as a long: a larger one fails as a missing one
    does (NoSuchFieldException, naming the offset; before: a bare NumberFormatException)."""
    from py4j.protocol import Py4JJavaError

    offset = '{"logOffset": ' + "9" * 20 + "}"
    with pytest.raises(Py4JJavaError) as raised:
        _read_limits(session, "filesAdmitted", None, None, offset)
    cause = raised.value.java_exception.getCause()
    assert cause.getClass().getName() == "java.lang.NoSuchFieldException"
    assert "beyond a long" in cause.getMessage() and offset in cause.getMessage()


@pytest.mark.spark
@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (None, '{"logOffset": 1000000000}', "spans 1000000001 log batches (at most 1000 are counted)"),
        ('{"logOffset": 5}', '{"logOffset": 1006}', "spans 1001 log batches"),
        ('{"logOffset": -5}', '{"logOffset": 1}', "logOffset below -1"),
        (None, '{"logOffset": 1.5}', "logOffset in the file source's offset"),
        (None, '{"logOffset": 2e9}', "logOffset in the file source's offset"),
    ],
)
def test_a_file_source_offset_is_bounded_before_its_log_is_read(session, start, end, message):
    """A file source's micro-batch spans one log batch, and its log's `get` reads a span id by
    id: a span beyond `MAX_LOG_SPAN`, a logOffset below -1 or one that is not a whole number is
    unreadable like a missing one (NoSuchFieldException naming it) before the log is touched
    (before: a span of 10^9 had the driver's listener read the log 10^9 times; -5 and 2e9 were
    taken as -5 and 2; here the source is null, so reaching the log fails otherwise)."""
    from py4j.protocol import Py4JJavaError

    with pytest.raises(Py4JJavaError) as raised:
        _read_limits(session, "filesAdmitted", None, start, end)
    cause = raised.value.java_exception.getCause()
    assert cause.getClass().getName() == "java.lang.NoSuchFieldException", cause.toString()
    assert message in cause.getMessage() and any(o in cause.getMessage() for o in (start, end) if o)


@pytest.mark.spark
def test_counts_are_bounded_to_18_significant_digits_before_they_are_parsed(session):
    """As BatchFiles' batch ids: a count of at most 18 significant digits always fits a long;
    more is beyond (-1), whatever its leading zeros, and is never handed to Long.parseLong."""
    assert _read_limits(session, "digits", "0" * 40 + "7") == 7
    assert _read_limits(session, "digits", "9" * 18) == 10**18 - 1
    assert _read_limits(session, "digits", "1" + "0" * 18) == -1
    assert _read_limits(session, "digits", "9" * 100_000) == -1
    assert _read_limits(session, "count", _python_limit(session, "0" * 30 + "12")) == 12
