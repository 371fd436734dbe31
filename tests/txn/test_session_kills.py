"""The persistent session store under SIGKILL at each step of the commit and spill
protocols (the method of test_txn_kills.py): after each kill the store reopens with
exactly the sessions, stream time and offset of one committed transaction, and goes on
from there to the same state as a run that was never killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import session_workload
from paths import SUPPORT

WORKLOAD = str(SUPPORT / "session_workload.py")
SEED = 5


def _run(path, *args, fault: str | None = None) -> tuple[int, int]:
    env = dict(os.environ)
    if fault:
        env["SPARK_STATESTORE_FAULT"] = fault
    done = subprocess.run(
        [sys.executable, WORKLOAD, str(path), "--seed", str(SEED), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    committed = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("committed")]
    return done.returncode, max(committed, default=0)


def _reopened(path, clock: str) -> tuple[int, tuple]:
    store = session_workload.open_store(str(path), clock=clock)
    try:
        return store.committed_offset("txn") or 0, session_workload.state_of(store)
    finally:
        store.close()


# (fault point, occurrence, memory limit, whether the killed transaction is committed)
KILL_POINTS = [
    ("commit:before-write", 5, -1, False),
    ("commit:after-write", 5, -1, True),
    ("spill:before-last-write", 7, 300, False),
    ("spill:after-write", 7, 300, False),
    ("commit:after-spill", 5, 300, False),
    ("commit:after-marker", 5, 300, True),
    ("apply:after-chunk", 3, 300, True),
    ("commit:after-apply", 5, 300, True),
]


@pytest.mark.parametrize("clock", ["records", "watermark"])
@pytest.mark.parametrize("point,nth,limit,committed", KILL_POINTS)
def test_kill_at_each_commit_step(tmp_path, point, nth, limit, committed, clock):
    """Under the watermark clock, every other transaction merges a micro-batch: the
    store's bulk reads and writes, and its held sessions, across the kill."""
    path = tmp_path / "db"
    code, last = _run(path, "--limit", str(limit), "--clock", clock, fault=f"{point}@{nth}")
    assert code == -signal.SIGKILL
    offset, state = _reopened(path, clock)
    if point.startswith("spill:"):
        assert offset == last
    else:
        assert offset == (last + 1 if committed else last)
    assert state == session_workload.expected(SEED, offset, clock)
    code, last = _run(path, "--limit", str(limit), "--max", "12", "--clock", clock)  # and it goes on from there
    assert code == 0 and _reopened(path, clock) == (12, session_workload.expected(SEED, 12, clock))
