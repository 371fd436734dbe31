"""Partitions kept open between batches (`OpenCopies`): reuse, correctness against the
model, release on request from other openers (this process and others), limits, kills,
crafted RELEASE files."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from partition_workload import (
    SPECS,
    batch_ops,
    commit_log,
    expected,
    partition_state,
    read_state,
    run,
    run_batch,
)
from spark_statestore import ThreadCache
from spark_statestore.errors import StoreClosedError, StoreLockedError
from spark_statestore.partition import PartitionState, WorkerResources
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.open_copies import OpenCopies
from paths import SUPPORT

HERE = str(SUPPORT)


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def released(copies: OpenCopies) -> None:
    """Wait until the pool holds nothing: the thread counts a copy it releases on request
    until just after its lock is free, so the opener it let go to may finish before that."""
    wait_until(lambda: len(copies) == 0, "the pool to count the released copy no more")


def prepare_one(checkpoint: str, local: str, batch: int, key: bytes, value: bytes, **kwargs) -> None:
    """One attempt of `batch` that writes `key` and prepares (Spark's commit not recorded)."""
    state = partition_state(checkpoint, local, **kwargs)
    state.open(batch)
    state.store("kv").put(key, value)
    state.prepare()
    state.close()


@pytest.fixture
def copies():
    pool = OpenCopies(max_copies=4, idle_seconds=3600)
    yield pool
    pool.close()


@pytest.mark.parametrize(
    "options",
    [{}, {"cache": "yes"}, {"uncommitted_max_bytes": 64}, {"snapshot_interval": 3, "min_batches_to_retain": 4}],
    ids=["plain", "cache", "spilling", "snapshots"],
)
def test_kept_copies_give_the_models_state(tmp_path, copies, options):
    """Every batch after the first reuses the copy kept open, and the state is the model's
    (with the record cache, with transactions that spill, with snapshots being taken)."""
    options = dict(options)
    if options.pop("cache", None):
        options["cache"] = ThreadCache(1 << 16)
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    kept = run(checkpoint, local, 25, seed=5, open_copies=copies, **options)
    assert kept == [False] + [True] * 24
    assert len(copies) == 1
    assert read_state(checkpoint, local, open_copies=copies) == expected(5, 24)
    copies.close()
    # a fresh process (no kept copy) and a fresh executor (no local copy) agree
    assert read_state(checkpoint, local) == expected(5, 24)
    assert read_state(checkpoint, str(tmp_path / "other")) == expected(5, 24)


@pytest.fixture
def pending_copies():
    """A pool that leaves the prepared batch pending until the next open."""
    pool = OpenCopies(max_copies=4, idle_seconds=3600, apply_ahead=False)
    yield pool
    pool.close()


def test_the_kept_database_is_reused_and_old_stores_are_closed(tmp_path, pending_copies):
    copies = pending_copies
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    state = partition_state(checkpoint, local, open_copies=copies)
    run_batch(state, 1, 0, checkpoint)
    state.open(1)
    db = state._db
    old = state.store("kv")
    old.put(b"a", b"1")
    state.prepare()
    state.close()
    with pytest.raises(StoreClosedError):
        old.put(b"b", b"2")  # a store of the last batch must not write into the next one
    state = partition_state(checkpoint, local, open_copies=copies)
    state.open(2)
    assert state._db is db and state.metrics.kept_open and state.metrics.changelogs_applied == 1
    assert state.store("kv").get(b"a") == b"1"
    assert state.store("kv").get(b"b") is None
    state.close()


def test_applied_ahead_the_next_open_has_nothing_to_apply(tmp_path, copies):
    """The thread committed the prepared batch into the kept copy while it waited: the
    next open, here or in an opener the keeper lets go to, starts at that version."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    for batches in (1, 2, 3):  # the thread settles each batch's copy before the next open takes it
        run(checkpoint, local, batches, seed=10, open_copies=copies)
        copies.settle()
    assert copies.applied_ahead == 3
    state = partition_state(checkpoint, local, open_copies=copies)
    state.open(3)
    assert state.metrics.kept_open and state.version == 2 and state.metrics.changelogs_applied == 0
    state.store("kv").put(b"k", b"v")
    state.prepare()
    state.close()
    copies.settle()
    other = partition_state(checkpoint, local, lock_timeout=30)
    other.open(4)
    assert not other.metrics.restored and other.metrics.changelogs_applied == 0 and other.version == 3
    assert other.store("kv").get(b"k") == b"v"
    other.close()


@pytest.mark.parametrize("ahead", [False, True], ids=["pending", "applied-ahead"])
def test_a_retried_batch_starts_from_the_version_before(tmp_path, ahead):
    """Batch 3 prepared but Spark did not commit it: its retry starts from version 2 (a
    pending transaction is dropped; a copy applied ahead is rebuilt)."""
    copies = OpenCopies(apply_ahead=ahead)
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 3, seed=2, open_copies=copies)
    prepare_one(checkpoint, local, 3, b"only-in-the-failed-attempt", b"x", open_copies=copies)
    copies.settle()
    state = partition_state(checkpoint, local, open_copies=copies)
    state.open(3)
    assert state.metrics.kept_open and state.version == 2
    assert state.metrics.restored is ahead
    assert state.store("kv").get(b"only-in-the-failed-attempt") is None
    state.close()
    run(checkpoint, local, 8, seed=2, open_copies=copies)
    copies.close()
    assert read_state(checkpoint, local) == expected(2, 7)


@pytest.mark.parametrize("ahead", [False, True], ids=["pending", "applied-ahead"])
def test_another_attempts_changelog_wins_over_the_kept_batch(tmp_path, ahead):
    """A late attempt on another executor published batch 3 after this one: the durable
    history builds on theirs, so the kept batch is dropped and theirs applied (pending),
    or the copy, which applied the losing batch ahead, is rebuilt."""
    copies = OpenCopies(apply_ahead=ahead)
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 3, seed=3, open_copies=copies)
    prepare_one(checkpoint, local, 3, b"k", b"mine", open_copies=copies)
    copies.settle()
    prepare_one(checkpoint, str(tmp_path / "executor-2"), 3, b"k", b"theirs")
    state = partition_state(checkpoint, local, open_copies=copies)
    state.open(4)
    assert state.metrics.kept_open and state.version == 3
    assert state.metrics.restored is ahead  # pending: theirs is applied to the kept copy
    assert state.store("kv").get(b"k") == b"theirs"
    state.close()
    copies.close()


def test_other_options_reopen_the_database(tmp_path, copies):
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 3, seed=4, open_copies=copies)
    state = partition_state(checkpoint, local, open_copies=copies, uncommitted_max_bytes=1 << 20)
    state.open(3)
    assert not state.metrics.kept_open and state.version == 2
    assert state._db.uncommitted_max_bytes == 1 << 20
    state.close()
    assert read_state(checkpoint, local) == expected(4, 2)


def test_an_opener_in_this_process_gets_the_partition(tmp_path, copies):
    """A state without the pool (or another pool) asks the keeper, which lets go."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 4, seed=6, open_copies=copies)
    assert len(copies) == 1
    assert read_state(checkpoint, local, lock_timeout=30) == expected(6, 3)
    assert copies.released_on_request == 1
    released(copies)


def test_a_copy_in_use_is_not_released(tmp_path, copies):
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 2, seed=7, open_copies=copies)
    state = partition_state(checkpoint, local, open_copies=copies)
    state.open(2)  # taken from the pool: in use
    other = partition_state(checkpoint, local, lock_timeout=0.5)
    with pytest.raises(StoreLockedError):
        other.open(2)
    assert copies.released_on_request == 0
    state.close()


