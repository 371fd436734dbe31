"""Where a load starts from and what it applies: the one place that decides.

A partition is loaded at version `target` from one of three bases, then the durable
changelogs after it, in order:

* the local copy, as its metadata describes it (`LocalCopy`), when it provably lies on
  the durable history (`plan_local`);
* else the newest snapshot at or below `target` that restores, newest first
  (`snapshot_candidates`), or nothing at all when the history starts from nothing;
  then `plan_rebuild` from what was restored.

Plans are pure: a `History` in (the listing, and the identities it reads for them), a
`RestorePlan` or a refusal out; nothing here touches a file. Every rule that refuses a
base lives here; the steps that carry a `RestorePlan` out (restoring a snapshot, applying
a changelog, checking a layout) check only what they read themselves. A refusal is `StaleCopy` (rebuild instead) or `MissingStateError`
(the durable state cannot give `target`: an error naming the file and the version).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from spark_statestore.errors import MissingStateError
from spark_statestore.partition.metadata import VersionId


class StaleCopy(Exception):
    """The local copy cannot be brought to the wanted version (it is rebuilt instead)."""


class History(Protocol):
    """The durable history a plan is made from, as one listing showed it
    (`history.History`): the versions with a changelog and with a snapshot, the
    identity of a version, and the names to give in messages. Reading an identity is the
    history's business (`History` reads it once, when first asked): a plan reads
    nothing itself."""

    partition: int
    durable: object  # where its files are (named in messages)
    changelogs: Collection[int]
    snapshots: Sequence[int]  # ascending

    def durable_id(self, version: int) -> int: ...  # the id of the changelog of `version` (listed)

    def identity(self, version: int) -> int | None: ...  # its changelog's id, else its snapshot's

    def changelog_uri(self, version: int) -> str: ...

    def snapshots_between(self, low: int, high: int) -> list[int]: ...


@dataclass(frozen=True)
class LocalCopy:
    """What the local copy's metadata says: the version it holds, the version it was applying
    ahead of Spark's commit (if any), the version its owner prepared last, and for a kept
    copy the version its open transaction prepared (`pending`)."""

    committed: VersionId
    ahead: VersionId | None = None
    prepared: VersionId | None = None
    pending: VersionId | None = None


@dataclass(frozen=True)
class RestorePlan:
    """Start from `base` (committing a kept copy's open transaction first when
    `commit_pending`, else rolling it back), then apply the durable `changelogs` in order."""

    base: VersionId
    changelogs: tuple[int, ...] = ()
    commit_pending: bool = False

    @property
    def reached(self) -> int:
        """The version the state is at once the plan is carried out."""
        return self.changelogs[-1] if self.changelogs else self.base.version


def plan_local(history: History, copy: LocalCopy, target: int, every_batch: bool) -> RestorePlan:
    """How the local copy reaches `target`, or `StaleCopy` if it is not provably on the
    durable history (see `recovery.py` for the rules), or `MissingStateError`."""
    committed = copy.committed
    if committed.version > target:
        raise StaleCopy(f"the local copy is at version {committed.version}, ahead of {target}")
    pending, commit_pending = copy.pending, False
    if pending is not None and _is_next(history, committed, pending, target):
        committed, commit_pending = pending, True
    _check_ahead(history, copy.ahead, committed, target)
    _check_prepared(history, copy.prepared, target)
    plan = RestorePlan(committed, _changelogs_after(history, committed.version, target, every_batch), commit_pending)
    _check_reached(history, plan, target, every_batch)
    return plan


def snapshot_candidates(history: History, target: int) -> list[int]:
    """The snapshots a rebuild tries, newest first (the newest that restores wins)."""
    return [v for v in reversed(history.snapshots) if v <= target]


def plan_rebuild(
    history: History,
    base: VersionId,
    target: int,
    every_batch: bool,
    oldest_base: int | None = None,
    problems: Sequence[str] = (),
) -> RestorePlan:
    """How a rebuilt copy at `base` (a restored snapshot, or the empty state) reaches
    `target`; `StaleCopy` naming what is missing if it cannot. From the empty state, the
    history must start from nothing (`check_history_starts_empty`, with what its oldest
    changelog builds on and the `problems` of the snapshots that did not restore)."""
    if base.version < 0:
        check_history_starts_empty(history, oldest_base, target, problems)
    plan = RestorePlan(base, _changelogs_after(history, base.version, target, every_batch))
    if plan.reached < target and every_batch:
        raise StaleCopy(_missing_message(history, plan.reached, target))
    return plan


def check_identity(history: History, committed: VersionId, what: str) -> None:
    """A copy at a version the durable state also has must be that very version."""
    if committed.version < 0:
        return
    durable_id = history.identity(committed.version)
    if durable_id is not None and durable_id != committed.id:
        raise StaleCopy(
            f"{what} holds version {committed.version} with id {committed.id:x}, but the durable history's version "
            f"{committed.version} has id {durable_id:x} (another attempt's, or a run that was rolled back)"
        )


def check_history_starts_empty(
    history: History, oldest_base: int | None, target: int, problems: Sequence[str]
) -> None:
    """Rebuilding from nothing is right only if the durable history starts from nothing:
    the oldest changelog (`oldest_base`: the version it builds on; None: there is none)
    builds on version -1. Otherwise the versions before the oldest snapshot were removed
    by retention (or lost), and `target` cannot be restored."""
    if oldest_base is None or oldest_base == -1:
        return
    raise MissingStateError(
        f"version {target} of partition {history.partition} cannot be restored from {history.durable}: "
        f"the oldest changelog ({min(history.changelogs)}) builds on version {oldest_base} and there is "
        f"no usable snapshot at or below {target} (snapshots: {history.snapshots}"
        + (f"; could not serve: {problems}" if problems else "")
        + "). Versions older than min_batches_to_retain are not kept."
    )


def _missing_message(history: History, reached: int, target: int) -> str:
    return (
        f"version {target} of partition {history.partition} is not in {history.durable}: the state reaches "
        f"version {reached}, and changelog {history.changelog_uri(target)} is missing (every committed batch "
        f"writes one)"
    )


def _is_next(history: History, committed: VersionId, pending: VersionId, target: int) -> bool:
    """Whether a kept copy's open transaction is the next version on the durable history
    (the changelog it prepared is the one that committed)."""
    version = pending.version
    if version == committed.version + 1 and version <= target and version in history.changelogs:
        return history.durable_id(version) == pending.id
    return False


def _check_ahead(history: History, ahead: VersionId | None, committed: VersionId, target: int) -> None:
    """A copy that was applying a version ahead of Spark's commit when it crashed may
    hold some of that version's writes under the metadata of the version before: it
    is usable only to re-apply that very version (the next one, on the durable history,
    wanted now)."""
    if ahead is None or ahead.version <= committed.version:
        return
    if (
        ahead.version != committed.version + 1
        or ahead.version > target
        or ahead.version not in history.changelogs
        or history.durable_id(ahead.version) != ahead.id
    ):
        raise StaleCopy(
            f"the local copy may hold writes of version {ahead}, applied ahead of the commit, which is "
            f"not the version {committed.version + 1} of the durable history wanted now (target {target})"
        )


def _check_prepared(history: History, prepared: VersionId | None, target: int) -> None:
    """A version this copy's owner published must not have vanished from durable state."""
    if prepared is None or prepared.version > target or prepared.version in history.changelogs:
        return
    if history.snapshots_between(prepared.version - 1, target):
        return  # retention may remove a changelog that a snapshot covers
    raise MissingStateError(
        f"changelog {history.changelog_uri(prepared.version)} (version {prepared.version}) "
        f"of partition {history.partition} was published but is missing from the durable state"
    )


def _changelogs_after(history: History, version: int, target: int, every_batch: bool) -> tuple[int, ...]:
    """The durable changelogs in (version, target], in order; when every batch prepares a
    version, a gap among them is `StaleCopy` naming the missing one."""
    versions = sorted(v for v in history.changelogs if version < v <= target)
    reached = version
    for v in versions:
        if every_batch and v > reached + 1:
            raise StaleCopy(
                f"changelog {history.changelog_uri(reached + 1)} (version {reached + 1}) is missing: the state is "
                f"at version {reached} and the next durable changelog is version {v}"
            )
        reached = v
    return tuple(versions)


def _check_reached(history: History, plan: RestorePlan, target: int, every_batch: bool) -> None:
    """The local copy reaches `target`, or no durable version says otherwise."""
    if plan.reached == target:
        if not plan.changelogs:  # applied changelogs are the durable ones by construction
            check_identity(history, plan.base, "the local copy")
        return
    newer = history.snapshots_between(plan.reached, target)
    if newer:
        raise StaleCopy(f"the local copy is at version {plan.reached}; snapshot {newer[-1]} is newer")
    if every_batch:
        raise MissingStateError(_missing_message(history, plan.reached, target))
