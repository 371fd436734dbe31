"""The early trigger's driver part in the JVM (`jvm-shim/`): its settings, the wakeable clock
on real Spark queries of a classic session that loads the packaged jar, and the plugin in
drivers of their own (a clean JVM each: a classic driver with `spark.plugins`, one without a
jar, a Spark Connect server with the plugin). The governor's decisions and the batch files:
`test_early_trigger_governor.py`.

The Spark queries use a processing-time interval of 100 years rather than an hour: Spark
aligns processing-time triggers to multiples of the interval since the epoch, so an
hourly query runs a batch at every full hour, and a test that happened to run across one
would see a batch nobody woke. Waking works the same for any interval.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shim_queries import FileStream, batches, gated, shim_session, wait_until

from spark_statestore.spark.driver.jvm import ShimStatus
from spark_statestore.spark.driver.settings import EARLY_TRIGGER_ENABLED as ENABLED
from spark_statestore.spark.driver.settings import SIGNAL_PORT, StateStoreSettings
from paths import SUPPORT


@pytest.fixture(scope="session")
def spark(classic_spark):
    """These tests need the driver's JVM (py4j, the shim, accumulators): classic only."""
    return classic_spark


DRIVER_SCRIPT = SUPPORT / "shim_driver.py"
# the test that reads each driver's result: a driver starts only when its test was selected
DRIVER_TESTS = {
    "plugin": "test_the_plugin_starts_the_driver_part_with_the_context",
    "no-jar": "test_without_a_jar_the_status_says_why_and_queries_run_normally",
    "connect": "test_a_query_of_a_spark_connect_session_is_woken_by_its_driver",
}


@pytest.mark.versioned
def test_settings_defaults_and_values():
    defaults = StateStoreSettings.defaults()
    assert (defaults.early_trigger_enabled, defaults.signal_port) == (True, 0)
    conf = {ENABLED: " FALSE ", SIGNAL_PORT: "40123"}
    settings = StateStoreSettings.from_conf(conf.get)
    assert (settings.early_trigger_enabled, settings.signal_port) == (False, 40123)


@pytest.mark.versioned
@pytest.mark.parametrize("after_batch", ["3", 2.0, True, -2, 1 << 63])
def test_a_wake_for_a_batch_that_is_no_batch_id_is_refused(after_batch):
    """Not a silent False (a wake's failures are best effort, a caller's mistake is not)."""
    from spark_statestore.spark.driver.jvm import wake

    with pytest.raises(ValueError, match=f"after_batch must be a batch id .*got {re.escape(repr(after_batch))}"):
        wake(None, "a-query", after_batch=after_batch)


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
@pytest.mark.versioned
def test_bad_settings_name_the_key_and_the_value(key, value, message):
    with pytest.raises(ValueError) as error:
        StateStoreSettings.from_conf({key: value}.get)
    assert str(error.value) == message


@pytest.mark.versioned
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
def drivers(request, tmp_path_factory):
    """Driver subprocesses of their own (a clean JVM each), started early so they run
    while the other Spark tests do; each prints one JSON line."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    started = {}
    selected = {item.name for item in request.session.items}
    for mode in (mode for mode, test in DRIVER_TESTS.items() if test in selected):
        workdir = tmp_path_factory.mktemp(f"driver-{mode}")
        started[mode] = subprocess.Popen(
            [sys.executable, str(DRIVER_SCRIPT), mode, str(workdir)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        )
    yield started
    for process in started.values():
        try:  # a driver no test read, or what a driver started and left (a Connect server)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the driver and all it started have ended
            pass
        process.wait()


def driver_result(drivers, mode: str) -> tuple[dict, str]:
    """The driver's JSON line and its stderr (the driver log)."""
    out, err = drivers[mode].communicate(timeout=540)  # more than the driver's own bound (shim_driver.py)
    assert drivers[mode].returncode == 0, f"driver {mode} failed:\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1]), err


@pytest.fixture(scope="module")
def session(spark, drivers):
    """The shim's session (`shim_queries.shim_session`), made once the drivers run."""
    child = shim_session(spark)
    yield child
    for query in child.streams.active:
        query.stop()


@pytest.mark.versioned
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


def latest_batch(session, batch: int):
    """A JVM long[1] holding a clock's "latest batch run" (set with `[0] = b`)."""
    array = session.sparkContext._gateway.new_array(session.sparkContext._jvm.long, 1)
    array[0] = batch
    return array


