"""benchmarks/proc_tree.py, which vs_kafka_streams.py uses to charge each side the CPU its own
processes spent: a descendant's CPU counts, also after it has exited and been reaped, and
only once (not again through its parent's cutime)."""

from __future__ import annotations

import subprocess
import sys

import paths

sys.path.insert(0, str(paths.ROOT / "benchmarks"))
from proc_tree import TICKS, TreeStats  # noqa: E402 - benchmarks/proc_tree.py

BURN = 0.6  # CPU seconds the grandchild spends
# /proc gives user and system time each truncated to whole clock ticks, so a process that
# burnt BURN by its own clock may show up to two ticks less there (CI once read 0.59).
FLOOR = BURN - 2 / TICKS
GRANDCHILD = f"""
import time
while time.process_time() < {BURN}:
    pass
print("burnt", flush=True)
input()
"""
CHILD = f"""
import subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", {GRANDCHILD!r}], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
grandchild.stdout.readline()
print("burnt", flush=True)
sys.stdin.readline()
grandchild.communicate("")  # the grandchild exits and is reaped: its CPU moves to our cutime
print("reaped", flush=True)
input()
"""


def test_a_tree_is_charged_its_descendants_cpu_once_also_after_they_exit():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        stats = TreeStats(child.pid)
        assert child.stdout.readline() == "burnt\n"
        running = stats.sample()
        assert running.cpu >= FLOOR  # the grandchild's, while it runs
        assert stats.peak > 0
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "reaped\n"
        after = stats.sample()
        assert FLOOR <= after.cpu < 2 * BURN  # kept after it is gone, and not counted twice
        assert after.busy >= running.busy and after.wall >= running.wall
        assert stats.loads and all(load >= 0 for load in stats.loads)
    finally:
        child.kill()
        child.wait()
