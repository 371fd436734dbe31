"""Damaged local RocksDB files: reads raise CorruptStateError naming the file (never a
silently short result), the damaged copy is rebuilt from the durable state, and a
snapshot never uploads a file RocksDB cannot read."""

from __future__ import annotations

import glob
import os

import pytest
import rocksdict

import partition_workload as wl
from spark_statestore import CorruptStateError, Serdes
from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources
from spark_statestore.txn import TransactionalDatabase

ROWS = 20_000


def _flip_a_bit_in_the_largest_sst(db_dir: str) -> str:
    ssts = sorted(glob.glob(os.path.join(db_dir, "*.sst")), key=os.path.getsize)
    assert ssts, f"no SST files in {db_dir}"
    victim = ssts[-1]
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) // 3)  # inside the data blocks, before index and footer
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    return victim


def _database_with_rows(path: str) -> None:
    db = TransactionalDatabase(path)
    kv = db.key_value_store("kv")
    for i in range(ROWS):
        kv.put(b"key-%06d" % i, b"value-%06d" % i)
    db.commit()
    db.flush()
    db.close()


def test_scans_and_gets_of_a_damaged_file_raise_naming_it(tmp_path):
    path = str(tmp_path / "db")
    _database_with_rows(path)
    victim = _flip_a_bit_in_the_largest_sst(path)
    db = TransactionalDatabase(path)
    kv = db.key_value_store("kv")
    with pytest.raises(CorruptStateError, match=os.path.basename(victim)):
        sum(1 for _ in kv.all())
    with pytest.raises(CorruptStateError, match=os.path.basename(victim)):
        sum(1 for _ in kv.reverse_range(None, None))
    failures = 0
    for i in range(0, ROWS, 97):
        try:
            kv.get(b"key-%06d" % i)
        except CorruptStateError as e:
            assert os.path.basename(victim) in str(e)
            failures += 1
    assert failures > 0  # some key lives in the damaged block, and none fails otherwise
    db.close()
    # the directory is marked: it is not opened again as if nothing happened
    with pytest.raises(CorruptStateError, match="reported damaged"):
        TransactionalDatabase(path)


def _batches(checkpoint: str, local: str, batches: range, **kwargs) -> None:
    for batch in batches:
        state = wl.partition_state(checkpoint, local, **kwargs)
        state.open(batch)
        kv = state.store("kv")
        for i in range(batch * 2000, (batch + 1) * 2000):
            kv.put(b"key-%06d" % i, b"value-%d" % batch)
        state.prepare()
        state.close()
        state.wait_for_snapshots()
        with open(wl.commit_log(checkpoint), "a") as f:
            f.write(f"{batch}\n")


def _expected(batches: int) -> dict:
    return {b"key-%06d" % i: b"value-%d" % (i // 2000) for i in range(batches * 2000)}


SPECS = [StoreSpec.key_value("kv")]


def test_a_damaged_local_copy_is_rebuilt_from_the_durable_state(tmp_path):
    checkpoint, local = str(tmp_path / "ck"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    kwargs = dict(snapshot_interval=3)
    _batches(checkpoint, local, range(8), **kwargs)
    state = PartitionState(checkpoint, 0, SPECS, WorkerResources(local), PartitionOptions(**kwargs))
    _flip_a_bit_in_the_largest_sst(state.local.db_path)
    state.open(8)
    with pytest.raises(CorruptStateError, match=r"\.sst"):
        dict(state.store("kv").all())  # the task fails
    state.close()
    state.open(8)  # the retry rebuilds the copy instead of reading the damaged one again
    assert state.metrics.restored
    assert dict(state.store("kv").all()) == _expected(8)
    state.close()


@pytest.mark.parametrize("columns", [True, False], ids=["columns file", "no columns file"])
def test_a_snapshot_never_uploads_a_damaged_file(tmp_path, columns):
    """With or without its columns file (`snapshot_columns`), a snapshot is read back
    with checksums before upload: a damaged SST file is refused, nothing is published."""
    checkpoint, local = str(tmp_path / "ck"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    _batches(checkpoint, local, range(4), snapshot_interval=100)
    options = PartitionOptions(snapshot_interval=3, snapshot_columns=columns)
    state = PartitionState(checkpoint, 0, SPECS, WorkerResources(local), options)
    _flip_a_bit_in_the_largest_sst(state.local.db_path)
    state.open(4)  # a snapshot of version 3 is due: taken, verified, refused
    state.close()
    with pytest.raises(CorruptStateError, match="cannot read"):
        state.wait_for_snapshots()
    assert not glob.glob(os.path.join(checkpoint, "statestore", "0", "snapshots", "*.manifest"))
    fresh = PartitionState(checkpoint, 0, SPECS, WorkerResources(str(tmp_path / "fresh")))
    fresh.open(4)
    assert dict(fresh.store("kv").all()) == _expected(4)
    fresh.close()


def test_window_reads_by_one_reseeked_iterator_raise_for_a_damaged_file_and_release_it(tmp_path):
    """`fetch` and key-range `fetch_range` reuse one RocksDB iterator for all their
    seeks: a damaged block raises naming the file (never a short result), and the error,
    kept, does not keep the database open after `close()`."""
    path = str(tmp_path / "db")
    db = TransactionalDatabase(path)
    store = db.window_store("w", 10**6, 10)
    for start in range(0, 200, 10):
        for i in range(ROWS // 20):
            store.put(b"key-%06d" % i, b"value-%06d" % i, start)
    db.commit()
    db.flush()
    db.close()
    victim = os.path.basename(_flip_a_bit_in_the_largest_sst(path))
    db = TransactionalDatabase(path)
    store = db.window_store("w", 10**6, 10)
    typed = store.typed(Serdes.bytes(), Serdes.bytes())
    errors = []
    reads = [
        lambda: store.fetch_range(b"key-000000", b"key-999999", 0, 200),
        lambda: typed.fetch_range(b"key-000000", b"key-999999", 0, 200),
        *[(lambda i=i: store.fetch(b"key-%06d" % i, 0, 200)) for i in range(0, ROWS // 20, 13)],
    ]
    for read in reads:
        try:
            sum(1 for _ in read())
        except CorruptStateError as e:
            assert victim in str(e)
            errors.append(e)
    assert len(errors) >= 3  # both range reads and some fetch met the damaged block
    db.close()
    rocksdict.Rdict(path, rocksdict.Options(raw_mode=True)).close()  # the lock was released
