"""The partition-state protocol: versions, changelogs, restore, snapshots, retention,
locking, damaged files, and concurrent attempts."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

import partition_workload as wl
from spark_statestore import CorruptStateError, MissingStateError, StoreLockedError, ThreadCache
from spark_statestore.faults import injected
from spark_statestore.checkpoint import Changelog
from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources
from spark_statestore.checkpoint.files import snapshot_versions


run = wl.run


def test_each_batch_sees_the_state_after_the_previous_one(dirs):
    checkpoint, local = dirs
    state = PartitionState(checkpoint, 3, [StoreSpec.key_value("kv")], WorkerResources(local))
    for batch in range(5):
        state.open(batch)
        kv = state.store("kv")
        assert state.version == batch - 1
        assert kv.get(b"batches") == (None if batch == 0 else b"%d" % batch)
        kv.put(b"batches", b"%d" % (batch + 1))
        assert kv.get(b"batches") == b"%d" % (batch + 1)  # reads see this batch's writes
        metrics = state.prepare()
        assert metrics.rows_written == 1 and metrics.changelog_bytes > 0
        state.close()
    assert sorted(os.listdir(os.path.join(checkpoint, "statestore", "3"))) == [f"{b}.changelog" for b in range(5)]


def test_matches_the_model_over_many_batches_with_and_without_cache(dirs):
    checkpoint, local = dirs
    run(checkpoint, local, 12, snapshot_interval=4, min_batches_to_retain=5)
    assert wl.read_state(checkpoint, local) == wl.expected(1, 11)
    run(checkpoint, local, 24, cache=ThreadCache(2000), snapshot_interval=4, min_batches_to_retain=5)
    assert wl.read_state(checkpoint, local) == wl.expected(1, 23)


def test_failed_attempts_are_discarded_and_redone(dirs):
    checkpoint, local = dirs
    run(checkpoint, local, 3)
    # an attempt of batch 3 that writes garbage and fails before prepare
    state = wl.partition_state(checkpoint, local)
    state.open(3)
    state.store("kv").put(b"garbage", b"x")
    state.close()
    # an attempt that prepares garbage, but the batch fails elsewhere and is re-run
    state.open(3)
    state.store("kv").put(b"garbage", b"y")
    state.prepare()
    state.close()
    run(checkpoint, local, 6)  # re-runs batch 3 properly, then 4 and 5
    assert wl.read_state(checkpoint, local) == wl.expected(1, 5)


def test_new_executor_restores_from_durable_state(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 15, snapshot_interval=4, min_batches_to_retain=5)
    fresh = str(tmp_path / "other-executor")
    state = wl.partition_state(checkpoint, fresh)
    state.open(15)
    assert state.metrics.restored
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 14)
    state.close()


def test_restore_without_any_snapshot_replays_every_changelog(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 6, snapshot_interval=100)
    assert snapshot_versions(wl.partition_state(checkpoint, local).durable) == []
    assert wl.read_state(checkpoint, str(tmp_path / "fresh")) == wl.expected(1, 5)


def test_local_copy_ahead_of_the_wanted_version_is_restored(dirs):
    checkpoint, local = dirs
    run(checkpoint, local, 10, snapshot_interval=3, min_batches_to_retain=20)
    # e.g. the query restarted from an older commit: the local copy is at 9, version 4 is wanted
    state = wl.partition_state(checkpoint, local)
    state.open(5)
    assert state.metrics.restored
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 4)
    state.close()


def test_a_local_copy_of_a_deleted_checkpoint_with_other_stores_is_dropped_not_refused(dirs):
    """The checkpoint deleted and the query started again at the same location with a
    store redeclared: the local copy left behind belongs to no durable history, so it is
    rebuilt, not refused as a change of this checkpoint's stores (which stays refused)."""
    from spark_statestore import StateStoreError

    checkpoint, local = dirs
    run(checkpoint, local, 3)  # "kv" and the window store "win"
    shutil.rmtree(checkpoint)
    os.makedirs(checkpoint)
    specs = [StoreSpec.key_value("win")]
    for batch in range(2):
        state = PartitionState(checkpoint, 0, specs, WorkerResources(local))
        state.open(batch)
        assert state.metrics.restored == (batch == 0)
        assert state.store("win").get(b"k") == (None if batch == 0 else b"v")
        state.store("win").put(b"k", b"v")
        state.prepare()
        state.close()
    redeclared = PartitionState(checkpoint, 0, [StoreSpec.window("win", 100, 10)], WorkerResources(local))
    with pytest.raises(StateStoreError, match="start from a new checkpoint location"):
        redeclared.open(2)


