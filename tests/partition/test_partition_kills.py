"""The partition-state protocol under SIGKILL: at every step of prepare, publish, apply,
snapshot and retention, and at random instants. After each kill the driver re-runs what
did not commit; the state read afterwards, from the same local directory and from an
empty one (a new executor), is exactly the model's state at the last committed batch."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

import partition_workload as wl
from paths import SUPPORT

WORKLOAD = str(SUPPORT / "partition_workload.py")
ARGS = ["--snapshot-interval", "3", "--retain", "3", "--limit", "300", "--apply-chunk-bytes", "200", "--cache-bytes", "4000"]


def _run(checkpoint, local, batches, env=None, kill_after=None):
    """Run the workload; with `kill_after` seconds, SIGKILL it that long after it reported
    its first commit (so every killed run did some work, however slow the machine)."""
    proc = subprocess.Popen(
        [sys.executable, WORKLOAD, checkpoint, local, "--seed", "5", "--batches", str(batches), *ARGS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if kill_after is not None:
        for line in proc.stdout:
            if line.startswith("committed "):
                time.sleep(kill_after)
                proc.send_signal(signal.SIGKILL)
                break
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _check(checkpoint, local, tmp_path, tag):
    last = wl.last_committed(checkpoint)
    expected = wl.expected(5, last)
    assert wl.read_state(checkpoint, local) == expected
    assert wl.read_state(checkpoint, str(tmp_path / f"fresh-{tag}")) == expected
    return last


POINTS = [
    ("prepare:after-local-write", 4),
    ("prepare:after-publish", 4),
    ("open:after-apply", 5),
    ("apply:after-chunk", 7),
    ("snapshot:after-file", 3),
    ("snapshot:after-manifest", 2),
    ("retention:after-manifests", 2),
    ("retention:after-changelogs", 2),
]


@pytest.mark.parametrize("point,nth", POINTS)
def test_kill_at_each_step(tmp_path, point, nth):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    code, out, err = _run(checkpoint, local, 14, env={"SPARK_STATESTORE_FAULT": f"{point}@{nth}"})
    assert code == -signal.SIGKILL, f"{point} was not reached: {err[-2000:]}"
    _check(checkpoint, local, tmp_path, "after-kill")
    code, out, err = _run(checkpoint, local, 14)  # the driver carries on
    assert code == 0, err[-2000:]
    assert _check(checkpoint, local, tmp_path, "end") == 13


def test_kill_at_random_instants(tmp_path):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    rng = random.Random(9)
    for round_ in range(6):
        _run(checkpoint, local, 40, kill_after=rng.uniform(0.0, 0.8))
        _check(checkpoint, local, tmp_path, f"r{round_}")
    code, _, err = _run(checkpoint, local, 40)
    assert code == 0, err[-2000:]
    assert _check(checkpoint, local, tmp_path, "end") == 39