def test_an_opener_in_another_process_gets_the_partition(tmp_path, copies):
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 5, seed=8, open_copies=copies)
    assert len(copies) == 1
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from partition_workload import run\n"
        "run(%r, %r, 9, seed=8, lock_timeout=30)\n"
    ) % (HERE, checkpoint, local)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    assert copies.released_on_request == 1
    released(copies)
    kept = run(checkpoint, local, 12, seed=8, open_copies=copies)  # back here: caught up
    assert kept == [False, True, True]
    assert read_state(checkpoint, local) == expected(8, 11)


def test_copies_beyond_the_limit_and_idle_copies_are_released(tmp_path):
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    pool = OpenCopies(max_copies=2, idle_seconds=3600)
    try:
        for partition in range(3):
            prepare_one(checkpoint, local, 0, b"p", b"%d" % partition, partition=partition, open_copies=pool)
        assert len(pool) == 2
        assert pool.take(LocalPartitionDir(local, checkpoint, 0).root) is None  # the oldest went
        held = LocalPartitionDir(local, checkpoint, 0)
        held.lock(0)  # and its lock is free
        held.unlock()
    finally:
        pool.close()
    idle = OpenCopies(max_copies=2, idle_seconds=3600)  # kept for sure until it is told otherwise
    try:
        prepare_one(checkpoint, local, 1, b"p", b"1", partition=1, open_copies=idle)
        assert len(idle) == 1
        idle.idle_seconds = 0.2  # read at each turn of the thread: the next keep wakes it
        prepare_one(checkpoint, local, 1, b"p", b"0", partition=0, open_copies=idle)
        wait_until(lambda: len(idle) == 0, "the idle copies to be released")
        for partition in (0, 1):
            free = LocalPartitionDir(local, checkpoint, partition)
            free.lock(0)
            free.unlock()
    finally:
        idle.close()


