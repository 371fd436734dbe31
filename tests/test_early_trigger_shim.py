"""The early trigger: the governor's decisions (driven through an injected waker), and the
JVM shim on real Spark queries (in a child session of the shared SparkSession, and in
driver subprocesses of their own where a clean JVM is needed).

The Spark queries use a processing-time interval of 100 years rather than an hour: Spark
aligns processing-time triggers to multiples of the interval since the epoch, so an
hourly query runs a batch at every full hour, and a test that happened to run across one
would see a batch nobody woke. Waking works the same for any interval.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_statestore.spark.driver.governor import BatchReport, EarlyTriggerGovernor
from spark_statestore.spark.driver.jvm import QueryTrigger, ShimStatus
from spark_statestore.spark.driver.settings import EARLY_TRIGGER_ENABLED as ENABLED
from spark_statestore.spark.driver.settings import SIGNAL_PORT, StateStoreSettings
from spark_statestore.spark.signals import CrossingSignal

pytestmark = pytest.mark.versioned


@pytest.fixture(scope="session")
def spark(classic_spark):
    """These tests need the driver's JVM (py4j, the shim, accumulators): classic only."""
    return classic_spark

INTERVAL = "36500 days"
LIMIT = 64 << 20
DRIVER_SCRIPT = Path(__file__).with_name("shim_driver.py")


# -- the governor, with an injected waker ----------------------------------------------


class RecordingShim:
    """A waker that records wakes; queries are wakeable unless `triggers` says otherwise."""

    def __init__(self, available: bool = True, reason: str = "", triggers: dict | None = None) -> None:
        self.status = ShimStatus(available, reason, "classpath" if available else "")
        self.triggers = triggers or {}
        self.woken: list[str] = []

    def wake(self, query_id: str) -> bool:
        self.woken.append(query_id)
        return True

    def trigger(self, query_id: str) -> QueryTrigger | None:
        return self.triggers.get(query_id, QueryTrigger(query_id, "run", "processingTime", 60_000, True, "", 0))


def crossing(query: str = "q1", batch: int = 5, partition: int = 2, size: int = LIMIT + 1) -> CrossingSignal:
    return CrossingSignal(query, batch, partition, attempt=0, uncommitted_bytes=size, limit=LIMIT)


def test_crossing_in_flight_wakes_the_query_once_per_batch(caplog):
    shim = RecordingShim()
    governor = EarlyTriggerGovernor(True, shim)
    with caplog.at_level(logging.INFO, logger="spark_statestore.spark.driver.governor"):
        assert governor.on_signal(crossing(partition=2)) is True
        assert governor.on_signal(crossing(partition=3)) is False  # same batch: already decided
        assert governor.on_batch_end(BatchReport("q1", 5, {2: LIMIT + 1, 3: LIMIT + 9}, LIMIT)) is False
    assert shim.woken == ["q1"]
    assert governor.batch_metrics("q1", 5) == {
        "early_triggers": 1,
        "early_trigger_reason": f"partition 2 had {LIMIT + 1} uncommitted bytes > limit {LIMIT} (in flight)",
    }
    logged = [r.getMessage() for r in caplog.records if "early trigger:" in r.getMessage()]
    assert len(logged) == 1 and "query q1 batch 5" in logged[0] and f"> limit {LIMIT}" in logged[0]


def test_crossing_at_the_end_of_a_batch_wakes_the_query():
    shim = RecordingShim()
    governor = EarlyTriggerGovernor(True, shim)
    report = BatchReport("q1", 9, {0: 10, 1: LIMIT + 100, 2: LIMIT + 50}, LIMIT)
    assert governor.on_batch_end(report) is True
    assert shim.woken == ["q1"]
    [trigger] = governor.early_triggers("q1")
    assert (trigger.batch_id, trigger.source, trigger.partition, trigger.uncommitted_bytes) == (
        9, "end_of_batch", 1, LIMIT + 100,
    )
    assert governor.batch_metrics("q1", 9)["early_trigger_reason"].endswith("(end of batch)")


def test_a_run_of_crossing_batches_wakes_once_per_batch_then_the_interval_comes_back():
    shim = RecordingShim()
    governor = EarlyTriggerGovernor(True, shim)
    for batch in range(3, 7):
        governor.on_signal(crossing(batch=batch))
        governor.on_batch_end(BatchReport("q1", batch, {0: LIMIT * 2}, LIMIT))
    assert shim.woken == ["q1"] * 4
    governor.on_batch_end(BatchReport("q1", 7, {0: LIMIT, 1: 5}, LIMIT))  # at the limit is not past it
    assert shim.woken == ["q1"] * 4  # no wake: the query waits out its interval again
    assert [t.batch_id for t in governor.early_triggers()] == [3, 4, 5, 6]
    assert governor.batch_metrics("q1", 7) == {"early_triggers": 0, "early_trigger_reason": None}


