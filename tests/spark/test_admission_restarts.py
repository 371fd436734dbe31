"""Adaptive admission on restarts beyond test_admission's (a century-interval query restarted
in the same driver): a query restarted by a new driver (a new application, or the same after
the driver died), and a query with the default trigger (processing time 0, which never
waits), start under the limit their previous run ended with."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from shim_queries import wait_until
from test_admission import ROWS, Burst, reference, result, session, summary  # noqa: F401
from paths import SUPPORT

DRIVER = SUPPORT / "admission_driver.py"


@pytest.mark.spark
def test_a_burst_that_lands_while_the_driver_is_down_starts_under_the_last_limit(session, tmp_path):  # noqa: F811
    """The first run in a driver process of its own, stopped; a burst of 24 files lands; the
    next run, in this test's driver: its first batch takes at most the last limit (before:
    the whole burst, as the estimate lived in the first driver's memory only)."""
    done = subprocess.run([sys.executable, str(DRIVER), str(tmp_path)], capture_output=True, text=True, check=False,
                          timeout=500, cwd=DRIVER.parent)  # more than the driver's own bounds
    assert done.returncode == 0, done.stderr[-4000:]
    first = json.loads(done.stdout.strip().splitlines()[-1])
    assert 1 <= first["limit"] < 24, first
    burst = Burst(tmp_path)
    burst.add(24)
    query = burst.start(session)
    last = burst.drained(query, 24 * ROWS, "the burst drained by the new driver's run")
    facts = [burst.facts(b) for b in range(last + 1)]
    query.stop()
    assert facts[first["last"] + 1].admission[0].admitted <= first["limit"], summary(facts)
    assert result(session, burst) == reference(session, burst)


@pytest.mark.spark
def test_a_query_with_the_default_trigger_restarts_under_the_last_limit(session, tmp_path):  # noqa: F811
    """Processing time 0 (no `.trigger()`): no wake is needed (batches run back to back), but
    the restart's first batch is bounded all the same (before: 24 files under a limit of 3)."""
    burst = Burst(tmp_path)
    burst.add(1)
    query = burst.start(session, processingTime="0 seconds")
    wait_until(lambda: burst.facts(0) is not None, what="batch 0")
    burst.add(6)
    last = burst.drained(query, 7 * ROWS, "the first 7 files, back to back")
    limit = burst.facts(last).admission[0].limit
    assert 1 <= limit < 24
    query.stop()
    burst.add(24)
    query = burst.start(session, processingTime="0 seconds")
    end = burst.drained(query, 24 * ROWS, "the burst, by the restarted run")
    facts = [burst.facts(b) for b in range(end + 1)]
    query.stop()
    assert facts[last + 1].admission[0].admitted <= limit, summary(facts)
    assert result(session, burst) == reference(session, burst)


@pytest.mark.spark
def test_an_available_now_run_starts_under_the_last_limit(session, tmp_path):  # noqa: F811
    """An `availableNow` query run again (as a scheduled job is) over a backlog: its first
    batch takes at most the limit the run before ended with, the rest follows in bounded
    batches within the same run (before: the whole backlog of 24 files in one batch)."""

    def run() -> int:
        query = burst.start(session, availableNow=True)
        assert query.awaitTermination(300), "the availableNow run did not end"
        last = query.lastProgress["batchId"]
        wait_until(lambda: burst.facts(last) is not None, what=f"the file of batch {last}")
        return last

    burst = Burst(tmp_path)
    burst.add(7)
    first = run()
    limit = burst.facts(first).admission[0].limit
    assert 1 <= limit < 24
    burst.add(24)
    end = run()
    facts = [burst.facts(b) for b in range(end + 1)]
    assert facts[first + 1].admission[0].admitted <= limit, summary(facts)
    assert sum(f.admission[0].admitted for f in facts[first + 1:]) == 24, summary(facts)
    assert result(session, burst) == reference(session, burst)