def _put_one(checkpoint: str, local: str, specs: list, batch: int) -> tuple[bytes | None, bool]:
    """Batch `batch` of partition 0 puts b"k" -> the batch id in "win": the value it read
    before, and whether the state was restored from durable files."""
    state = PartitionState(checkpoint, 0, specs, WorkerResources(local))
    state.open(batch)
    previous = state.store("win").get(b"k")
    state.store("win").put(b"k", b"%d" % batch)
    state.prepare()
    state.close()
    return previous, state.metrics.restored


def test_a_copy_of_a_deleted_checkpoint_behind_the_new_history_is_rebuilt_not_refused(dirs, tmp_path):
    """As above, but the new run went past the copy's version on another executor before
    the partition came back: the plan would bring the copy up with the new changelogs,
    which build on another version 1 than the copy's (it is off the history), so it is
    rebuilt rather than refused for its other stores."""
    from spark_statestore import StateStoreError

    checkpoint, local = dirs
    run(checkpoint, local, 2)  # "kv" and the window store "win", versions 0 and 1 here
    shutil.rmtree(checkpoint)
    os.makedirs(checkpoint)
    specs, elsewhere = [StoreSpec.key_value("win")], str(tmp_path / "other-executor")
    for batch in range(4):
        _put_one(checkpoint, elsewhere, specs, batch)
    assert _put_one(checkpoint, local, specs, 4) == (b"3", True)  # back on the first executor
    assert _put_one(checkpoint, local, specs, 5) == (b"4", False)
    # a copy on this history, behind it, with "win" redeclared: still refused
    redeclared = PartitionState(checkpoint, 0, [StoreSpec.window("win", 100, 10)], WorkerResources(elsewhere))
    with pytest.raises(StateStoreError, match="start from a new checkpoint location"):
        redeclared.open(6)


def test_corrupt_local_database_is_restored(dirs):
    checkpoint, local = dirs
    run(checkpoint, local, 5)
    state = wl.partition_state(checkpoint, local)
    os.remove(os.path.join(state.local.db_path, "CURRENT"))
    os.makedirs(os.path.join(state.local.db_path, "junk"), exist_ok=True)
    assert wl.read_state(checkpoint, local) == wl.expected(1, 4)


def test_stale_local_copy_behind_retention_is_restored(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 4, snapshot_interval=4, min_batches_to_retain=2)
    old_copy = str(tmp_path / "old-executor")
    shutil.copytree(local, old_copy)
    run(checkpoint, local, 16, snapshot_interval=4, min_batches_to_retain=2)
    durable = os.listdir(os.path.join(checkpoint, "statestore", "0"))
    assert "4.changelog" not in durable  # retention removed what the old copy would need
    assert wl.read_state(checkpoint, old_copy) == wl.expected(1, 15)


def test_stale_local_copy_asked_for_a_version_a_snapshot_covers_is_restored(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 4, snapshot_interval=4, min_batches_to_retain=2)
    old_copy = str(tmp_path / "old-executor")
    shutil.copytree(local, old_copy)  # at version 3
    run(checkpoint, local, 16, snapshot_interval=4, min_batches_to_retain=2)
    # version 11 is a snapshot; the changelogs up to it are gone, so none tells the old
    # copy that it is behind
    assert 11 in snapshot_versions(wl.partition_state(checkpoint, local).durable)
    state = wl.partition_state(checkpoint, old_copy)
    state.open(12)
    assert state.metrics.restored
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 11)
    state.close()


def test_damaged_local_changelog_copy_is_replaced_by_the_durable_one(dirs):
    checkpoint, local = dirs
    run(checkpoint, local, 3)
    state = wl.partition_state(checkpoint, local)
    state.open(3)
    apply = wl.batch_ops(1, 3)
    wl.apply_ops(apply, state.store("kv"), state.store("win"))
    state.prepare()
    state.close()
    with open(state.local.changelog(3), "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xff\xff")
    with open(wl.commit_log(checkpoint), "a") as f:
        f.write("3\n")
    state.open(4)
    assert state.metrics.changelogs_downloaded == 1
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 3)
    state.close()


