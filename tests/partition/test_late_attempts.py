"""Attempts that publish late, and retention that deletes files a restore has just listed.

A slow attempt of a batch (speculation, a task Spark gave up on) may publish its changelog
after another attempt's was committed and built upon; retention may delete what a restore
listed a moment ago. Neither may make a committed version unrestorable or wrong."""

from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

import partition_workload as wl
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.retention import retain
from spark_statestore.checkpoint.files import PartitionFiles, snapshot_versions
from spark_statestore.checkpoint.names import aside_name
from spark_statestore.errors import AttemptSupersededError
from spark_statestore.faults import injected
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.reading import StateLocation, VersionReader, changes


def _two_attempts(checkpoint: str, tmp_path, batch: int, **kwargs):
    """Attempts A and B of `batch`, both open on the committed state, each with its own value."""
    a = wl.partition_state(checkpoint, str(tmp_path / "A"), **kwargs)
    b = wl.partition_state(checkpoint, str(tmp_path / "B"), **kwargs)
    a.open(batch)
    b.open(batch)
    a.store("kv").put(b"attempt", b"A")
    b.store("kv").put(b"attempt", b"B")
    return a, b


def _spark_commits(checkpoint: str, newest: int) -> None:
    """Spark's commit log with batches 0..`newest` (what the reader takes as committed)."""
    os.makedirs(os.path.join(checkpoint, "commits"), exist_ok=True)
    for batch in range(newest + 1):
        with open(os.path.join(checkpoint, "commits", str(batch)), "w") as f:
            f.write("v1\n{}\n")


def _commit(checkpoint: str, batch: int) -> None:
    with open(wl.commit_log(checkpoint), "a") as f:
        f.write(f"{batch}\n")


@pytest.mark.parametrize("snapshots", [False, True])
def test_a_late_attempt_never_breaks_the_chain_a_later_batch_built_on(dirs, tmp_path, snapshots):
    checkpoint, local = dirs
    kwargs = {"snapshot_interval": 1 if snapshots else 100, "min_batches_to_retain": 100}
    wl.run(checkpoint, local, 3, **kwargs)
    zombie, winner = _two_attempts(checkpoint, tmp_path, 3, **kwargs)
    winner.prepare()
    winner.close()
    _commit(checkpoint, 3)
    after = wl.partition_state(checkpoint, str(tmp_path / "B"), **kwargs)  # batch 4 on the winner's copy
    after.open(4)
    after.store("kv").put(b"b4", b"x")
    after.prepare()
    after.close()
    after.wait_for_snapshots()
    _commit(checkpoint, 4)
    zombie.prepare()  # publishes over the committed changelog 3
    zombie.close()

    durable = DurableDir(pafs.LocalFileSystem(), os.path.join(checkpoint, "statestore", "0"))
    asides = PartitionFiles.read(durable).asides
    assert len(asides.get(3, ())) == 1, "the replaced changelog 3 was not kept"
    for where in ("B", "A", "new-executor"):
        state = wl.partition_state(checkpoint, str(tmp_path / where), **kwargs)
        state.open(5)
        assert state.store("kv").get(b"attempt") == b"B", where
        assert state.store("kv").get(b"b4") == b"x", where
        state.close()


def test_the_change_feed_follows_the_chain_too(dirs, tmp_path):
    checkpoint, local = dirs
    wl.run(checkpoint, local, 3)
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    zombie, winner = _two_attempts(checkpoint, tmp_path, 3)
    winner.prepare()
    winner.close()
    _commit(checkpoint, 3)
    wl.run(checkpoint, str(tmp_path / "B"), 5)
    zombie.prepare()
    zombie.close()
    location = StateLocation.open(checkpoint)
    values = [c.value for c in changes(location, 0, location.store("kv"), 3, 3) if c.key == b"attempt"]
    assert values == [b"B"]


@pytest.mark.parametrize("snapshots", [False, True])
def test_time_travel_to_the_batch_gets_the_attempt_the_next_batch_built_on(dirs, tmp_path, snapshots):
    """Reading batch 3 as of itself (time travel) after its losing attempt published over
    the winner's changelog, once batch 4 was built on the winner: every reader of batch 3
    (time travel, the next batch, the change feed) sees the winner."""
    checkpoint, local = dirs
    kwargs = {"snapshot_interval": 1 if snapshots else 100, "min_batches_to_retain": 100}
    wl.run(checkpoint, local, 3, **kwargs)
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    zombie, winner = _two_attempts(checkpoint, tmp_path, 3, **kwargs)
    winner.prepare()
    winner.close()
    _commit(checkpoint, 3)
    wl.run(checkpoint, str(tmp_path / "B"), 5, **kwargs)
    zombie.prepare()
    zombie.close()
    _spark_commits(checkpoint, 4)
    location = StateLocation.open(checkpoint)
    spec = location.store("kv")
    for version in (3, 4):
        with VersionReader(location, 0, version, location.committed_batch()) as reader:
            assert dict(reader.records(spec))[b"attempt"] == b"B", version
        with VersionReader(location, 0, version, location.committed_batch(), merge_records=1 << 20) as bulk:
            chunks = list(bulk.columns(spec))
            found = {k: v for c in chunks for k, v in zip(c.keys.to_pylist(), c.values.to_pylist())}
            assert found[b"attempt"] == b"B", version  # the bulk reader follows the same chain
    assert [c.value for c in changes(location, 0, spec, 3, 3) if c.key == b"attempt"] == [b"B"]