@pytest.mark.versioned
@pytest.mark.spark
def test_wakeable_clock_remembers_a_wake_and_keeps_its_schedule(session):
    from spark_statestore.spark.driver.jvm import _facade

    facade, _ = _facade(session, load=False)
    latest = latest_batch(session, 0)  # the query's latest batch
    clock = facade.newClock(latest)
    far = clock.getTimeMillis() + 30_000  # without the remembered wake: 30 s, then a failure
    clock.wake()  # no wait in progress (a batch is running): remembered
    assert clock.isWakePending()
    assert clock.waitTillTime(far) < far  # the next wait ends at once
    assert not clock.isWakePending() and clock.earlyReturns() == 1
    latest[0] = 1  # the woken trigger ran a batch: the wake is used up
    target = clock.getTimeMillis() + 300
    assert clock.waitTillTime(target) >= target  # this wait runs to its target
    assert (clock.earlyReturns(), clock.polls()) == (1, 0)

    returned = []
    waiter = threading.Thread(target=lambda: returned.append(clock.waitTillTime(clock.getTimeMillis() + 30_000)))
    waiter.start()
    wait_until(lambda: waiter.is_alive(), what="the waiting thread started")
    clock.wake()  # during the wait, or before it (then remembered): either way it ends
    waiter.join(60)
    assert not waiter.is_alive() and clock.earlyReturns() == 2


@pytest.mark.versioned
def test_a_woken_trigger_that_ran_no_batch_looks_again_soon(session):
    """The input a wake was for was not there yet: the next waits end after 0.1 s, doubling,
    until a batch runs (then the plain schedule), or after the last poll (3.2 s)."""
    from spark_statestore.spark.driver.jvm import _facade

    facade, _ = _facade(session, load=False)
    latest = latest_batch(session, 0)
    clock = facade.newClock(latest)
    far = clock.getTimeMillis() + 60_000  # a clock that does not poll fails after a minute
    clock.wake()
    assert clock.waitTillTime(far) < far and clock.earlyReturns() == 1
    # no batch ran: the next waits are polls, each at least as long as the one before
    lengths = []
    for n in range(1, 3):
        begun = clock.getTimeMillis()
        assert clock.waitTillTime(far) < far and clock.polls() == n
        lengths.append(clock.getTimeMillis() - begun)
    assert lengths[0] >= 100 and lengths[1] >= 200, lengths
    latest[0] = 1  # a batch ran: the plain schedule again
    target = clock.getTimeMillis() + 300
    assert clock.waitTillTime(target) >= target and clock.polls() == 2
    # a wake whose trigger never finds input polls six times (0.1 s to 3.2 s), then waits out its target
    clock.wake()
    assert clock.waitTillTime(far) < far and clock.earlyReturns() == 2
    for n in range(3, 9):
        assert clock.waitTillTime(far) < far and clock.polls() == n
    target = clock.getTimeMillis() + 300
    assert clock.waitTillTime(target) >= target and clock.polls() == 8


@contextlib.contextmanager
def batch_1_running(session, tmp_path) -> Iterator[tuple[FileStream, Path, Any]]:
    """A query that ran batch 0 over `a`, woken for batch 1 over `b`, which it holds running
    (until `release-1` in the control directory); `c` waits for batch 2. Leaving the block
    releases batch 1 and stops the query (`gated`)."""
    from spark_statestore.spark.driver.jvm import wake

    stream = FileStream(tmp_path / "stream")
    control = tmp_path / "control"
    stream.add("a")
    with gated(session, control, {1}) as hold:
        query = stream.start(session, hold)
        wait_until(lambda: batches(query) == [0], what="batch 0")
        stream.add("b")
        assert wake(session, query.id)
        wait_until(lambda: (control / "running-1").exists(), what="batch 1 running")
        stream.add("c")
        yield stream, control, query


@pytest.mark.versioned
def test_a_wake_for_a_batch_that_ran_already_is_dropped(session):
    """`wakeAfter(b)` starts batch b + 1; once b + 1 has run, the wake is stale: pending or
    arriving while the query waits, it ends no wait. A plain wake is never stale."""
    from spark_statestore.spark.driver.jvm import _facade

    facade, _ = _facade(session, load=False)
    latest = latest_batch(session, 4)
    clock = facade.newClock(latest)
    far = clock.getTimeMillis() + 60_000
    clock.wakeAfter(4)  # for batch 5, which has not run: it ends the wait
    assert clock.waitTillTime(far) < far and (clock.earlyReturns(), clock.droppedWakes()) == (1, 0)
    latest[0] = 5  # batch 5 ran
    clock.wakeAfter(4)  # the same decision, late (its batch started before it arrived): pending, then dropped
    assert clock.isWakePending()
    target = clock.getTimeMillis() + 300
    assert clock.waitTillTime(target) >= target
    assert (clock.earlyReturns(), clock.droppedWakes(), clock.isWakePending()) == (1, 1, False)

    returned = []
    until = clock.getTimeMillis() + 600_000  # only a wake that is not stale ends this wait in time
    waiter = threading.Thread(target=lambda: returned.append(clock.waitTillTime(until)), daemon=True)
    waiter.start()
    clock.wakeAfter(3)  # stale while it waits (or before: then dropped at its start)
    wait_until(lambda: clock.droppedWakes() == 2, what="the stale wake dropped")
    assert waiter.is_alive() and clock.earlyReturns() == 1  # it goes on waiting
    clock.wake()
    waiter.join(60)
    assert not waiter.is_alive() and returned[0] < until
    assert (clock.earlyReturns(), clock.droppedWakes()) == (2, 2)
    clock.wakeAfter(3)
    clock.wakeAfter(5)  # two pending wakes: the later batch's counts
    assert clock.waitTillTime(far) < far and (clock.earlyReturns(), clock.droppedWakes()) == (3, 2)
    latest[0] = 9
    clock.wake()  # whichever batch is next
    assert clock.waitTillTime(far) < far and (clock.earlyReturns(), clock.droppedWakes()) == (4, 2)