def test_damaged_durable_changelog_names_file_and_version(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 5, snapshot_interval=100)
    path = os.path.join(checkpoint, "statestore", "0", "2.changelog")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(MissingStateError, match=r"2\.changelog.*version 2.*fails its checksum"):
        wl.read_state(checkpoint, str(tmp_path / "fresh"))
    with pytest.raises(CorruptStateError, match="fails its checksum; nothing was applied"):
        Changelog(path, 2)


def test_damaged_durable_changelog_is_not_needed_when_a_snapshot_covers_it(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 8, snapshot_interval=4, min_batches_to_retain=50)
    path = os.path.join(checkpoint, "statestore", "0", "1.changelog")
    open(path, "wb").write(b"garbage")
    assert wl.read_state(checkpoint, str(tmp_path / "fresh")) == wl.expected(1, 7)


def test_missing_changelog_in_the_chain_names_it(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 6, snapshot_interval=100)
    os.remove(os.path.join(checkpoint, "statestore", "0", "3.changelog"))
    with pytest.raises(MissingStateError, match=r"3\.changelog \(version 3\) is missing: the state is at version 2 and the next durable changelog is version 4"):
        wl.read_state(checkpoint, str(tmp_path / "fresh"))


def test_damaged_snapshot_falls_back_to_an_older_one(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 10, snapshot_interval=3, min_batches_to_retain=50)
    durable = wl.partition_state(checkpoint, local).durable
    versions = snapshot_versions(durable)
    assert versions == [2, 5, 8]
    newest = os.path.join(checkpoint, "statestore", "0", "snapshots", "8")
    victim = sorted(os.listdir(newest))[0]
    open(os.path.join(newest, victim), "ab").write(b"x")
    state = wl.partition_state(checkpoint, str(tmp_path / "fresh"))
    state.open(10)
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 9)
    assert state.metrics.changelogs_applied == 4  # from snapshot 5: versions 6..9
    state.close()


def test_snapshots_share_files_and_retention_removes_what_no_version_needs(dirs, tmp_path):
    checkpoint, local = dirs
    state = wl.partition_state(checkpoint, local, snapshot_interval=2, min_batches_to_retain=3)
    uploaded = []
    for batch in range(12):
        wl.run_batch(state, 1, batch, checkpoint)
        uploaded += state.wait_for_snapshots()
    root = os.path.join(checkpoint, "statestore", "0")
    assert [m["version"] for m in uploaded] == [1, 3, 5, 7, 9]
    assert any(m["uploaded_files"] < len(m["files"]) for m in uploaded)  # shared SSTs not uploaded again
    assert snapshot_versions(state.durable) == [7, 9]
    assert sorted(int(n.split(".")[0]) for n in os.listdir(root) if n.endswith(".changelog")) == [7, 8, 9, 10, 11]  # 7: the base snapshot's own
    referenced = {f["durable"].split("/")[1] for m in uploaded[-2:] for f in m["files"] if f["durable"].startswith("sst/")}
    assert set(os.listdir(os.path.join(root, "sst"))) == referenced
    # every retained version is restorable on a new executor
    for version in (8, 9, 10, 11):
        fresh = wl.partition_state(checkpoint, str(tmp_path / f"fresh{version}"))
        fresh.open(version + 1)
        assert wl.state_of(fresh.store("kv"), fresh.store("win")) == wl.expected(1, version)
        fresh.close()


def test_versions_removed_by_retention_are_an_error_not_an_empty_state(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 16, snapshot_interval=4, min_batches_to_retain=2)
    state = wl.partition_state(checkpoint, str(tmp_path / "fresh"))
    with pytest.raises(MissingStateError, match=r"version 5 of partition 0 cannot be restored.*oldest changelog \(7\) builds on version 6"):
        state.open(6)


def test_second_opener_waits_then_fails_clearly(dirs):
    checkpoint, local = dirs
    first = wl.partition_state(checkpoint, local)
    first.open(0)
    with pytest.raises(StoreLockedError, match="held by another task.*waited 0.2s"):
        wl.partition_state(checkpoint, local, lock_timeout=0.2).open(0)
    threading.Timer(0.3, first.close).start()
    second = wl.partition_state(checkpoint, local, lock_timeout=120)  # a bound on a hang
    second.open(0)
    second.close()


