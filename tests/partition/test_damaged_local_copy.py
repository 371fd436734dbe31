"""A local copy with one damaged table file, whichever it is, costs at most the task that
found the damage: the retry, in the same process (Python workers are reused), rebuilds
the copy from the durable state (README: "the copy is marked damaged and rebuilt from the
durable state at the next open"); a copy kept open between tasks (`OpenCopies`) that
was reported damaged is released and rebuilt, never reused.

Found by the differential probe of the recovery restructuring (old and new code behave
the same here: these are not regressions of it)."""

from __future__ import annotations

import glob
import os

import partition_workload as wl
import pytest

from spark_statestore import CorruptStateError
from spark_statestore.partition.open_copies import OpenCopies
from spark_statestore.stores.damage import DAMAGE_MARKER, storage_error


def _damage(path: str) -> None:
    with open(path, "r+b") as f:
        f.write(b"\xde\xad\xbe\xef" * 4)  # the first block: its checksum fails


def _attempt(checkpoint: str, local: str, batch: int):
    """One task: open, read everything, close; returns the state read or the error."""
    state = wl.partition_state(checkpoint, local, snapshot_interval=100)
    try:
        state.open(batch)
        try:
            return wl.state_of(state.store("kv"), state.store("win"))
        finally:
            state.close()
    except Exception as e:  # noqa: BLE001 - the outcome is what is checked
        return e


def test_the_retry_after_any_damaged_table_file_rebuilds_the_copy(tmp_path):
    outcomes = {}
    for index in range(64):
        checkpoint, local = str(tmp_path / f"ck{index}"), str(tmp_path / f"local{index}")
        os.makedirs(checkpoint)
        wl.run(checkpoint, local, 4, snapshot_interval=100)
        tables = sorted(glob.glob(os.path.join(local, "*", "0", "db", "*.sst")))
        if index >= len(tables):
            break
        _damage(tables[index])
        first = _attempt(checkpoint, local, 4)
        retry = first if not isinstance(first, Exception) else _attempt(checkpoint, local, 4)
        name = os.path.basename(tables[index])
        if isinstance(first, Exception) and not isinstance(first, CorruptStateError):
            outcomes[name] = f"first attempt: {type(first).__name__}: {first}"[:300]
        elif retry != wl.expected(1, 3):
            outcomes[name] = f"retry: {type(retry).__name__}: {retry}"[:300]
    assert outcomes == {}


def _report_damage(local: str) -> None:
    """What a read that meets a damaged block of the local copy does (`storage_error` on
    RocksDB's error): the copy is marked damaged."""
    (db,) = glob.glob(os.path.join(local, "*", "0", "db"))
    rocksdb_error = Exception(f"Corruption: block checksum mismatch in {db}/000099.sst offset 0 size 1")
    error = storage_error(rocksdb_error)
    assert isinstance(error, CorruptStateError) and os.path.exists(os.path.join(db, DAMAGE_MARKER))


@pytest.fixture
def copies():
    pool = OpenCopies(max_copies=4, idle_seconds=3600)
    yield pool
    pool.close()


def test_a_kept_copy_reported_damaged_is_released_not_reused(tmp_path, copies):
    """Damage reported while the copy waits open (the thread's flush met it, say): the next
    open releases the copy and rebuilds it from the durable state."""
    checkpoint, local = str(tmp_path / "ck"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    wl.run(checkpoint, local, 4, seed=3, open_copies=copies)
    copies.settle()
    assert len(copies) == 1
    _report_damage(local)
    state = wl.partition_state(checkpoint, local, open_copies=copies)
    state.open(4)
    assert not state.metrics.kept_open and state.metrics.restored and len(copies) == 0
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(3, 3)
    state.close()
    wl.run(checkpoint, local, 7, seed=3, open_copies=copies)
    assert wl.read_state(checkpoint, local, open_copies=copies) == wl.expected(3, 6)


def test_a_copy_reported_damaged_during_its_batch_is_not_kept(tmp_path, copies):
    """A task met damage but still prepared its batch (its code caught the error): the copy
    is closed and unlocked instead of kept, and the next open rebuilds it."""
    checkpoint, local = str(tmp_path / "ck"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    wl.run(checkpoint, local, 4, seed=4, open_copies=copies)
    state = wl.partition_state(checkpoint, local, open_copies=copies)
    wl.run_batch(state, 4, 4, checkpoint)  # the kept copy is reused ...
    assert state.metrics.kept_open and len(copies) == 1
    state = wl.partition_state(checkpoint, local, open_copies=copies)
    state.open(5)
    wl.apply_ops(wl.batch_ops(4, 5), state.store("kv"), state.store("win"))
    _report_damage(local)  # ... and RocksDB reports damage in it during batch 5
    state.prepare()
    state.close()
    assert len(copies) == 0
    with open(wl.commit_log(checkpoint), "a") as f:
        f.write("5\n")
    other = wl.partition_state(checkpoint, local, lock_timeout=0)  # free: nobody keeps it
    other.open(6)
    assert other.metrics.restored
    assert wl.state_of(other.store("kv"), other.store("win")) == wl.expected(4, 5)
    other.close()
