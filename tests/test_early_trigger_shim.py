"""The early trigger's driver part in the JVM (`jvm-shim/`), on real Spark queries: the
wakeable clock, the governor's decisions driven by datagrams crafted here and by real tasks,
the per-batch files, and the plugin in driver subprocesses of their own (a clean JVM each).

The Spark queries use a processing-time interval of 100 years rather than an hour: Spark
aligns processing-time triggers to multiples of the interval since the epoch, so an
hourly query runs a batch at every full hour, and a test that happened to run across one
would see a batch nobody woke. Waking works the same for any interval.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_statestore.spark.driver.jvm import ShimStatus
from spark_statestore.spark.driver.settings import EARLY_TRIGGER_ENABLED as ENABLED
from spark_statestore.spark.driver.settings import SIGNAL_PORT, StateStoreSettings
from spark_statestore.spark.signals import CROSSING, REPORT, SECRET_KEY, TARGET_KEY, Signal, SignalTarget, send

pytestmark = pytest.mark.versioned

INTERVAL = "36500 days"
LIMIT = 64 << 20
DRIVER_SCRIPT = Path(__file__).with_name("shim_driver.py")


def test_settings_defaults_and_values():
    defaults = StateStoreSettings.defaults()
    assert (defaults.early_trigger_enabled, defaults.signal_port) == (True, 0)
    conf = {ENABLED: " FALSE ", SIGNAL_PORT: "40123"}
    settings = StateStoreSettings.from_conf(conf.get)
    assert (settings.early_trigger_enabled, settings.signal_port) == (False, 40123)


@pytest.mark.parametrize(
    "key,value,message",
    [
        (ENABLED, "yes", f"{ENABLED} must be true or false, got 'yes'"),
        (ENABLED, "", f"{ENABLED} must be true or false, got ''"),
        (SIGNAL_PORT, "http", f"{SIGNAL_PORT} must be an integer, got 'http'"),
        (SIGNAL_PORT, "-1", f"{SIGNAL_PORT} must be at least 0, got '-1'"),
        (SIGNAL_PORT, "65536", f"{SIGNAL_PORT} must be a port number in 0..65535, got '65536'"),
    ],
)
def test_bad_settings_name_the_key_and_the_value(key, value, message):
    with pytest.raises(ValueError) as error:
        StateStoreSettings.from_conf({key: value}.get)
    assert str(error.value) == message


def test_a_session_without_a_driver_jvm_gets_a_status_not_an_error():
    from spark_statestore.spark.driver.jvm import activate_shim, query_trigger, wake

    class RemoteSession:  # what a Spark Connect session looks like from here: no py4j JVM
        def __getattr__(self, name):
            raise AttributeError(f"[JVM_ATTRIBUTE_NOT_SUPPORTED] {name}")

    status = activate_shim(RemoteSession())
    assert status.available is False
    assert "RemoteSession has no driver JVM reachable from Python (a Spark Connect session?)" in status.reason
    assert wake(RemoteSession(), "q") is False and query_trigger(RemoteSession(), "q") is None


# -- the shim on real queries -----------------------------------------------------------


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    """Driver subprocesses of their own (a clean JVM each), started early so they run
    while the other Spark tests do; each prints one JSON line."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    started = {}
    for mode in ("plugin", "no-jar", "connect"):
        workdir = tmp_path_factory.mktemp(f"driver-{mode}")
        started[mode] = subprocess.Popen(
            [sys.executable, str(DRIVER_SCRIPT), mode, str(workdir)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def driver_result(drivers, mode: str) -> tuple[dict, str]:
    """The driver's JSON line and its stderr (the driver log)."""
    out, err = drivers[mode].communicate(timeout=480)
    assert drivers[mode].returncode == 0, f"driver {mode} failed:\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1]), err


@pytest.fixture(scope="module")
def session(spark, drivers):
    """A child session of the shared SparkSession (its own streaming query manager, so the
    listener touches no other test's queries) with the shim activated in it; `target` is
    where tasks send signals, as the session's conf says."""
    from pyspark import cloudpickle

    from spark_statestore.spark.driver.jvm import activate_shim

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    child = spark.newSession()
    child.status = activate_shim(child)
    child.target = SignalTarget.parse(child.conf.get(TARGET_KEY), child.conf.get(SECRET_KEY))
    yield child
    for query in child.streams.active:
        query.stop()


class FileStream:
    """A directory of text files read by a streaming query; `add` publishes one atomically.
    Its checkpoint has a `statestore` directory, so the driver writes its batch files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.input = root / "input"
        self.input.mkdir(parents=True)
        self.checkpoint = str(root / "checkpoint")
        (root / "checkpoint" / "statestore").mkdir(parents=True)
        self.files = 0

    def add(self, *lines: str) -> None:
        self.files += 1
        staged = self.root / f"staged-{self.files}.txt"
        staged.write_text("".join(f"{line}\n" for line in lines or ["row"]))
        os.replace(staged, self.input / f"part-{self.files:04d}.txt")

    def start(self, session, transform=None, **trigger):
        frame = session.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(self.input))
        if transform is not None:
            frame = frame.mapInPandas(transform, "value string")
        return (
            frame.writeStream.format("noop").option("checkpointLocation", self.checkpoint)
            .trigger(**(trigger or {"processingTime": INTERVAL})).start()
        )

    def batch_file(self, batch: int) -> dict | None:
        """The driver's file of a batch, None while there is none."""
        path = Path(self.checkpoint) / "statestore" / "_batches" / f"{batch}.json"
        return json.loads(path.read_text()) if path.exists() else None


def batches(query) -> list[int]:
    """The ids of the batches that processed rows."""
    return sorted({p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0})


def wait_until(predicate, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or predicate}")
        time.sleep(0.05)


def gate(control: Path, held_batches: set[int], signal_target=None):
    """A mapInPandas function that holds the batches `held_batches` (writes
    `running-<batch>`, then waits for `release-<batch>`), and, given a signal target,
    sends a crossing signal from tasks whose rows contain `big`, as a task attempt does
    (keyed on its `taskAttemptId()`)."""

    def run(frames):
        from pyspark import TaskContext

        from spark_statestore.spark.signals import CROSSING, Signal, send

        context = TaskContext.get()
        batch = int(context.getLocalProperty("streaming.sql.batchId"))
        frames = list(frames)
        if signal_target is not None and any(frame["value"].eq("big").any() for frame in frames):
            query_id = context.getLocalProperty("sql.streaming.queryId")
            send(signal_target, Signal(CROSSING, query_id, batch, context.partitionId(), context.taskAttemptId(),
                                       2 * LIMIT, LIMIT))
        if batch in held_batches:
            (control / f"running-{batch}").touch()
            deadline = time.monotonic() + 120
            while not (control / f"release-{batch}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        yield from frames

    return run


class Held:
    """A query over a `FileStream` whose batches `held` wait for the test (`running`,
    `release`), started with batch 0 done."""

    def __init__(self, session, root: Path, held: set[int], signal_target=None, **trigger) -> None:
        self.stream = FileStream(root / "stream")
        self.control = root / "control"
        self.control.mkdir()
        self.stream.add("a")
        self.query = self.stream.start(session, gate(self.control, held, signal_target), **trigger)
        self.id = str(self.query.id)
        wait_until(lambda: self.stream.batch_file(0) is not None, what="batch 0 and its file")

    def running(self, batch: int) -> None:
        wait_until(lambda: (self.control / f"running-{batch}").exists(), what=f"batch {batch} running")

    def release(self, batch: int) -> None:
        (self.control / f"release-{batch}").touch()


def report(session, query_id: str, batch: int, partition: int, size: int, limit: int = LIMIT,
           kind: int = REPORT) -> None:
    """A task's message, as a task of `batch` would send it (a task attempt id of its own)."""
    report.attempts = getattr(report, "attempts", 1_000_000) + 1
    assert send(session.target, Signal(kind, query_id, batch, partition, report.attempts, size, limit))


@pytest.mark.spark
def test_shim_is_loaded_into_the_running_session_once(session, spark):
    from spark_statestore.spark.driver.jvm import activate_shim

    assert "spark-statestore-shim" not in (spark.sparkContext.getConf().get("spark.jars") or "")
    assert session.status == ShimStatus(True, "", "loaded")
    assert activate_shim(session) == ShimStatus(True, "", "loaded")  # idempotent

    def shim_listeners(s):
        return [
            listener for listener in s._jsparkSession.streams().listListeners()
            if listener.getClass().getName() == "io.sparkstatestore.shim.EarlyTriggerListener"
        ]

    assert len(shim_listeners(session)) == 1
    # only the session it was activated in (not a sibling; the parent may have its own from
    # an operator an earlier test built in it)
    assert shim_listeners(spark.newSession()) == []


@pytest.mark.spark
def test_wakeable_clock_remembers_a_wake_and_keeps_its_schedule(session):
    from spark_statestore.spark.driver.jvm import _facade

    facade, _ = _facade(session, load=False)
    clock = facade.newClock()
    far = clock.getTimeMillis() + 30_000  # without the remembered wake: 30 s, then a failure
    clock.wake()  # no wait in progress (a batch is running): remembered
    assert clock.isWakePending()
    assert clock.waitTillTime(far) < far  # the next wait ends at once
    assert not clock.isWakePending() and clock.earlyReturns() == 1
    target = clock.getTimeMillis() + 300
    assert clock.waitTillTime(target) >= target  # the wake was used up: this wait runs to its target
    assert clock.earlyReturns() == 1

    returned = []
    waiter = threading.Thread(target=lambda: returned.append(clock.waitTillTime(clock.getTimeMillis() + 30_000)))
    waiter.start()
    wait_until(lambda: waiter.is_alive(), what="the waiting thread started")
    clock.wake()  # during the wait, or before it (then remembered): either way it ends
    waiter.join(60)
    assert not waiter.is_alive() and clock.earlyReturns() == 2


@pytest.mark.spark
def test_only_the_woken_query_runs_its_next_batch(session, tmp_path):
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    woken, idle = FileStream(tmp_path / "woken"), FileStream(tmp_path / "idle")
    woken.add("a")
    idle.add("a")
    woken_query, idle_query = woken.start(session), idle.start(session)
    wait_until(lambda: batches(woken_query) == [0] and batches(idle_query) == [0], what="first batches")
    woken.add("b")
    idle.add("b")
    assert query_trigger(session, woken_query.id).wakeable
    assert wake(session, woken_query.id) is True
    wait_until(lambda: batches(woken_query) == [0, 1], what="the woken query's next batch")
    assert batches(idle_query) == [0]  # its data is there too, but it waits out its interval
    trigger = query_trigger(session, idle_query.id)
    assert (trigger.kind, trigger.interval_ms, trigger.early_wakes) == ("processingTime", 36500 * 86_400_000, 0)
    assert query_trigger(session, woken_query.id).early_wakes == 1
    assert wake(session, idle_query.id) is True
    wait_until(lambda: batches(idle_query) == [0, 1], what="the idle query's batch once woken")
    woken_query.stop()
    idle_query.stop()


@pytest.mark.spark
def test_a_wake_during_a_batch_starts_the_next_batch_when_it_ends(session, tmp_path):
    from spark_statestore.spark.driver.jvm import wake

    stream = FileStream(tmp_path / "stream")
    control = tmp_path / "control"
    control.mkdir()
    stream.add("a")
    query = stream.start(session, gate(control, {1}))
    wait_until(lambda: batches(query) == [0], what="batch 0")
    stream.add("b")
    assert wake(session, query.id)
    wait_until(lambda: (control / "running-1").exists(), what="batch 1 running")
    stream.add("c")
    assert wake(session, query.id)  # while batch 1 runs: remembered for the wait after it
    (control / "release-1").touch()
    wait_until(lambda: batches(query) == [0, 1, 2], what="batch 2 right after batch 1")
    query.stop()


@pytest.mark.spark
def test_restarted_query_is_still_wakeable_and_stop_while_waiting_returns(session, tmp_path):
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    stream = FileStream(tmp_path / "stream")
    stream.add("a")
    query = stream.start(session)
    wait_until(lambda: batches(query) == [0], what="batch 0")
    first_run = query_trigger(session, query.id).run_id
    started = time.monotonic()
    query.stop()  # it is waiting for a trigger 100 years away
    assert time.monotonic() - started < 30 and not query.isActive
    # forgotten with its run (the listener hears of the termination on Spark's listener bus, after stop returns)
    wait_until(lambda: query_trigger(session, query.id) is None, what="the stopped run forgotten")
    assert wake(session, query.id) is False

    stream.add("b")
    restarted = stream.start(session)
    wait_until(lambda: batches(restarted) == [1], what="the restarted query's first batch")
    assert restarted.id == query.id and query_trigger(session, restarted.id).run_id != first_run
    stream.add("c")
    assert wake(session, restarted.id)
    wait_until(lambda: batches(restarted) == [1, 2], what="the woken batch after the restart")
    restarted.stop()


@pytest.mark.spark
def test_trigger_kinds_of_queries_that_never_wait(session, tmp_path):
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    continuous = FileStream(tmp_path / "zero")
    continuous.add("a")
    query = continuous.start(session, processingTime="0 seconds")
    wait_until(lambda: batches(query) == [0], what="batch 0")
    trigger = query_trigger(session, query.id)
    assert (trigger.kind, trigger.interval_ms, trigger.wakeable) == ("processingTime", 0, False)
    assert "never waits" in trigger.reason
    assert wake(session, query.id) is False
    query.stop()

    control = tmp_path / "control"
    control.mkdir()
    once = FileStream(tmp_path / "available-now")
    once.add("a")
    query = once.start(session, gate(control, {0}), availableNow=True)
    wait_until(lambda: (control / "running-0").exists(), what="the availableNow batch running")
    trigger = query_trigger(session, query.id)
    assert (trigger.kind, trigger.wakeable) == ("availableNow", False)
    assert wake(session, query.id) is False
    (control / "release-0").touch()
    query.awaitTermination(120)
    wait_until(lambda: query_trigger(session, query.id) is None, what="the ended run forgotten")



# -- the governor, on real queries ------------------------------------------------------


def early(held: Held, batch: int) -> dict | None:
    """The early trigger of a batch as its file says (waiting for the file)."""
    wait_until(lambda: held.stream.batch_file(batch) is not None, what=f"the file of batch {batch}")
    return held.stream.batch_file(batch)["early_trigger"]


@pytest.mark.spark
def test_the_first_crossing_in_flight_wakes_the_query_once(session, tmp_path):
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    held = Held(session, tmp_path, {1})
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
        "source": "in_flight", "partition": 2, "uncommitted_bytes": LIMIT + 1, "limit": LIMIT, "woken": True,
        "reason": f"partition 2 had {LIMIT + 1} uncommitted bytes > limit {LIMIT} (in flight)",
    }
    assert early(held, 2) is None
    assert query_trigger(session, held.id).early_wakes == 2  # the test's wake and the governor's
    held.query.stop()


@pytest.mark.spark
def test_end_of_task_reports_decide_when_the_batch_ends(session, tmp_path):
    """Reports sent while the batch runs are all read when it ends (the largest peak decides),
    also when the receiver's thread had not handled them yet."""
    from spark_statestore.spark.driver.jvm import wake

    held = Held(session, tmp_path, {1})
    held.stream.add("b")
    assert wake(session, held.id)
    held.running(1)
    for partition, size in ((0, 10), (1, LIMIT + 100), (2, LIMIT + 50)):
        report(session, held.id, 1, partition, size)
    held.stream.add("c")
    held.release(1)
    wait_until(lambda: batches(held.query) == [0, 1, 2], what="batch 2 right after batch 1")
    decided = early(held, 1)
    assert (decided["source"], decided["partition"], decided["uncommitted_bytes"]) == ("end_of_batch", 1, LIMIT + 100)
    assert decided["reason"].endswith("(end of batch)")
    held.query.stop()


@pytest.mark.spark
def test_a_run_of_early_batches_goes_on_while_a_whole_interval_would_cross(session, tmp_path):
    """After an early batch, a batch under the limit still has the next one start early when a
    whole interval of its input would cross; the first batch whose input would not ends the
    run, and the interval comes back (a task without a limit never crosses it)."""
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    held = Held(session, tmp_path, {1, 2, 3})
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
    held.query.stop()


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
    control.mkdir()
    stream.add("small")
    query = stream.start(session, gate(control, {1}, session.target))
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
    restarted = stream.start(session, gate(control, {1}, session.target))
    wait_until(lambda: batches(restarted) == [1, 2], what="the re-run batch 1, then batch 2 at once")
    decided = stream.batch_file(1)["early_trigger"]
    assert (decided["source"], decided["woken"]) == ("in_flight", True)
    stats = signal_stats(session)
    assert stats.get("accepted", 0) == before.get("accepted", 0) + 2
    assert stats.get("replayed", 0) == before.get("replayed", 0)
    restarted.stop()


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
    wait_until(lambda: any(p["numInputRows"] for p in query.recentProgress), what="the first batch")
    stream.add("10", "200")  # 10 is behind the watermark of 100 s: dropped as late
    wait_until(lambda: any(sum(o["numRowsDroppedByWatermark"] for o in p["stateOperators"])
                           for p in query.recentProgress), timeout=180, what="the late row dropped")
    progress = {p["batchId"]: p for p in query.recentProgress}
    query.stop()
    for batch_id, p in progress.items():
        wait_until(lambda b=batch_id: stream.batch_file(b) is not None, what=f"the file of batch {batch_id}")
        record = stream.batch_file(batch_id)
        started = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        assert record == {
            "query_id": str(query.id), "run_id": str(query.runId), "batch_id": batch_id,
            "timestamp_ms": round(started.timestamp() * 1000),
            "rows_dropped_by_watermark": sum(o["numRowsDroppedByWatermark"] for o in p["stateOperators"]),
            "early_trigger": None,
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
    plain.awaitTermination(120)
    assert not (other / "checkpoint" / "statestore").exists()


# -- the plugin, in drivers of their own ------------------------------------------------


@pytest.mark.spark
def test_the_plugin_starts_the_driver_part_with_the_context(drivers):
    """`spark.plugins` with the jar in `spark.jars`: the session has the receiver's address in
    its conf and the clock-installing listener before anything of ours ran in Python; the
    query is woken by a crossing; the driver log says why, once per query."""
    result, log = driver_result(drivers, "plugin")
    assert result["before"] == {"target": True, "listeners": ["io.sparkstatestore.shim.EarlyTriggerListener"]}
    assert result["status"] == {"available": True, "reason": "", "source": "plugin"}
    assert result["listeners"] == ["io.sparkstatestore.shim.EarlyTriggerListener"]  # not registered twice
    assert result["target"] is True and result["batches"] == [0, 1]
    assert result["decision"]["source"] == "in_flight" and result["decision"]["woken"] is True
    assert result["files"] == ["0.json", "1.json"] and result["stats"] == {"accepted": 3}
    assert result["warnings"] == []
    woken = [line for line in log.splitlines() if "spark_statestore early trigger: query" in line]
    assert len(woken) == 1 and "batch 0: partition 0 had 100 uncommitted bytes > limit 10 (in flight)" in woken[0]
    nothing = [line for line in log.splitlines() if "nothing to do for query" in line]
    assert len(nothing) == 1 and "(availableNow trigger)" in nothing[0]  # two crossings, said once


@pytest.mark.spark
def test_without_a_jar_the_status_says_why_and_queries_run_normally(drivers):
    result, _ = driver_result(drivers, "no-jar")
    assert result["status"]["available"] is False
    assert "shim jar is not on the driver's classpath and not packaged" in result["status"]["reason"]
    assert result["target"] is False and result["before"] == {"target": False, "listeners": []}
    assert result["batches"] == [0, 1]  # a short interval: batches run on their own schedule
    assert len(result["warnings"]) == 1 and "early triggers are off" in result["warnings"][0]
    assert result["status"]["reason"] in result["warnings"][0]


@pytest.mark.spark
def test_a_query_of_a_spark_connect_session_is_woken_by_its_driver(drivers):
    """A Spark Connect server started with `--jars <jar> --conf spark.plugins=...`: its client
    reads where tasks send signals with `spark.conf.get`, and a crossing starts the next batch
    of the client's century-interval query at once; the batch files are written."""
    result, _ = driver_result(drivers, "connect")
    assert result["session"] == "pyspark.sql.connect.session" and result["target"] is True
    assert result["files"] == ["0.json", "1.json"] and result["batch_1"]["batch_id"] == 1
