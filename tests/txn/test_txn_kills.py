"""Transactional stores under SIGKILL: random instants and every step of the commit and
spill protocols. After each kill the database is reopened and must hold exactly the state
of one committed transaction: the last one reported (WAL on), or one no older than the
last flush (WAL off)."""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import rocksdict

import txn_workload
from paths import SUPPORT
from spark_statestore.txn import TransactionalDatabase
from spark_statestore.txn.keyspace import STAGING_PREFIX

WORKLOAD = str(SUPPORT / "txn_workload.py")


class Writer:
    """A txn_workload process whose output lines are collected as they come (a reader
    thread, so nothing sits in a pipe buffer the test cannot see when it kills it)."""

    def __init__(self, path, seed, *args, env=None):
        self.proc = subprocess.Popen(
            [sys.executable, WORKLOAD, str(path), "--seed", str(seed), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self._new: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, word: str, at_least: int, timeout: float = 120.0) -> None:
        """Until the writer reports `word [n]` with n >= at_least (it must, or the test fails)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._new.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, f"the writer ended before reporting {word} {at_least}: {self.stderr()}"
            parts = line.split()
            if parts and parts[0] == word and (len(parts) == 1 or int(parts[1]) >= at_least):
                return

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.finish()

    def finish(self, timeout: float = 120.0) -> int:
        self.proc.wait(timeout)
        self._reader.join(timeout)
        return self.proc.returncode

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.poll() is not None else ""

    def reported(self, word: str) -> int:
        return _reported("".join(self.lines), word)


def _reported(output: str, word: str) -> int:
    numbers = [int(line.split()[1]) for line in output.splitlines() if line.startswith(word + " ")]
    return max(numbers, default=0)


def _reopened_state(path, wal=True):
    db, kv, win = txn_workload.open_database(str(path), wal)
    try:
        return db.committed_offset("txn") or 0, txn_workload.state_of(kv, win)
    finally:
        db.close()


@pytest.mark.parametrize("limit", [-1, 300])
def test_kill_at_random_instants_with_wal(tmp_path, limit):
    rng = random.Random(limit)
    path = tmp_path / "db"
    seed = 11
    offset = 0
    for round_ in range(8):
        writer = Writer(path, seed, "--limit", str(limit))
        # killed at a random instant after at least a few more commits, so every round works
        writer.wait_for("committed", offset + 3)
        time.sleep(rng.uniform(0.0, 0.2))
        writer.kill()
        # every reported commit survives; the one in flight may or may not have landed
        last = max(writer.reported("opened"), writer.reported("committed"))
        offset, state = _reopened_state(path)
        assert last <= offset <= last + 1
        assert state == txn_workload.expected(seed, offset)


@pytest.mark.parametrize("limit", [-1, 300])
def test_kill_at_random_instants_without_wal(tmp_path, limit):
    path = tmp_path / "db"
    seed = 12
    offset = 0
    for round_ in range(6):
        # killed while commits that no flush covers may be held in memory: the WAL is off,
        # so those are lost (spilled commits are flushed when they complete)
        target = offset + 2 + round_
        target += 1 if target % 4 == 0 else 0
        writer = Writer(path, seed, "--no-wal", "--limit", str(limit), "--flush-every", "4", "--max", str(target), "--hold")
        writer.wait_for("holding", 0)
        writer.kill()
        committed, flushed = writer.reported("committed"), writer.reported("flushed")
        offset, state = _reopened_state(path, wal=False)
        assert flushed <= offset <= committed  # one consistent version, no newer than the last commit
        assert state == txn_workload.expected(seed, offset)
        if limit < 0:
            assert offset < committed  # commits kept in memtables only really were lost


# (fault point, occurrence, memory limit, whether the killed transaction is committed)
KILL_POINTS = [
    ("commit:before-write", 5, -1, False),
    ("commit:after-write", 5, -1, True),
    ("spill:before-last-write", 7, 300, False),
    ("spill:after-write", 7, 300, False),
    ("commit:after-spill", 5, 300, False),
    ("commit:after-marker", 5, 300, True),
    ("apply:after-chunk", 9, 300, True),
    ("commit:after-apply", 5, 300, True),
]


@pytest.mark.parametrize("point,nth,limit,committed", KILL_POINTS)
def test_kill_at_each_protocol_step(tmp_path, point, nth, limit, committed):
    path = tmp_path / "db"
    seed = 21
    writer = Writer(path, seed, "--limit", str(limit), env={"SPARK_STATESTORE_FAULT": f"{point}@{nth}"})
    assert writer.finish() == -signal.SIGKILL, writer.stderr()
    last = writer.reported("committed")
    offset, state = _reopened_state(path)
    if point.startswith("spill:"):
        # a spill happens while writing or at the start of a commit: never past the commit point
        assert offset == last
    else:
        assert offset == (last + 1 if committed else last)
    assert state == txn_workload.expected(seed, offset)


@pytest.mark.parametrize("wal", [True, False])
@pytest.mark.parametrize("point", ["spill:before-last-write", "spill:after-write"])
def test_kill_in_a_spilling_put_many_leaves_the_last_commit(tmp_path, point, wal):
    """Killed while a `put_many` spills (its second chunk passed the limit): before the
    spill's last write batch (part of the transaction staged; on disk with the WAL) or after
    it. The reopened database holds exactly the last commit: nothing of the killed
    transaction, no staging left, nothing committed lost, also without the WAL (a spilled
    commit is flushed when it completes)."""
    path = tmp_path / "db"
    seed = 41
    args = ["--bulk", "--limit", str(txn_workload.BULK_LIMIT), "--max", "3"]
    args += [] if wal else ["--no-wal"]
    # each transaction spills twice (txn_workload.BULK_LIMIT): the fifth spill is in the
    # put_many of transaction 3
    writer = Writer(path, seed, *args, env={"SPARK_STATESTORE_FAULT": f"{point}@5"})
    assert writer.finish() == -signal.SIGKILL, writer.stderr()
    assert (writer.reported("committed"), writer.reported("writing"), writer.reported("written")) == (2, 3, 2)
    staged = [n for n in rocksdict.Rdict.list_cf(str(path)) if n.startswith(STAGING_PREFIX)]
    assert staged, "the killed transaction had not spilled: the kill was not where this test means it"
    offset, state = _reopened_state(path, wal)
    assert offset == 2
    assert state == txn_workload.expected(seed, 2, bulk=True)
    assert not [n for n in rocksdict.Rdict.list_cf(str(path)) if n.startswith(STAGING_PREFIX)]


def test_kill_during_recovery_is_repaired_by_recovering_again(tmp_path):
    path = tmp_path / "db"
    seed = 31
    writer = Writer(path, seed, "--limit", "300", env={"SPARK_STATESTORE_FAULT": "apply:after-chunk@6"})
    assert writer.finish() == -signal.SIGKILL
    last = writer.reported("committed")
    # the next opener is killed while it re-applies the interrupted commit
    writer = Writer(path, seed, "--limit", "300", "--max", "0", env={"SPARK_STATESTORE_FAULT": "apply:after-chunk"})
    assert writer.finish() == -signal.SIGKILL
    offset, state = _reopened_state(path)
    assert offset == last + 1
    assert state == txn_workload.expected(seed, offset)


BIG_TRANSACTION = """
import sys, threading
from spark_statestore.txn import TransactionalDatabase
# small memtables: RocksDB flushes on its own while the commit applies its chunks
db = TransactionalDatabase(sys.argv[1], wal=False, uncommitted_max_bytes=64 << 10,
                           write_buffer_bytes=64 << 10, commit_chunk_bytes=16 << 10)
kv = db.key_value_store("kv")
for i in range(3000):
    kv.put(b"k%06d" % i, b"v" * 1000)
db.commit({"txn": 1})
print("committed", flush=True)
threading.Event().wait()
"""


@pytest.mark.parametrize("trial", range(3))
def test_spilled_commit_without_wal_reopens_whole_after_a_kill(tmp_path, trial):
    """WAL off: a spilled commit that returned is whole or absent after a kill, never half
    applied under its offsets (automatic flushes persist the commit marker mid-apply)."""
    path = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-c", BIG_TRANSACTION, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "committed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    db = TransactionalDatabase(str(path), wal=False)
    try:
        rows = sum(1 for _ in db.key_value_store("kv").all())
        assert (db.committed_offset("txn"), rows) in ((1, 3000), (None, 0))
    finally:
        db.close()