def test_concurrent_attempts_of_one_version_last_complete_wins(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 3)
    a = wl.partition_state(checkpoint, str(tmp_path / "executor-a"))
    b = wl.partition_state(checkpoint, str(tmp_path / "executor-b"))
    a.open(3)
    b.open(3)
    a.store("kv").put(b"attempt", b"a")
    for i in range(200):
        b.store("kv").put(b"b%03d" % i, b"b")
    b.prepare()
    a.prepare()  # completes last: its changelog wins
    a.close()
    b.close()
    with open(wl.commit_log(checkpoint), "a") as f:
        f.write("3\n")
    for where in ("executor-a", "executor-b", "executor-c"):
        state = wl.partition_state(checkpoint, str(tmp_path / where))
        state.open(4)
        kv = dict(state.store("kv").all())
        assert kv.get(b"attempt") == b"a" and b"b000" not in kv, where
        state.close()


def test_cache_entries_survive_only_at_the_version_they_were_filled(dirs, tmp_path):
    checkpoint, local = dirs
    cache = ThreadCache(1 << 20)
    state = wl.partition_state(checkpoint, local, cache=cache)
    wl.run_batch(state, 1, 0, checkpoint)
    state.open(1)
    key, value = wl.expected(1, 0)[0][0]
    hits = cache.hits
    assert state.store("kv").get(key) == value
    assert cache.hits == hits + 1  # batch 0's entries are valid at version 0
    wl.apply_ops(wl.batch_ops(1, 1), state.store("kv"), state.store("win"))
    state.prepare()
    state.close()
    with open(wl.commit_log(checkpoint), "a") as f:
        f.write("1\n")
    # another executor advances the partition: what this worker cached is stale now
    other = wl.partition_state(checkpoint, str(tmp_path / "other"))
    wl.run_batch(other, 1, 2, checkpoint)
    wl.run_batch(other, 1, 3, checkpoint)
    state.open(4)
    assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 3)
    state.close()


@pytest.mark.parametrize(
    "point",
    [
        "prepare:after-local-write",
        "prepare:after-publish",
        "open:after-apply",
        "apply:after-chunk",
        "snapshot:after-file",
        "snapshot:after-manifest",
        "retention:after-manifests",
        "retention:after-changelogs",
    ],
)
def test_exception_at_each_step_then_reopen_gives_the_last_committed_version(dirs, tmp_path, point):
    checkpoint, local = dirs
    fired = []

    def fail_once(name):
        if name == point and not fired:
            fired.append(name)
            raise RuntimeError(f"injected at {name}")

    kwargs = dict(snapshot_interval=2, min_batches_to_retain=2, uncommitted_max_bytes=200, apply_chunk_bytes=100)
    with injected(fail_once):
        for _ in range(20):
            try:
                run(checkpoint, local, 9, **kwargs)
                break
            except RuntimeError:
                continue  # the driver re-runs the batch that did not commit
    assert fired, f"{point} was never reached"
    last = wl.last_committed(checkpoint)
    assert last == 8
    assert wl.read_state(checkpoint, local) == wl.expected(1, last)
    assert wl.read_state(checkpoint, str(tmp_path / "fresh")) == wl.expected(1, last)


def test_spilled_batches_round_trip(dirs, tmp_path):
    checkpoint, local = dirs
    run(checkpoint, local, 8, uncommitted_max_bytes=0, snapshot_interval=3)
    assert wl.read_state(checkpoint, local) == wl.expected(1, 7)
    assert wl.read_state(checkpoint, str(tmp_path / "fresh")) == wl.expected(1, 7)