def test_an_attempt_after_spark_committed_the_batch_is_refused(dirs, tmp_path):
    checkpoint, local = dirs
    wl.run(checkpoint, local, 3)
    zombie, winner = _two_attempts(checkpoint, tmp_path, 3)
    winner.prepare()
    winner.close()
    os.makedirs(os.path.join(checkpoint, "commits"))
    open(os.path.join(checkpoint, "commits", "3"), "w").write("v1\n{}\n")  # Spark's commit log
    published = open(os.path.join(checkpoint, "statestore", "0", "3.changelog"), "rb").read()
    with pytest.raises(AttemptSupersededError, match=r"batch 3 of partition 0 .*commits/3"):
        zombie.prepare()
    zombie.close()
    assert open(os.path.join(checkpoint, "statestore", "0", "3.changelog"), "rb").read() == published
    _commit(checkpoint, 3)
    state = wl.partition_state(checkpoint, str(tmp_path / "new-executor"))
    state.open(4)
    assert state.store("kv").get(b"attempt") == b"B"
    state.close()


def test_the_same_changelog_published_twice_keeps_nothing_aside(dirs, tmp_path):
    checkpoint, local = dirs
    wl.run(checkpoint, local, 2)
    first = wl.partition_state(checkpoint, str(tmp_path / "first"))
    second = wl.partition_state(checkpoint, str(tmp_path / "second"))
    for state in (first, second):  # a deterministic batch: both attempts write the same
        state.open(2)
        wl.apply_ops(wl.batch_ops(1, 2), state.store("kv"), state.store("win"))
        state.prepare()
        state.close()
    durable = DurableDir(pafs.LocalFileSystem(), os.path.join(checkpoint, "statestore", "0"))
    assert PartitionFiles.read(durable).asides == {}


def test_retention_removes_set_aside_changelogs_with_their_version(dirs, tmp_path):
    checkpoint, local = dirs
    wl.run(checkpoint, local, 3)
    zombie, winner = _two_attempts(checkpoint, tmp_path, 3)
    winner.prepare()
    winner.close()
    zombie.prepare()
    zombie.close()
    durable = DurableDir(pafs.LocalFileSystem(), os.path.join(checkpoint, "statestore", "0"))
    (aside_id,) = PartitionFiles.read(durable).asides[3]
    assert os.path.exists(os.path.join(durable.root, aside_name(3, aside_id)))
    _commit(checkpoint, 3)
    wl.run(checkpoint, local, 9, snapshot_interval=2, min_batches_to_retain=2)
    files = PartitionFiles.read(durable)
    assert 3 not in files.changelogs and files.asides == {}


def test_retention_deleting_what_a_restore_listed_makes_it_list_again(dirs, tmp_path):
    """The restore lists snapshots 2 and 5; before it downloads snapshot 5, the writer's next
    batch snapshots version 8 and retention (keeping one version) deletes snapshots 2 and 5
    and changelogs 0..7. The restore lists again and serves version 8 from snapshot 8."""
    checkpoint, local = dirs
    kwargs = {"snapshot_interval": 3, "min_batches_to_retain": 1}
    wl.run(checkpoint, local, 9, **kwargs)
    durable = DurableDir(pafs.LocalFileSystem(), os.path.join(checkpoint, "statestore", "0"))
    listings = []

    def writer_goes_on(point):
        if point == "recovery:after-listing":
            listings.append(point)
        if point == "restore:before-snapshot" and len(listings) == 1:  # snapshots listed, none read
            writer = wl.partition_state(checkpoint, local, **kwargs)
            writer.open(9)  # snapshot of 8 at open; retention after its upload
            writer.close()
            writer.wait_for_snapshots()

    with injected(writer_goes_on):
        got = wl.read_state(checkpoint, str(tmp_path / "new-executor"), snapshot_interval=100)
    assert got == wl.expected(1, 8)
    assert len(listings) >= 3  # the restore, the writer's own open, the restore again
    assert min(PartitionFiles.read(durable).changelogs) == 8, "retention did not run in the middle of the restore"


def test_retention_keeps_the_changelog_its_base_snapshot_is_checked_against(dirs, tmp_path):
    checkpoint, local = dirs
    wl.run(checkpoint, local, 9, snapshot_interval=3, min_batches_to_retain=100)
    durable = DurableDir(pafs.LocalFileSystem(), os.path.join(checkpoint, "statestore", "0"))
    base = max(v for v in snapshot_versions(durable) if v <= 8)
    removed = retain(durable, 8, 8 - base + 1, 0)
    assert removed["changelogs"] == base
    assert sorted(PartitionFiles.read(durable).changelogs) == list(range(base, 9))
    assert wl.read_state(checkpoint, str(tmp_path / "new-executor")) == wl.expected(1, 8)


def test_the_change_feed_of_a_rolled_back_run_reads_the_rerun(dirs, tmp_path):
    """Versions above Spark's newest commit belong to a run the user rolled back: their
    bases never decide which changelog of a committed batch the change feed reads."""
    checkpoint, local = dirs
    wl.run(checkpoint, local, 11, seed=1, min_batches_to_retain=50)
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    with open(wl.commit_log(checkpoint), "w") as f:  # the user deletes the commits after batch 6
        f.writelines(f"{b}\n" for b in range(7))
    wl.run(checkpoint, local, 9, seed=2, min_batches_to_retain=50)  # batches 7 and 8 again
    _spark_commits(checkpoint, 8)
    location = StateLocation.open(checkpoint)
    for batch in (7, 8):
        final: dict = {}
        for op in wl.batch_ops(2, batch):
            if op[0] == "kv":
                final[op[1]] = op[2]
        found = {c.key: c.value for c in changes(location, 0, location.store("kv"), batch, batch)}
        assert found == final, batch
