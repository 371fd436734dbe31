"""`plan.py` alone: from a durable listing and the local metadata, which base a load starts
from and which changelogs it applies, and every rule that refuses a base (StaleCopy: rebuild;
MissingStateError: the durable state cannot give the version)."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from spark_statestore import MissingStateError
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.partition.metadata import EMPTY, VersionId
from spark_statestore.partition.plan import (
    LocalCopy,
    RestorePlan,
    StaleCopy,
    check_history_starts_empty,
    check_identity,
    plan_local,
    plan_rebuild,
    snapshot_candidates,
)


def ident(version: int) -> int:
    return 0x100 + version


class History:
    """A `plan.History` without files: changelog `v` has id `ident(v)`, snapshots have their own."""

    def __init__(self, changelogs, snapshots=(), snapshot_ids=None):
        self.partition = 0
        self.durable = DurableDir(pafs.LocalFileSystem(), "/nowhere")
        self.changelogs = dict.fromkeys(changelogs)
        self.snapshots = list(snapshots)
        self.snapshot_ids = snapshot_ids or {}

    def changelog_uri(self, version):
        return self.durable.uri(f"{version}.changelog")

    def snapshots_between(self, low, high):
        return [v for v in self.snapshots if low < v <= high]

    def durable_id(self, version):
        return ident(version)

    def identity(self, version):
        if version in self.changelogs:
            return ident(version)
        return self.snapshot_ids.get(version)


def at(version: int) -> VersionId:
    return VersionId(version, ident(version))


def test_the_local_copy_catches_up_with_the_changelogs_after_it():
    plan = plan_local(History(range(7)), LocalCopy(at(3)), 6, True)
    assert plan == RestorePlan(at(3), (4, 5, 6)) and plan.reached == 6


def test_a_copy_at_the_target_is_used_as_it_is_if_it_is_that_very_version():
    assert plan_local(History(range(4)), LocalCopy(at(3)), 3, True) == RestorePlan(at(3))
    with pytest.raises(StaleCopy, match="the local copy holds version 3 with id 5, but .* has id 103"):
        plan_local(History(range(4)), LocalCopy(VersionId(3, 5)), 3, True)


def test_a_copy_ahead_of_the_target_is_rebuilt():
    with pytest.raises(StaleCopy, match="the local copy is at version 5, ahead of 4"):
        plan_local(History(range(6)), LocalCopy(at(5)), 4, True)


def test_a_kept_transaction_is_committed_only_if_it_is_the_next_durable_version():
    plan = plan_local(History(range(6)), LocalCopy(at(3), pending=at(4)), 5, True)
    assert plan == RestorePlan(at(4), (5,), commit_pending=True)
    another_attempts = LocalCopy(at(3), pending=VersionId(4, 9))
    assert plan_local(History(range(6)), another_attempts, 5, True) == RestorePlan(at(3), (4, 5))
    beyond = LocalCopy(at(3), pending=at(4))
    assert plan_local(History(range(4)), beyond, 3, True) == RestorePlan(at(3))


def test_a_copy_applied_ahead_is_used_only_to_apply_that_very_version_again():
    assert plan_local(History(range(6)), LocalCopy(at(3), ahead=at(4)), 5, True).changelogs == (4, 5)
    with pytest.raises(StaleCopy, match="may hold writes of version 4.*, applied ahead of the commit"):
        plan_local(History(range(6)), LocalCopy(at(3), ahead=at(4)), 3, True)
    with pytest.raises(StaleCopy, match="applied ahead"):
        plan_local(History(range(6)), LocalCopy(at(3), ahead=VersionId(4, 9)), 5, True)


def test_a_published_changelog_that_vanished_is_an_error_unless_a_snapshot_covers_it():
    history = History([0, 1, 2, 4])
    with pytest.raises(MissingStateError, match=r"changelog .*3\.changelog \(version 3\) of partition 0 was published"):
        plan_local(history, LocalCopy(at(2), prepared=at(3)), 4, False)
    covered = History([0, 1, 2, 4], snapshots=[3], snapshot_ids={3: ident(3)})
    assert plan_local(covered, LocalCopy(at(2), prepared=at(3)), 4, False).changelogs == (4,)


def test_a_gap_in_the_changelogs_names_the_missing_one():
    with pytest.raises(StaleCopy, match=r"3\.changelog \(version 3\) is missing: the state is at version 2 and the next"):
        plan_local(History([0, 1, 2, 4]), LocalCopy(at(1)), 4, True)
    assert plan_rebuild(History([0, 1, 2, 4]), at(1), 4, False).changelogs == (2, 4)  # not every batch prepares


def test_a_copy_that_falls_short_of_the_target():
    with pytest.raises(StaleCopy, match="the local copy is at version 3; snapshot 5 is newer"):
        plan_local(History(range(4), snapshots=[5]), LocalCopy(at(2)), 6, True)
    with pytest.raises(MissingStateError, match=r"version 6 of partition 0 is not in .* reaches version 3, and changelog"):
        plan_local(History(range(4)), LocalCopy(at(2)), 6, True)
    assert plan_local(History(range(4)), LocalCopy(at(2)), 6, False) == RestorePlan(at(2), (3,))


def test_a_rebuild_starts_from_the_newest_snapshot_and_must_reach_the_target():
    history = History(range(3, 10), snapshots=[2, 5, 8, 11])
    assert snapshot_candidates(history, 9) == [8, 5, 2]
    assert plan_rebuild(history, at(5), 9, True) == RestorePlan(at(5), (6, 7, 8, 9))
    with pytest.raises(StaleCopy, match=r"version 12 of partition 0 is not in .* reaches version 9"):
        plan_rebuild(history, at(8), 12, True)


def test_a_rebuild_from_nothing_needs_a_history_that_starts_from_nothing():
    history = History(range(3, 10), snapshots=[8])
    check_history_starts_empty(history, -1, 9, [])
    check_history_starts_empty(History([]), None, 9, [])
    with pytest.raises(MissingStateError, match=r"the oldest changelog \(3\) builds on version 2 .*could not serve: \['x'\]"):
        check_history_starts_empty(history, 2, 9, ["x"])


def test_identity_is_checked_against_the_changelog_else_the_snapshot():
    history = History([4], snapshots=[3, 4], snapshot_ids={3: 77, 4: 1})
    check_identity(history, VersionId(3, 77), "snapshot 3")
    check_identity(history, at(4), "snapshot 4")  # the changelog's id wins over the manifest's
    check_identity(history, EMPTY, "nothing")
    check_identity(history, VersionId(7, 1), "a version the history does not have")
    with pytest.raises(StaleCopy, match="snapshot 3 holds version 3 with id 4e, but .* has id 4d"):
        check_identity(history, VersionId(3, 78), "snapshot 3")
