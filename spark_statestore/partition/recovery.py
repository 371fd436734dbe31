"""Recovery: a partition's database at a wanted committed version.

`Recovery.load(target)` returns the local database at version `target`, with its
identity. The caller runs batch `target + 1`, so every version up to `target` is
committed (Spark runs batch N only after N-1 committed), and everything durable above
`target` belongs to attempts that failed or to a run the user rolled back: never used.

It reads top-down: list the durable history (`history.py`), let `plan.py` decide the
base (the local copy as it is, a snapshot, or nothing) and the changelogs to apply after
it (`RestorePlan`), then carry that out one step at a time (restore a snapshot, apply a
changelog, check a layout). The rules, wherever they are checked:

* The local copy is used when it provably lies on the durable history: at or behind
  `target`, built on the same identities as the durable changelogs (each changelog names
  the version and identity it builds on), and not behind a newer snapshot. Its missing
  versions are caught up by applying changelogs in order (each in batches that end by
  recording the version, so a crash in between is repaired by applying it again). A
  local changelog is used instead of a download when it is the very file that was
  published (same id).
* Otherwise (missing, corrupt, ahead, stale, another attempt's) it is rebuilt: the newest
  snapshot at or below `target` whose identity matches the durable history, then the
  changelogs after it. A damaged or missing file that nothing else replaces raises an
  error naming the file and the version.
* When every batch prepares a version (`every_batch`), version `target` itself must be
  durable (a changelog or a snapshot), so a deleted newest changelog is an error instead
  of an older state. Otherwise the local record of what this copy's owner prepared
  catches a deleted changelog that it published.
* A late attempt of a batch may publish over a changelog a later version already builds
  on; the replaced one is kept aside (`publish_changelog`), and the chain of identities
  (`follow_chain`) picks, for each version, the file the next version builds on.
* Retention may delete files between the listing and their download: the load lists
  again and starts over (a few times) instead of failing.
* Only changelogs of this partition, of the declared stores, are applied; a changelog
  that fails half way through being applied leaves the local copy to be rebuilt.
* A copy this process kept open (`OpenCopies`) is used as it is: when its pending
  transaction is the very change set of the durable changelog the next version builds on,
  committing it replaces reading that changelog back; otherwise it is rolled back and the
  copy goes the way of any other. A copy that was applying a version ahead of Spark's
  commit when it crashed (its metadata says so) is used only to re-apply that version.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

from spark_statestore.checkpoint.changelog import Changelog
from spark_statestore.checkpoint.names import manifest_name
from spark_statestore.checkpoint.snapshots import restore_snapshot
from spark_statestore.errors import CorruptStateError, MissingStateError
from spark_statestore.faults import fault_point
from spark_statestore.partition.history import DurableHistory, Vanished
from spark_statestore.partition.layout import Layout, LayoutMismatchError
from spark_statestore.partition.metadata import EMPTY, PartitionMetadata, VersionId
from spark_statestore.partition.place import PartitionPlace
from spark_statestore.partition.plan import (
    LocalCopy,
    RestorePlan,
    StaleCopy,
    check_identity,
    plan_local,
    plan_rebuild,
    snapshot_candidates,
)
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.txn.database import TransactionalDatabase

log = logging.getLogger("spark_statestore.partition")


_LISTINGS = 4


class Recovery:
    """Loads the state of one partition (at its `place`) at a version (see module
    docstring): lists the durable history, has `plan.py` decide the base and the
    changelogs, and carries the plan out one step at a time."""

    def __init__(
        self,
        place: PartitionPlace,
        open_db: Callable[[], TransactionalDatabase],
        metrics: PartitionMetrics,
        *,
        every_batch: bool = True,
        chunk_bytes: int,
        kept: tuple[TransactionalDatabase, VersionId | None] | None = None,
    ) -> None:
        self.place = place
        self._open_db = open_db
        self.metrics = metrics
        self.every_batch = every_batch
        self.chunk_bytes = chunk_bytes
        self._kept = kept  # an open database and the version its open transaction prepared
        self.history: DurableHistory | None = None  # the listing the last load went by

    def load(self, target: int, committed: int | None = None) -> tuple[TransactionalDatabase, VersionId]:
        """The database at version `target` (-1: the empty state) and its identity.
        `committed` (default `target`) is the newest version Spark committed: the chain
        of identities is followed down from it, so a version below it is the one the next
        committed version built on (time travel sees what the later batches saw)."""
        head = target if committed is None else max(target, committed)
        for listing in range(_LISTINGS):
            history = self.history = DurableHistory.read(self.place.durable, self.place.partition, head)
            fault_point("recovery:after-listing")
            try:
                return self._load(history, target)
            except Vanished as e:
                if listing == _LISTINGS - 1:
                    raise MissingStateError(
                        f"cannot restore version {target} of partition {self.place.partition} from "
                        f"{self.place.durable}: files kept disappearing while it was read ({e})"
                    ) from e
                log.info("partition %d: listing %s again: %s", self.place.partition, self.place.durable, e)
        raise AssertionError("unreachable")

    def _load(self, history: DurableHistory, target: int) -> tuple[TransactionalDatabase, VersionId]:
        """The local copy brought to `target` when the plan allows it, else a rebuild."""
        kept, self._kept = self._kept, None
        if kept is None and not os.path.exists(os.path.join(self.place.local.db_path, "CURRENT")):
            return self._restore(history, target)  # a new executor: no local copy
        db = None
        try:
            db, pending = kept if kept is not None else (self._open_db(), None)
            meta = PartitionMetadata(db)
            copy = LocalCopy(meta.committed, meta.ahead, meta.prepared, pending)
            plan = plan_local(history, copy, target, self.every_batch)  # a copy off the history is rebuilt
            self._check_local_layout(history, meta, plan)
            if plan.commit_pending:
                self._commit_pending(db, plan.base)
            elif pending is not None:
                db.rollback()
            committed = self._apply(history, db, plan)
        except Vanished:
            db.close()
            raise
        except (CorruptStateError, StaleCopy) as reason:
            log.info("partition %d: restoring from %s: %s", self.place.partition, self.place.durable, reason)
            if db is not None:
                db.close()
            return self._restore(history, target)
        except BaseException:
            if db is not None:
                db.close()
            raise
        return db, committed

    def _restore(self, history: DurableHistory, target: int) -> tuple[TransactionalDatabase, VersionId]:
        """Rebuild the local copy: the newest usable snapshot at or below `target` (or
        nothing), then what `plan_rebuild` says."""
        started = time.perf_counter()
        self.place.local.wipe_db()
        problems: list[str] = []
        db = None
        committed = EMPTY
        for version in snapshot_candidates(history, target):
            fault_point("restore:before-snapshot")
            try:
                db, committed = self._from_snapshot(history, version)
                break
            except Vanished:
                raise
            except (CorruptStateError, MissingStateError, StaleCopy) as e:
                self.place.local.wipe_db()
                if not self.place.durable.exists(manifest_name(version)):
                    raise Vanished(f"snapshot {version} was deleted while it was restored") from e
                problems.append(str(e))
        oldest = None  # what the oldest changelog builds on, when nothing restored
        if db is None and history.changelogs:
            oldest = self._changelog(history, min(history.changelogs)).base_version
        try:
            plan = plan_rebuild(history, committed, target, self.every_batch, oldest, problems)
            if db is None:
                db = self._open_db()
            committed = self._apply(history, db, plan)
        except Vanished:
            _close(db)
            raise
        except (StaleCopy, CorruptStateError) as e:
            _close(db)
            self.place.local.wipe_db()  # nothing half-restored is left for the next open to trust
            detail = f"; snapshots that could not serve: {problems}" if problems else ""
            raise MissingStateError(
                f"cannot restore version {target} of partition {self.place.partition} from "
                f"{self.place.durable}: {e}{detail}"
            ) from e
        except BaseException:
            _close(db)
            raise
        self.metrics.restored = True
        self.metrics.restore_seconds = time.perf_counter() - started
        return db, committed

    # -- the steps ----------------------------------------------------------------------

    def _from_snapshot(self, history: DurableHistory, version: int) -> tuple[TransactionalDatabase, VersionId]:
        """Restore the snapshot of `version` and open it, checked: layout, version, identity."""
        restore_snapshot(self.place.durable, version, self.place.local.db_path, self.place.partition)
        db = self._open_db()
        return db, self._check_snapshot(history, version, db)

    def _check_snapshot(self, history: DurableHistory, version: int, db: Any) -> VersionId:
        """The version a snapshot's opened database `db` holds, checked: layout, version,
        identity (`db` is closed where a check fails)."""
        try:
            meta = PartitionMetadata(db)
            self._check_layout(meta, f"snapshot {version}")
            committed = meta.committed
            if committed.version != version:
                raise CorruptStateError(
                    f"snapshot {version} of {self.place.durable} holds version {committed.version}"
                )
            check_identity(history, committed, f"snapshot {version}")  # not of a run the user rolled back
        except BaseException:
            db.close()
            raise
        return committed

    def _check_local_layout(self, history: DurableHistory, meta: PartitionMetadata, plan: RestorePlan) -> None:
        """The local copy's layout agrees with the declared one. A copy that disagrees is
        refused only when it lies on the durable history: `plan_local` leaves the identity
        of a copy with changelogs to apply to `_apply`, so it is checked here first, and a
        copy off the history (left by a deleted checkpoint at the same location, say) is
        `StaleCopy`, rebuilt from the history, whose own files are checked."""
        try:
            self._check_layout(meta, f"the local copy {self.place.local.db_path}")
        except LayoutMismatchError:
            check_identity(history, plan.base, "the local copy")
            if plan.changelogs and history.base(plan.changelogs[0]) != plan.base:
                raise StaleCopy(
                    f"the local copy at version {plan.base} is not the one changelog "
                    f"{history.changelog_uri(plan.changelogs[0])} builds on"
                ) from None
            raise

    def _check_layout(self, meta: PartitionMetadata, where: str) -> None:
        recorded = meta.layout()
        if recorded is not None:
            self.place.layout.check_against(recorded, self.place.location, where)

    def _commit_pending(self, db: TransactionalDatabase, pending: VersionId) -> None:
        """Commit a kept copy's open transaction: it is the next version on the history."""
        started = time.perf_counter()
        db.commit(PartitionMetadata.committed_offsets(pending))
        fault_point("open:after-apply")
        self.metrics.changelogs_applied += 1
        self.metrics.apply_seconds += time.perf_counter() - started

    def _apply(self, history: DurableHistory, db: TransactionalDatabase, plan: RestorePlan) -> VersionId:
        """Apply the plan's changelogs to `db`, at `plan.base`, in order."""
        committed = plan.base
        for version in plan.changelogs:
            committed = self._apply_changelog(history, db, committed, version)
        return committed

    def _apply_changelog(
        self, history: DurableHistory, db: TransactionalDatabase, committed: VersionId, version: int
    ) -> VersionId:
        """Apply the changelog of `version` to the state at `committed`: it must be of the
        declared stores and build on that very state."""
        changelog = self._changelog(history, version)
        where = f"changelog {self.place.durable.uri(history.name(version))}"
        check_changelog_layout(self.place.layout, changelog, self.place.location, f"{where} (version {version})")
        if (changelog.base_version, changelog.base_id) != tuple(committed):
            raise StaleCopy(
                f"{where} (version {version}) builds on version {changelog.base_version}, but the state "
                f"is at version {committed.version} (identities {changelog.base_id:x} and {committed.id:x})"
            )
        applied = VersionId(version, changelog.id)
        self._write_changelog(db, changelog, applied, where)
        return applied

    def _write_changelog(
        self, db: TransactionalDatabase, changelog: Changelog, applied: VersionId, where: str
    ) -> None:
        """Write a verified changelog that builds on the database's version into it."""
        version = applied.version
        started = time.perf_counter()
        try:
            db.replay_blocks(
                changelog.ranges(),
                changelog.write_blocks(),
                PartitionMetadata.committed_offsets(applied),
                chunk_bytes=self.chunk_bytes,
            )
        except (CorruptStateError, ValueError) as e:  # part of it may be applied: the caller rebuilds
            raise CorruptStateError(f"{where} (version {version}) could not be applied: {e}") from e
        fault_point("open:after-apply")
        self.metrics.changelogs_applied += 1
        self.metrics.apply_seconds += time.perf_counter() - started

    def _changelog(self, history: DurableHistory, version: int) -> Changelog:
        """A verified changelog of `version` (`DurableHistory.changelog`, kept in the local
        copy's changelog folder)."""
        changelog, downloaded = history.changelog(version, self.place.local.changelog(version))
        self.metrics.changelogs_downloaded += downloaded
        return changelog

def _close(db: TransactionalDatabase | None) -> None:
    if db is not None:
        db.close()


def check_changelog_layout(layout: Layout, changelog: Changelog, location: str, where: str) -> None:
    """The changelog's own layout agrees with `layout` (`LayoutMismatchError` naming the
    store, both declarations and `where` if not), and it writes only to stores one of them
    declares (a store the query no longer declares keeps its data)."""
    declared = set(layout.names)
    if changelog.header.layout is not None:
        recorded = Layout.from_dict(changelog.header.layout, where)
        layout.check_against(recorded, location, where)
        declared.update(recorded.names)
    undeclared = sorted(set(changelog.stores) - declared)
    if undeclared:
        raise CorruptStateError(
            f"{where} writes to stores {undeclared} that neither {location} nor the changelog's own "
            f"layout declares (declared: {sorted(declared)})"
        )
