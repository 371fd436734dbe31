"""What a reader reads is on the committed history: a changelog that verifies (checksum,
id, partition, version) but that the committed versions did not build on is refused by
time travel and by the change feed before any row, READ_UNCOMMITTED ignores a prepared
changelog of a run the user rolled back, and the change feed holds every changelog's own
layout against the state's (found by an adversarial probe of the reader; no Spark)."""

from __future__ import annotations

import io
import json
import os
import shutil
from dataclasses import replace

import pytest

import partition_workload as wl
from spark_statestore.checkpoint.changelog import Changelog, ChangelogWriter
from spark_statestore.errors import CorruptStateError, StateStoreError
from spark_statestore.partition.layout import Layout, LayoutMismatchError, record_query_layout
from spark_statestore.partition.reading import StateLocation, VersionReader, changes, uncommitted_version


def _batch(checkpoint: str, local: str, batch: int, key: bytes, value: bytes = b"x") -> None:
    state = wl.partition_state(checkpoint, local, 0)
    state.open(batch)
    state.store("kv").put(key, value)
    state.prepare()
    state.close()


def _rewrite(path: str, extra: tuple[bytes, bytes] | None = None, **header: object) -> None:
    """The changelog at `path` written again (a valid checksum and id) with `header` fields
    changed and one record `extra` more: a file that verifies but is not what was published."""
    old = Changelog(path)
    out = io.BytesIO()
    writer = ChangelogWriter(out, replace(old.header, **header))
    for store, keys, values in old.write_blocks():
        writer.put_block(store, list(keys), list(values))
    if extra is not None:
        writer.put("kv", *extra)
    writer.finish()
    with open(path, "wb") as f:
        f.write(out.getvalue())


@pytest.fixture
def history(dirs):
    """Batches 0..3 of one partition, each committed."""
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    for batch in range(4):
        _batch(checkpoint, local, batch, b"k%d" % batch)
        wl.spark_commit(checkpoint, batch)
    return checkpoint, local


def _feed(checkpoint: str, start: int, end: int) -> list:
    location = StateLocation.open(checkpoint)
    return [(c.batch_id, c.key) for c in changes(location, 0, location.store("kv"), start, end)]


def _read(checkpoint: str, version: int, committed: int) -> list:
    location = StateLocation.open(checkpoint)
    with VersionReader(location, 0, version, committed) as reader:
        return [key for key, _ in reader.records(location.store("kv"))]


def test_a_changelog_the_committed_history_did_not_build_on_is_refused(history):
    checkpoint, _ = history
    assert _read(checkpoint, 2, 3) == [b"k0", b"k1", b"k2"]
    assert _feed(checkpoint, 1, 3) == [(1, b"k1"), (2, b"k2"), (3, b"k3")]
    durable = os.path.join(checkpoint, "statestore", "0", "2.changelog")
    _rewrite(durable, extra=(b"evil", b"666"))  # right partition, version and base: it verifies
    Changelog(durable, 2, 0)
    breaks = "is not the one the committed history builds on: changelog .*3.changelog \\(version 3\\)"
    with pytest.raises(CorruptStateError, match=breaks):
        _read(checkpoint, 2, 3)  # time travel
    for start, end in ((2, 2), (0, 3), (0, 1), (1, 2), (3, 3)):  # before any row; 3 does not build on it
        with pytest.raises(CorruptStateError, match=breaks):
            _feed(checkpoint, start, end)


def test_the_newest_changelog_must_build_on_the_version_below_it(history):
    checkpoint, _ = history
    _rewrite(os.path.join(checkpoint, "statestore", "0", "3.changelog"), base_id=0x1234)
    for start, end in ((1, 3), (3, 3), (1, 2)):  # below it too: the committed history is broken
        with pytest.raises(CorruptStateError, match="3.changelog \\(version 3\\) builds on version 2 with identity 1234"):
            _feed(checkpoint, start, end)
    with pytest.raises(StateStoreError, match="3.changelog \\(version 3\\) builds on version 2"):
        _read(checkpoint, 3, 3)


