"""Adaptive admission across driver processes: a query restarted by a new driver (a new
application, or the same after the driver died) starts under the limit its checkpoint's
last run ended with, as a restart within one driver does (test_admission)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_admission import ROWS, Burst, reference, result, session, summary  # noqa: F401

DRIVER = Path(__file__).with_name("admission_driver.py")


@pytest.mark.spark
def test_a_burst_that_lands_while_the_driver_is_down_starts_under_the_last_limit(session, tmp_path):  # noqa: F811
    """The first run in a driver process of its own, stopped; a burst of 24 files lands; the
    next run, in this test's driver: its first batch takes at most the last limit (before:
    the whole burst, as the estimate lived in the first driver's memory only)."""
    done = subprocess.run([sys.executable, str(DRIVER), str(tmp_path)], capture_output=True, text=True, check=False,
                          timeout=900, cwd=DRIVER.parent)
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