def test_a_pool_that_keeps_nothing(tmp_path):
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    pool = OpenCopies(max_copies=0)
    kept = run(checkpoint, local, 3, seed=9, open_copies=pool)
    assert kept == [False, False, False] and len(pool) == 0
    with pytest.raises(ValueError, match="max_copies"):
        OpenCopies(max_copies=-1)
    with pytest.raises(ValueError, match="idle_seconds"):
        OpenCopies(idle_seconds=-1)
    with pytest.raises(TypeError, match="apply_ahead"):
        OpenCopies(apply_ahead="yes")


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_killed_while_keeping_a_copy(tmp_path, seed):
    """kill -9 of a process that keeps the partition open (its memtables are lost): the
    next opener, in another process, gets the committed state."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    script = os.path.join(HERE, "partition_workload.py")
    proc = subprocess.Popen(
        [sys.executable, script, checkpoint, local, "--seed", str(seed), "--batches", str(6 + seed % 3),
         "--keep-open", "2", "--then-wait", "--limit", "200"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        for line in proc.stdout:
            if line.strip() == "waiting":
                break
        else:
            raise AssertionError(f"the workload ended early with {proc.wait()}")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    last = 5 + seed % 3
    assert read_state(checkpoint, local) == expected(seed, last)
    run(checkpoint, local, last + 4, seed=seed)
    assert read_state(checkpoint, local) == expected(seed, last + 3)


def test_killed_in_the_middle_of_a_batch_that_reused_its_copy(tmp_path):
    """kill -9 while a batch that reused its kept copy is half written (after the pending
    transaction committed): the batch is re-run from the committed state."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    code = (
        "import os, signal, sys; sys.path.insert(0, %r)\n"
        "from partition_workload import partition_state, run, batch_ops, apply_ops\n"
        "from spark_statestore.partition.open_copies import OpenCopies\n"
        "pool = OpenCopies()\n"
        "run(%r, %r, 5, seed=14, open_copies=pool)\n"
        "state = partition_state(%r, %r, open_copies=pool)\n"
        "state.open(5)\n"
        "assert state.metrics.kept_open\n"
        "apply_ops(batch_ops(99, 5), state.store('kv'), state.store('win'))\n"
        "state.store('kv').put(b'never', b'committed')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    ) % (HERE, checkpoint, local, checkpoint, local)
    proc = subprocess.run([sys.executable, "-c", code], timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert read_state(checkpoint, local) == expected(14, 4)
    run(checkpoint, local, 8, seed=14)
    assert read_state(checkpoint, local) == expected(14, 7)


def test_crafted_release_files(tmp_path, copies):
    """Whatever is where the RELEASE FIFO goes is replaced by one; a requester writes only
    into a FIFO (never a regular file, never through a link)."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    outside = tmp_path / "outside"
    outside.write_bytes(b"")
    copy_dir = LocalPartitionDir(local, checkpoint, 0)
    os.makedirs(copy_dir.root)
    for number, crafted in enumerate(("file", "link", "directory")):
        path = copy_dir.release_path
        if crafted == "file":
            with open(path, "wb") as f:
                f.write(b"")
            copy_dir.request_release()
            assert os.path.getsize(path) == 0
        elif crafted == "link":
            os.symlink(outside, path)
            copy_dir.request_release()
        else:
            os.mkdir(path)
            copy_dir.request_release()
        kept = run(checkpoint, local, 2 + number, seed=15, open_copies=copies)
        assert kept == ([False, True] if number == 0 else [False])
        assert stat.S_ISFIFO(os.lstat(path).st_mode)
        assert outside.read_bytes() == b""
        assert read_state(checkpoint, local, lock_timeout=30) == expected(15, 1 + number)
        released(copies)  # to the reader
        os.remove(path)


def test_a_flush_under_way_does_not_race_the_next_batch(tmp_path):
    """The pool's thread flushes a kept copy while the next batch takes it, many times
    over: the taker waits for the flush (rocksdict refuses concurrent use)."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    pool = OpenCopies()
    try:
        errors = []

        def batches() -> None:
            try:
                run(checkpoint, local, 60, seed=16, open_copies=pool)
            except BaseException as e:  # reported below
                errors.append(e)

        worker = threading.Thread(target=batches)
        worker.start()
        worker.join(600)
        assert not errors, errors
        assert read_state(checkpoint, local, open_copies=pool) == expected(16, 59)
    finally:
        pool.close()
    with open(commit_log(checkpoint)) as f:
        assert len(f.read().split()) == 60


def test_open_copies_is_checked(tmp_path):
    with pytest.raises(TypeError, match="open_copies"):
        PartitionState(str(tmp_path / "cp"), 0, SPECS, WorkerResources(str(tmp_path / "l"), open_copies="yes"))


def test_a_kept_copy_whose_directory_was_deleted_is_not_used(tmp_path, copies):
    """The local directory is removed (a cleanup, a 'new executor') while a copy of it is
    kept open: the next batch restores from the durable state instead of using it."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 4, seed=17, open_copies=copies)
    assert len(copies) == 1
    os.rename(local, local + ".gone")  # RocksDB's own threads may still write files there
    shutil.rmtree(local + ".gone", ignore_errors=True)
    state = partition_state(checkpoint, local, open_copies=copies)
    state.open(4)
    assert not state.metrics.kept_open and state.metrics.restored
    state.close()
    run(checkpoint, local, 7, seed=17, open_copies=copies)
    assert read_state(checkpoint, local) == expected(17, 6)


@pytest.mark.parametrize(
    "point", ["flush:after-data@1", "ahead:after-marker@1", "ahead:after-commit@1", "flush:after-data@2"]
)
@pytest.mark.parametrize("committed", [False, True], ids=["retried", "committed"])
def test_killed_while_applying_a_batch_ahead(tmp_path, point, committed):
    """kill -9 at each step of applying a batch ahead (the writes may reach disk before the
    metadata saying which version they belong to), in a copy that had just caught up on
    the batch before: whether Spark then commits the batch or runs it again, the state is
    the model's."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 3, seed=18)  # the copy is at 1: opening batch 3 applies changelog 2
    code = (
        "import os, signal, sys, time; sys.path.insert(0, %r)\n"
        "from partition_workload import apply_ops, batch_ops, partition_state\n"
        "from spark_statestore.faults import injected\n"
        "from spark_statestore.partition.open_copies import OpenCopies\n"
        "point, nth = %r.split('@')\n"
        "seen = []\n"
        "def kill(name):\n"
        "    seen.extend([name] if name == point else [])\n"
        "    if len(seen) == int(nth):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "pool = OpenCopies()\n"
        "state = partition_state(%r, %r, open_copies=pool)\n"
        "state.open(3)\n"
        "apply_ops(batch_ops(18, 3), state.store('kv'), state.store('win'))\n"
        "state.prepare()\n"
        "with injected(kill):\n"
        "    state.close()\n"
        "    time.sleep(60)\n"
    ) % (HERE, point, checkpoint, local)
    proc = subprocess.run([sys.executable, "-c", code], timeout=300)
    assert proc.returncode == -signal.SIGKILL
    if committed:
        with open(commit_log(checkpoint), "a") as f:
            f.write("3\n")
    assert read_state(checkpoint, local) == expected(18, 3 if committed else 2)
    run(checkpoint, local, 7, seed=18)
    assert read_state(checkpoint, local) == expected(18, 6)


def test_a_kept_copy_is_not_reused_for_other_stores(tmp_path, copies):
    """The query dropped a store since the copy was kept: the database is opened again for
    the stores declared now (the kept one would write the dropped store's changes)."""
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    run(checkpoint, local, 3, seed=19, open_copies=copies)
    state = PartitionState(checkpoint, 0, SPECS[:1], WorkerResources(local, open_copies=copies))
    state.open(3)
    assert not state.metrics.kept_open
    state.store("kv").put(b"a", b"1")
    state.prepare()
    state.close()
    state = PartitionState(checkpoint, 0, SPECS[:1], WorkerResources(local, open_copies=copies))
    state.open(4)
    assert state.metrics.kept_open and state.store("kv").get(b"a") == b"1"
    state.close()


def test_pools_leave_no_descriptors_and_keep_nothing_once_closed(tmp_path):
    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    for _ in range(50):
        OpenCopies().close()
    assert descriptors() == before
    checkpoint, local = str(tmp_path / "cp"), str(tmp_path / "local")
    pool = OpenCopies()
    state = partition_state(checkpoint, local, open_copies=pool)
    state.open(0)
    state.prepare()
    pool.close()  # closed while the task runs: its partition is not kept
    state.close()
    assert len(pool) == 0
    free = LocalPartitionDir(local, checkpoint, 0)
    free.lock(0)
    free.unlock()
    pool.close()  # twice: nothing happens
