"""What the durable state is trusted for: crafted manifests, deleted changelogs, changed
declarations, failed attempts seen through a record cache or a coarse filesystem clock,
rolled-back queries, files that vanish during a restore, and stray names."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow.fs as pafs
import pytest

import partition_workload as wl
from spark_statestore import MissingStateError, Serdes, Stores, ThreadCache
from spark_statestore.checkpoint.files import snapshot_versions
from spark_statestore.faults import injected
from spark_statestore.partition import (
    LayoutMismatchError,
    PartitionOptions,
    PartitionState,
    StoreSpec,
    WorkerResources,
)
from spark_statestore.txn import TransactionalDatabase


run = wl.run


def partition_root(checkpoint: str) -> str:
    return os.path.join(checkpoint, "statestore", "0")


# -- crafted snapshot manifests -------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../../escaped", "/tmp/absolute-escape", "sub/dir", "..", ".hidden"])
def test_manifest_names_are_data_never_paths(dirs, tmp_path, name):
    checkpoint, local = dirs
    run(checkpoint, local, 8, snapshot_interval=3, min_batches_to_retain=50)
    manifest_path = os.path.join(partition_root(checkpoint), "snapshots", "5.manifest")
    manifest = json.load(open(manifest_path))
    manifest["files"][0]["name"] = name
    manifest["files"][0]["durable"] = "snapshots/5/" + name
    json.dump(manifest, open(manifest_path, "w"))
    fresh = str(tmp_path / "fresh")
    state = wl.partition_state(checkpoint, fresh)
    state.open(8)  # snapshot 5 refused; snapshot 2 and the changelogs serve
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 7)
    state.close()
    # where the names would lead if they were joined to <local>/<hash>/0/db
    for path in (os.path.join(fresh, "escaped"), "/tmp/absolute-escape", os.path.join(str(tmp_path), "escaped")):
        assert not os.path.exists(path), f"a crafted manifest wrote {path}"


# -- versions that must exist -------------------------------------------------------------


def test_a_deleted_newest_changelog_is_an_error_not_an_older_state(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 4)
    os.remove(os.path.join(partition_root(checkpoint), "3.changelog"))
    for where in (local, str(tmp_path / "new-executor")):  # the old executor still has its copy
        state = wl.partition_state(checkpoint, where)
        with pytest.raises(MissingStateError, match=r"3\.changelog"):
            state.open(4)


def test_a_deleted_newest_changelog_is_noticed_by_its_publisher_when_versions_may_be_skipped(dirs):
    checkpoint, local = dirs
    run(checkpoint, local, 4)
    os.remove(os.path.join(partition_root(checkpoint), "3.changelog"))
    state = wl.partition_state(checkpoint, local, every_batch=False)
    with pytest.raises(MissingStateError, match=r"3\.changelog \(version 3\).*published but is missing"):
        state.open(4)


def test_versions_without_changelogs_are_fine_when_batches_may_skip_them(dirs, tmp_path):
    checkpoint, local = dirs
    specs = [StoreSpec.key_value("kv")]
    for batch in (0, 1, 4):  # batches 2 and 3 never opened this partition
        state = PartitionState(checkpoint, 0, specs, WorkerResources(local), PartitionOptions(every_batch=False))
        state.open(batch)
        state.store("kv").put(b"k", b"%d" % batch)
        state.prepare()
        state.close()
    for where in (local, str(tmp_path / "new")):
        state = PartitionState(checkpoint, 0, specs, WorkerResources(where), PartitionOptions(every_batch=False))
        state.open(5)
        assert state.store("kv").get(b"k") == b"4"
        state.close()


# -- declarations are kept with the state --------------------------------------------------

CHANGES = {
    "key-value to window": [StoreSpec.window("s", 100, 10)],
    "window size": None,
    "retain duplicates": None,
    "key serde": [StoreSpec.key_value("s", key_serde=Serdes.int64_key().identity)],
}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("snapshots", [False, True])
def test_a_store_declared_differently_is_refused_everywhere(dirs, tmp_path, change, snapshots):
    checkpoint, local = dirs
    window = change in ("window size", "retain duplicates")
    original = [StoreSpec.window("s", 100, 10)] if window else [StoreSpec.key_value("s")]
    changed = {
        "window size": [StoreSpec.window("s", 100, 20)],
        "retain duplicates": [StoreSpec.window("s", 100, 10, retain_duplicates=True)],
    }.get(change) or CHANGES[change]
    for batch in range(5):
        options = PartitionOptions(snapshot_interval=2 if snapshots else 100)
        state = PartitionState(checkpoint, 0, original, WorkerResources(local), options)
        state.open(batch)
        store = state.store("s")
        store.put(b"k%d" % batch, b"v", batch) if window else store.put(b"k%d" % batch, b"v")
        state.prepare()
        state.close()
        state.wait_for_snapshots()
    for where in (local, str(tmp_path / "new-executor")):
        state = PartitionState(checkpoint, 0, changed, WorkerResources(where))
        with pytest.raises(LayoutMismatchError, match="store 's' of the state .* was created as"):
            state.open(5)
    state = PartitionState(checkpoint, 0, original, WorkerResources(str(tmp_path / "another")))
    state.open(5)  # the original declaration still opens it
    state.close()


# -- a version is identified by its content, not by its number --------------------------------


def _attempt(checkpoint, local, batch, value, cache=None, filesystem=None):
    resources = WorkerResources(local, cache=cache)
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], resources, filesystem=filesystem)
    state.open(batch)
    state.store("kv").put(b"k", value)
    state.prepare()
    state.close()
    return state


def test_a_worker_cache_never_serves_a_failed_attempts_values(dirs, tmp_path):
    checkpoint, w1 = dirs
    w2 = str(tmp_path / "worker-2")
    cache = ThreadCache(1 << 20)
    _attempt(checkpoint, w1, 0, b"batch-0", cache=cache)
    _attempt(checkpoint, w1, 1, b"failed-attempt", cache=cache)  # prepared, then the batch failed
    _attempt(checkpoint, w2, 1, b"retry-attempt")  # the retry on another worker commits
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(w1, cache=cache))
    state.open(2)
    assert state.store("kv").get(b"k") == b"retry-attempt"
    state.close()


class SecondsClock(wl.LocalAsObjectStore):
    """A local filesystem whose modification times have 1-second resolution (as S3's)."""

    def info(self, info: pafs.FileInfo) -> pafs.FileInfo:
        if info.mtime_ns is None:
            return info
        return pafs.FileInfo(info.path, info.type, size=info.size, mtime_ns=info.mtime_ns // 10**9 * 10**9)


def test_a_retry_of_the_same_size_in_the_same_second_is_not_taken_for_the_local_copy(dirs, tmp_path):
    checkpoint, w1 = dirs
    w2 = str(tmp_path / "worker-2")
    fs = pafs.PyFileSystem(SecondsClock())  # an object store to DurableDir: puts, no renames
    os.makedirs(partition_root(checkpoint))
    _attempt(checkpoint, w1, 0, b"zero", filesystem=fs)
    _attempt(checkpoint, w1, 1, b"AAAA", filesystem=fs)  # the failed attempt, published
    _attempt(checkpoint, w2, 1, b"BBBB", filesystem=fs)  # the retry: same size, same second
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(w1), filesystem=fs)
    state.open(2)
    assert state.store("kv").get(b"k") == b"BBBB"
    state.close()


def test_a_rolled_back_query_never_reads_the_abandoned_runs_snapshots(dirs, tmp_path):
    checkpoint, local = dirs
    kwargs = dict(snapshot_interval=3, min_batches_to_retain=50)
    run(checkpoint, local, 11, seed=1, **kwargs)  # snapshots of 2, 5 and 8
    assert snapshot_versions(wl.partition_state(checkpoint, local).durable) == [2, 5, 8]
    # the user deletes the commits (and offsets) after batch 6 and reruns with other input
    with open(wl.commit_log(checkpoint), "w") as f:
        f.writelines(f"{b}\n" for b in range(7))
    run(checkpoint, local, 9, seed=2, **kwargs)  # batches 7 and 8 again
    kv = Stores.in_memory_key_value_store("kv")
    win = Stores.in_memory_window_store("win", wl.RETENTION, wl.SIZE)
    for batch in range(9):
        wl.apply_ops(wl.batch_ops(1 if batch < 7 else 2, batch), kv, win)
    expected = wl.state_of(kv, win)
    assert wl.read_state(checkpoint, str(tmp_path / "new-executor")) == expected
    assert wl.read_state(checkpoint, local) == expected
    # and retention never takes the abandoned snapshot 8 for a base
    run(checkpoint, local, 13, seed=2, snapshot_interval=3, min_batches_to_retain=3)
    assert wl.read_state(checkpoint, str(tmp_path / "after-retention")) == wl.read_state(checkpoint, local)


# -- errors of the right kind --------------------------------------------------------------


def test_a_changelog_vanishing_during_a_restore_is_a_missing_state_error(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 6, snapshot_interval=100)

    def retention_runs(point):
        if point == "recovery:after-listing":
            for version in range(3):
                path = os.path.join(partition_root(checkpoint), f"{version}.changelog")
                if os.path.exists(path):
                    os.remove(path)

    state = wl.partition_state(checkpoint, str(tmp_path / "fresh"))
    with injected(retention_runs), pytest.raises(MissingStateError, match=r"oldest changelog \(3\) builds on version 2"):
        state.open(6)  # listed again after the files vanished: what is left cannot make version 5


def test_stray_files_in_the_checkpoint_location_are_ignored(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 3)
    for name in ("².changelog", "1a.changelog", "007.changelog", "notes.txt"):
        open(os.path.join(partition_root(checkpoint), name), "w").write("stray")
    os.makedirs(os.path.join(partition_root(checkpoint), "snapshots"), exist_ok=True)
    open(os.path.join(partition_root(checkpoint), "snapshots", "³.manifest"), "w").write("stray")
    assert wl.read_state(checkpoint, local) == wl.expected(1, 2)
    assert wl.read_state(checkpoint, str(tmp_path / "fresh")) == wl.expected(1, 2)
    os.makedirs(os.path.join(local, "x"), exist_ok=True)
    state = wl.partition_state(checkpoint, local)
    os.makedirs(state.local.changelog_dir, exist_ok=True)
    open(os.path.join(state.local.changelog_dir, "1a.changelog"), "w").write("stray")
    state.open(3)
    state.close()


def test_database_argument_errors_name_the_parameter(tmp_path):
    db = TransactionalDatabase(str(tmp_path / "db"))
    with pytest.raises(ValueError, match="window_size cannot be negative"):
        db.window_store("w", 100, -1)
    with pytest.raises(ValueError, match="retention period of the window store w must be no smaller"):
        db.window_store("w", 5, 10)
    with pytest.raises(ValueError, match="retention_period cannot be negative"):
        db.window_store("w", -5, 0)
    with pytest.raises(ValueError, match="name must not be empty"):
        db.key_value_store("")
    with pytest.raises(TypeError, match="name cannot be None"):
        db.key_value_store(None)
    with pytest.raises(ValueError, match="name must not contain NUL"):
        db.key_value_store("a\x00b")
    kv = db.key_value_store("kv")
    with pytest.raises(ValueError, match="offsets key must be valid Unicode"):
        db.commit({"\udc80": 1})
    with pytest.raises(TypeError, match="offsets keys must be str"):
        db.commit({1: 1})
    db.close()
    with pytest.raises(TypeError, match="lock_timeout must be a number of seconds, got str: 'x'"):
        TransactionalDatabase(str(tmp_path / "db"), lock_timeout="x")
    with pytest.raises(TypeError, match="lock_timeout must be a number of seconds"):
        PartitionState(str(tmp_path), 0, [], WorkerResources(str(tmp_path / "l")), PartitionOptions(lock_timeout="x"))
    typed = Stores.in_memory_key_value_store("t").typed(Serdes.string(), Serdes.int64())
    with pytest.raises(TypeError, match="key must be a str, got int: 5"):
        typed.put(5, 1)
    with pytest.raises(TypeError, match="key cannot be None"):
        typed.put(None, 1)
    with pytest.raises(TypeError, match="value must be an int, got str: 'x'"):
        typed.put("a", "x")
    json_keys = Stores.in_memory_key_value_store("j").typed(Serdes.json(), Serdes.json())
    with pytest.raises(TypeError, match="key cannot be None"):
        json_keys.get(None)
    del kv
    shutil.rmtree(tmp_path / "db")