def test_bad_arguments(dirs):
    checkpoint, local = dirs
    with pytest.raises(ValueError, match="partition must be at least 0, got -1"):
        PartitionState(checkpoint, -1, [], WorkerResources(local))
    with pytest.raises(ValueError, match="snapshot_interval must be at least 1, got 0"):
        PartitionState(checkpoint, 0, [], WorkerResources(local), PartitionOptions(snapshot_interval=0))
    with pytest.raises(ValueError, match="stores must have distinct names"):
        PartitionState(checkpoint, 0, [StoreSpec.key_value("a"), StoreSpec.key_value("a")], WorkerResources(local))
    with pytest.raises(ValueError, match="checkpoint location must be a non-empty string"):
        PartitionState("", 0, [], WorkerResources(local))
    with pytest.raises(ValueError, match="The retention period of the window store w must be no smaller"):
        StoreSpec.window("w", 5, 10)
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("a")], WorkerResources(local))
    with pytest.raises(ValueError, match="batch_id must be at least 0, got -3"):
        state.open(-3)
    state.open(0)
    with pytest.raises(KeyError, match="no store 'b'; it has \\['a'\\]"):
        state.store("b")
    state.close()


def test_partition_count_is_kept_and_a_different_count_is_refused(dirs, tmp_path):
    from spark_statestore import StateStoreError
    from spark_statestore.partition import Layout, record_query_layout

    def check_partition_count(location, partitions):
        record_query_layout(location, Layout.of(specs, partitions))

    checkpoint, local = dirs
    specs = [StoreSpec.key_value("kv")]
    for batch in range(3):
        state = PartitionState(checkpoint, 1, specs, WorkerResources(local), PartitionOptions(partitions=4))
        state.open(batch)
        state.store("kv").put(b"k", b"%d" % batch)
        state.prepare()
        state.close()
    for where in (local, str(tmp_path / "new-executor")):  # local metadata, and changelog headers
        state = PartitionState(checkpoint, 1, specs, WorkerResources(where), PartitionOptions(partitions=8))
        with pytest.raises(StateStoreError, match=r"split into 4 partitions, but this query uses 8"):
            state.open(3)
    check_partition_count(checkpoint, 4)
    check_partition_count(checkpoint, 4)  # the same count again is fine
    with pytest.raises(ValueError, match="split into 4 partitions, but this query uses 2"):
        check_partition_count(checkpoint, 2)
    with pytest.raises(ValueError, match="partition 5 is out of range for 4 partitions"):
        PartitionState(checkpoint, 5, specs, WorkerResources(local), PartitionOptions(partitions=4))


def test_idle_local_copies_are_swept_and_held_or_recent_ones_are_kept(dirs, tmp_path):
    from spark_statestore.partition.local import sweep_idle_copies

    checkpoint, local = dirs
    for partition in range(3):
        _write_batch(checkpoint, local, partition, 0)
    roots = [PartitionState(checkpoint, p, [], WorkerResources(local)).local for p in range(3)]
    old = os.path.getmtime(os.path.join(roots[0].root, "LOCK")) - 7200
    for local_dir in roots[:2]:
        os.utime(os.path.join(local_dir.root, "LOCK"), (old, old))  # unused for two hours
    roots[1].lock(0)  # ...but a task holds this one now
    try:
        deleted = sweep_idle_copies(local, 3600)
    finally:
        roots[1].unlock()
    assert deleted == [roots[0].root]
    assert not os.path.exists(roots[0].db_path) and os.path.exists(roots[1].db_path) and os.path.exists(roots[2].db_path)
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(1)  # the swept partition comes back: restored from the durable state
    assert state.metrics.restored and state.store("kv").get(b"k") == b"0"
    state.close()