@pytest.mark.versioned
@pytest.mark.spark
def test_a_real_query_drops_a_stale_wake_and_polls_after_an_empty_woken_trigger(session, tmp_path):
    """The clock reads a real query's latest batch: a wake after batch 0 that arrives while
    batch 1 runs is dropped (the data waiting for batch 2 stays until a wake for it); a wake
    whose trigger finds no input makes the query look again soon, and input that lands then
    runs a batch with no other wake."""
    from spark_statestore.spark.driver.jvm import query_trigger, wake

    with batch_1_running(session, tmp_path) as (stream, control, query):
        assert wake(session, query.id, after_batch=0)  # late: batch 1 is the batch it was for
        (control / "release-1").touch()
        wait_until(lambda: query_trigger(session, query.id).dropped_wakes == 1, what="the stale wake dropped")
        assert batches(query) == [0, 1] and not query_trigger(session, query.id).wake_pending
        assert wake(session, query.id, after_batch=1)
        wait_until(lambda: batches(query) == [0, 1, 2], what="batch 2, woken for")

        assert wake(session, query.id, after_batch=2)  # no input for batch 3 yet
        wait_until(lambda: query_trigger(session, query.id).polls >= 1,
                   what="a poll after the empty woken trigger")
        stream.add("d")  # lands while the query polls (six polls over about 6 s)
        # a test stalled past the last poll (a loaded machine) wakes the query itself
        stalled = query_trigger(session, query.id).polls >= 6
        if stalled:
            assert wake(session, query.id)
        wait_until(lambda: batches(query) == [0, 1, 2, 3], what="batch 3, found by a poll")
        wait_until(lambda: query_trigger(session, query.id).early_wakes == 3 + stalled, what="the wakes counted")
        assert query_trigger(session, query.id).dropped_wakes == 1


@pytest.mark.versioned
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


@pytest.mark.versioned
@pytest.mark.spark
def test_a_wake_during_a_batch_starts_the_next_batch_when_it_ends(session, tmp_path):
    from spark_statestore.spark.driver.jvm import wake

    with batch_1_running(session, tmp_path) as (stream, control, query):
        assert wake(session, query.id)  # while batch 1 runs: remembered for the wait after it
        (control / "release-1").touch()
        wait_until(lambda: batches(query) == [0, 1, 2], what="batch 2 right after batch 1")


@pytest.mark.versioned
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
    assert time.monotonic() - started < 120 and not query.isActive  # a bound on a hang, not a speed
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


@pytest.mark.versioned
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
    once = FileStream(tmp_path / "available-now")
    once.add("a")
    with gated(session, control, {0}) as hold:
        query = once.start(session, hold, availableNow=True)
        wait_until(lambda: (control / "running-0").exists(), what="the availableNow batch running")
        trigger = query_trigger(session, query.id)
        assert (trigger.kind, trigger.wakeable) == ("availableNow", False)
        assert wake(session, query.id) is False
        (control / "release-0").touch()
        assert query.awaitTermination(300)
    wait_until(lambda: query_trigger(session, query.id) is None, what="the ended run forgotten")



# -- the plugin, in drivers of their own ------------------------------------------------


# on the newest minor: the plugin starts on the others in the Connect driver's server
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


# on the newest minor: without the jar no minor-specific part of the shim runs
@pytest.mark.spark
def test_without_a_jar_the_status_says_why_and_queries_run_normally(drivers):
    result, _ = driver_result(drivers, "no-jar")
    assert result["status"]["available"] is False
    assert "shim jar is not on the driver's classpath and not packaged" in result["status"]["reason"]
    assert result["target"] is False and result["before"] == {"target": False, "listeners": []}
    assert result["batches"] == [0, 1]  # a short interval: batches run on their own schedule
    assert len(result["warnings"]) == 1 and "early triggers are off" in result["warnings"][0]
    assert result["status"]["reason"] in result["warnings"][0]


@pytest.mark.versioned
@pytest.mark.spark
def test_a_query_of_a_spark_connect_session_is_woken_by_its_driver(drivers):
    """A Spark Connect server started with `--jars <jar> --conf spark.plugins=...`: its client
    reads where tasks send signals with `spark.conf.get`, and a crossing starts the next batch
    of the client's century-interval query at once; the batch files are written."""
    result, _ = driver_result(drivers, "connect")
    assert result["session"] == "pyspark.sql.connect.session" and result["target"] is True
    assert result["files"] == ["0.json", "1.json"] and result["batch_1"]["batch_id"] == 1