def test_under_the_limit_or_without_a_limit_nothing_is_woken():
    shim = RecordingShim()
    governor = EarlyTriggerGovernor(True, shim)
    assert not governor.on_signal(crossing(size=LIMIT - 1))
    assert not governor.on_batch_end(BatchReport("q1", 1, {0: 100, 1: LIMIT}, LIMIT))
    assert not governor.on_batch_end(BatchReport("q1", 2, {}, LIMIT))
    assert not governor.on_signal(CrossingSignal("q1", 3, 0, 0, 1 << 40, limit=-1))  # -1 = no limit
    assert shim.woken == [] and governor.early_triggers() == []


def test_only_the_crossing_query_is_woken():
    shim = RecordingShim()
    governor = EarlyTriggerGovernor(True, shim)
    governor.on_signal(crossing(query="q2", batch=1))
    governor.on_batch_end(BatchReport("q1", 1, {0: 1}, LIMIT))
    governor.on_signal(crossing(query="q3", batch=1))
    assert shim.woken == ["q2", "q3"]
    assert [t.query_id for t in governor.early_triggers("q2")] == ["q2"]


def test_concurrent_signals_of_one_batch_wake_once():
    shim = RecordingShim()
    governor = EarlyTriggerGovernor(True, shim)
    start = threading.Barrier(8)

    def signal(partition: int) -> None:
        start.wait()
        governor.on_signal(crossing(partition=partition))

    threads = [threading.Thread(target=signal, args=(p,)) for p in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert shim.woken == ["q1"]


def test_unavailable_shim_warns_once_and_wakes_nothing(caplog):
    shim = RecordingShim(available=False, reason="the shim jar is not packaged")
    with caplog.at_level(logging.INFO, logger="spark_statestore.spark.driver.governor"):
        governor = EarlyTriggerGovernor(True, shim)
        for batch in range(3):
            governor.on_signal(crossing(batch=batch))
            governor.on_batch_end(BatchReport("q1", batch, {0: LIMIT * 3}, LIMIT))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "early triggers are off: the shim jar is not packaged" in warnings[0].getMessage()
    assert shim.woken == [] and governor.early_triggers() == []


def test_disabled_by_setting_wakes_nothing_and_does_not_warn(caplog):
    shim = RecordingShim()
    with caplog.at_level(logging.INFO, logger="spark_statestore.spark.driver.governor"):
        governor = EarlyTriggerGovernor(False, shim)
        governor.on_signal(crossing())
    assert shim.woken == []
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert f"{ENABLED}=false" in caplog.records[0].getMessage()


@pytest.mark.parametrize("kind", ["availableNow", "once"])
def test_queries_that_never_wait_are_told_once_there_is_nothing_to_do(caplog, kind):
    never_waits = QueryTrigger("q1", "run", kind, 0, False, f"a {kind} trigger never waits between batches", 0)
    shim = RecordingShim(triggers={"q1": never_waits})
    governor = EarlyTriggerGovernor(True, shim)
    with caplog.at_level(logging.INFO, logger="spark_statestore.spark.driver.governor"):
        for batch in range(3):
            governor.on_signal(crossing(batch=batch))
        governor.on_signal(crossing(query="q2"))  # another query is still woken
    said = [r.getMessage() for r in caplog.records if "nothing to do" in r.getMessage()]
    assert len(said) == 1 and f"query q1 ({kind} trigger)" in said[0]
    assert shim.woken == ["q2"]


def test_a_query_the_shim_did_not_see_start_is_warned_about_once(caplog):
    shim = RecordingShim(triggers={"q1": None})
    shim.trigger = lambda query_id: None  # the listener never saw the query start
    governor = EarlyTriggerGovernor(True, shim)
    with caplog.at_level(logging.WARNING, logger="spark_statestore.spark.driver.governor"):
        governor.on_signal(crossing(batch=1))
        governor.on_signal(crossing(batch=2))
    assert len(caplog.records) == 1 and "started before the early-trigger listener" in caplog.records[0].getMessage()
    assert shim.woken == []


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
    for mode in ("classpath", "no-jar"):
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


def driver_result(drivers, mode: str) -> dict:
    out, err = drivers[mode].communicate(timeout=240)
    assert drivers[mode].returncode == 0, f"driver {mode} failed:\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def session(spark, drivers):
    """A child session of the shared SparkSession (its own streaming query manager, so the
    listener touches no other test's queries) with the shim activated in it."""
    from pyspark import cloudpickle

    from spark_statestore.spark.driver.jvm import activate_shim

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    child = spark.newSession()
    child.status = activate_shim(child)
    yield child
    for query in child.streams.active:
        query.stop()


class FileStream:
    """A directory of text files read by a streaming query; `add` publishes one atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.input = root / "input"
        self.input.mkdir(parents=True)
        self.checkpoint = str(root / "checkpoint")
        self.files = 0

    def add(self, *lines: str) -> None:
        self.files += 1
        staged = self.root / f"staged-{self.files}.txt"
        staged.write_text("".join(f"{line}\n" for line in lines or ["row"]))
        os.replace(staged, self.input / f"part-{self.files:04d}.txt")

    def start(self, session, transform=None, **trigger):
        frame = session.readStream.format("text").load(str(self.input))
        if transform is not None:
            frame = frame.mapInPandas(transform, "value string")
        return (
            frame.writeStream.format("noop").option("checkpointLocation", self.checkpoint)
            .trigger(**(trigger or {"processingTime": INTERVAL})).start()
        )


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
    sends a crossing signal from tasks whose rows contain `big`."""

    def run(frames):
        from pyspark import TaskContext

        from spark_statestore.spark.signals import CrossingSignal, send

        context = TaskContext.get()
        batch = int(context.getLocalProperty("streaming.sql.batchId"))
        frames = list(frames)
        if signal_target is not None and any(frame["value"].eq("big").any() for frame in frames):
            query_id = context.getLocalProperty("sql.streaming.queryId")
            send(signal_target, CrossingSignal(query_id, batch, context.partitionId(), context.attemptNumber(),
                                               2 * LIMIT, LIMIT))
        if batch in held_batches:
            (control / f"running-{batch}").touch()
            deadline = time.monotonic() + 120
            while not (control / f"release-{batch}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        yield from frames

    return run


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


@pytest.mark.spark
def test_governor_wakes_a_query_on_a_signal_from_its_task(session, tmp_path):
    from spark_statestore.spark.driver.jvm import SessionShim
    from spark_statestore.spark.driver.signal_server import SignalServer

    governor = EarlyTriggerGovernor(True, SessionShim(session))
    stream = FileStream(tmp_path / "stream")
    control = tmp_path / "control"
    control.mkdir()
    with SignalServer(governor.on_signal) as server:
        stream.add("small")
        query = stream.start(session, gate(control, {1}, server.target))
        wait_until(lambda: batches(query) == [0], what="batch 0")
        stream.add("big")
        assert SessionShim(session).wake(query.id)
        wait_until(lambda: (control / "running-1").exists(), what="batch 1 running")
        wait_until(lambda: governor.early_triggers(query.id), what="the governor's early trigger")
        stream.add("small")
        (control / "release-1").touch()
        wait_until(lambda: batches(query) == [0, 1, 2], what="batch 2 right after the crossing batch 1")
        query.stop()
    [trigger] = governor.early_triggers(query.id)
    assert (trigger.batch_id, trigger.source, trigger.uncommitted_bytes, trigger.woken) == (1, "in_flight", 2 * LIMIT, True)
    assert governor.batch_metrics(query.id, 1)["early_triggers"] == 1
    assert governor.batch_metrics(query.id, 2)["early_triggers"] == 0
    assert server.stats() == {"accepted": 1}


@pytest.mark.spark
def test_shim_from_spark_jars_is_used_from_the_classpath(drivers):
    result = driver_result(drivers, "classpath")
    assert result["status"] == {"available": True, "reason": "", "source": "classpath"}
    assert result["woke"] is True and result["batches"] == [0, 1]
    assert result["warnings"] == []


@pytest.mark.spark
def test_without_a_jar_the_status_says_why_and_queries_run_normally(drivers):
    result = driver_result(drivers, "no-jar")
    assert result["status"]["available"] is False
    assert "shim jar is not on the driver's classpath and not packaged" in result["status"]["reason"]
    assert result["woke"] is False
    assert result["batches"] == [0, 1]  # a short interval: batches run on their own schedule
    assert len(result["warnings"]) == 1 and "early triggers are off" in result["warnings"][0]
    assert result["status"]["reason"] in result["warnings"][0]


def test_a_run_of_early_batches_goes_on_while_a_whole_interval_would_cross():
    """After an early batch, a batch under the limit still keeps the next one early when its
    input came so fast that a whole interval of it would cross; slower input ends the run."""
    shim = RecordingShim()  # interval 60 s
    governor = EarlyTriggerGovernor(True, shim)
    assert governor.on_batch_end(BatchReport("q1", 1, {0: LIMIT + 1}, LIMIT, 60_000))  # crossing: early
    # batch 2 started at once: 6 s of input, a tenth of the limit -> a whole minute would cross
    assert governor.on_batch_end(BatchReport("q1", 2, {0: LIMIT // 5}, LIMIT, 6_000))
    assert "over a whole trigger interval" in governor.batch_metrics("q1", 2)["early_trigger_reason"]
    # the burst is over: a whole minute of this input stays under the limit
    assert not governor.on_batch_end(BatchReport("q1", 3, {0: LIMIT // 50}, LIMIT, 6_000))
    # and without a preceding early batch, a small batch never projects
    assert not governor.on_batch_end(BatchReport("q1", 4, {0: LIMIT // 5}, LIMIT, 6_000))
    assert shim.woken == ["q1", "q1"]