def _write_batch(checkpoint, local, partition, batch):
    """Batch `batch` of `partition`: k = the batch number."""
    state = PartitionState(checkpoint, partition, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(batch)
    state.store("kv").put(b"k", b"%d" % batch)
    state.prepare()
    state.close()


def _idle_copies(checkpoint, local, count):
    """`count` partitions with a local copy each, last used two hours ago."""
    roots = []
    for partition in range(count):
        state = PartitionState(checkpoint, partition, [StoreSpec.key_value("kv")], WorkerResources(local))
        state.open(0)
        state.prepare()
        state.close()
        roots.append(state.local)
        lock_path = os.path.join(state.local.root, "LOCK")
        old = os.path.getmtime(lock_path) - 7200
        os.utime(lock_path, (old, old))
    return roots


def _when_flock_is_first_called(monkeypatch, action):
    """Run `action(fd)` at the first `flock` after this (of `fd`), before that flock: what
    another process does between the caller's opening of a lock file and its locking of it.
    Returns a list that then holds what `action` returned."""
    from spark_statestore.partition import local as local_module

    flock = local_module.fcntl.flock
    done = []

    def flock_after_the_action(fd, operation):
        if not done:
            done.append(None)
            done[0] = action(fd)
        return flock(fd, operation)

    monkeypatch.setattr(local_module.fcntl, "flock", flock_after_the_action)
    return done


def _sweep_when_flock_is_first_called(monkeypatch, local):
    """A whole sweep of `local` (another process's) at the first `flock` after this."""
    from spark_statestore.partition.local import sweep_idle_copies

    return _when_flock_is_first_called(monkeypatch, lambda fd: sweep_idle_copies(local, 3600))


def test_two_sweeps_of_one_directory_at_once_delete_each_copy_once(dirs, monkeypatch):
    from spark_statestore.partition.local import sweep_idle_copies

    checkpoint, local = dirs
    roots = [copy.root for copy in _idle_copies(checkpoint, local, 3)]
    swept = _sweep_when_flock_is_first_called(monkeypatch, local)
    # This sweep opens the first lock file; the other sweep deletes every copy before it
    # locks it, so what it locks is a removed file, and the copy is no longer there to delete.
    assert sweep_idle_copies(local, 3600) == []
    assert sorted(swept[0]) == sorted(roots)
    assert not any(os.path.exists(root) and os.listdir(root) for root in roots)


def test_a_copy_used_between_the_sweeps_age_check_and_its_lock_is_kept(dirs, monkeypatch):
    from spark_statestore.partition.local import sweep_idle_copies

    checkpoint, local = dirs
    roots = [copy.root for copy in _idle_copies(checkpoint, local, 2)]

    def use_and_release(fd):
        """A batch of the partition whose lock file the sweep is about to lock (it found
        the copy idle): it opens the copy, writes, prepares and closes."""
        held = os.fstat(fd).st_ino
        partition = next(p for p, root in enumerate(roots) if os.stat(os.path.join(root, "LOCK")).st_ino == held)
        _write_batch(checkpoint, local, partition, 1)
        return partition

    used = _when_flock_is_first_called(monkeypatch, use_and_release)
    deleted = sweep_idle_copies(local, 3600)
    [partition] = used
    assert deleted == [roots[1 - partition]]  # the copy still idle once locked goes
    state = PartitionState(checkpoint, partition, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(2)  # the used copy is there: no restore from the durable state
    assert not state.metrics.restored and state.store("kv").get(b"k") == b"1"
    state.close()


def test_a_copy_held_long_and_let_go_between_the_sweeps_age_check_and_its_lock_is_kept(dirs, monkeypatch):
    """A holder that kept a copy locked for longer than the idle time (its last use long
    ago) lets go just before the sweep locks it: letting go is a use, so the copy stays."""
    from spark_statestore.partition.local import sweep_idle_copies

    checkpoint, local = dirs
    [copy] = _idle_copies(checkpoint, local, 1)
    copy.lock(0)
    lock_path = os.path.join(copy.root, "LOCK")
    old = os.path.getmtime(lock_path) - 7200
    os.utime(lock_path, (old, old))  # held for two hours
    _when_flock_is_first_called(monkeypatch, lambda fd: copy.unlock())
    assert sweep_idle_copies(local, 3600) == []
    assert os.path.getmtime(lock_path) > old + 3600
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(1)
    assert not state.metrics.restored
    state.close()


def test_an_opener_whose_lock_file_a_sweep_removes_locks_the_new_one(dirs, monkeypatch):
    checkpoint, local = dirs
    copy = _idle_copies(checkpoint, local, 1)[0]
    swept = _sweep_when_flock_is_first_called(monkeypatch, local)
    copy.lock(0)  # the sweep runs between the opener's open and its flock
    try:
        assert swept[0] == [copy.root]
        held, now = os.fstat(copy._lock_fd), os.stat(os.path.join(copy.root, "LOCK"))
        assert (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
        second = PartitionState(checkpoint, 0, [], WorkerResources(local)).local
        with pytest.raises(StoreLockedError):
            second.lock(0)  # one holder at a time, also after the sweep
    finally:
        copy.unlock()
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(1)  # the swept copy is restored from the durable state
    assert state.metrics.restored
    state.close()