def test_read_uncommitted_ignores_a_prepared_batch_of_a_rolled_back_run(dirs):
    """Run A commits batches 0..5; the user rolls back to batch 2 (removes commits 3..5),
    and run B runs batch 3 again with other data and commits it, leaving A's 4 and 5 on
    disk: READ_UNCOMMITTED reads B's batch 3, not A's batch 4 (built on A's batch 3)."""
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    for batch in range(6):
        _batch(checkpoint, local, batch, b"a%d" % batch)
        wl.spark_commit(checkpoint, batch)
    for batch in (3, 4, 5):
        os.remove(os.path.join(checkpoint, "commits", str(batch)))
    shutil.rmtree(local)  # run B on another executor
    _batch(checkpoint, local, 3, b"b3")
    wl.spark_commit(checkpoint, 3)
    location = StateLocation.open(checkpoint)
    assert uncommitted_version(location, 0, 3) == 3
    assert _read(checkpoint, uncommitted_version(location, 0, 3), 3) == [b"a0", b"a1", b"a2", b"b3"]
    _batch(checkpoint, local, 4, b"b4")  # B prepares batch 4 (over A's): that one is seen
    assert uncommitted_version(location, 0, 3) == 4
    assert _read(checkpoint, 4, 3) == [b"a0", b"a1", b"a2", b"b3", b"b4"]


def test_the_change_feed_holds_each_changelogs_layout_against_the_states(history):
    checkpoint, _ = history
    layout_file = os.path.join(checkpoint, "statestore", "_layout")
    with open(layout_file) as f:
        layout = json.load(f)
    store = layout["stores"]["kv"]
    store["value_serde"] = "float64" if store.get("value_serde") != "float64" else "int64"
    with open(layout_file, "w") as f:
        json.dump(layout, f)
    with pytest.raises(LayoutMismatchError, match="store 'kv' .*was created as .*1.changelog of partition 0"):
        _feed(checkpoint, 1, 3)


def test_read_uncommitted_agrees_with_read_committed_after_a_late_attempt(dirs, tmp_path):
    """A losing attempt of batch 3 publishes over the committed changelog 3 after batch 4
    was prepared on the winner's (a narrow race a zombie task can win: the durable files
    then look as after a user's rollback, the replaced file set aside and batch 4 built on
    it). Until batch 4 commits, a reader goes by the durable `3.changelog`, and
    READ_UNCOMMITTED adds no prepared batch that does not build on what READ_COMMITTED
    reads; once batch 4 commits, the chain picks the file it built on: the winner's."""
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    for batch in range(3):
        _batch(checkpoint, local, batch, b"k%d" % batch)
        wl.spark_commit(checkpoint, batch)
    zombie, winner = (wl.partition_state(checkpoint, str(tmp_path / name)) for name in ("A", "B"))
    for state, name in ((zombie, b"A"), (winner, b"B")):
        state.open(3)
        state.store("kv").put(b"attempt", name)
    winner.prepare()
    winner.close()
    _batch(checkpoint, str(tmp_path / "B"), 4, b"b4")  # prepared on the winner's copy, not committed
    zombie.prepare()  # as if it passed its commit-log check just before Spark committed batch 3
    zombie.close()
    wl.spark_commit(checkpoint, 3)
    location = StateLocation.open(checkpoint)
    committed = dict(_records(checkpoint, 3, 3))
    assert uncommitted_version(location, 0, 3) == 3
    assert dict(_records(checkpoint, uncommitted_version(location, 0, 3), 3)) == committed
    wl.spark_commit(checkpoint, 4)
    after = dict(_records(checkpoint, 4, 4))
    assert (after[b"attempt"], after[b"b4"]) == (b"B", b"x")
    assert dict(_records(checkpoint, 3, 4))[b"attempt"] == b"B"  # time travel follows the chain


def _records(checkpoint: str, version: int, committed: int) -> list:
    location = StateLocation.open(checkpoint)
    with VersionReader(location, 0, version, committed) as reader:
        return list(reader.records(location.store("kv")))
