"""Recovery: a partition's database at a wanted committed version.

`Recovery.load(target)` returns the local database at version `target`, with its
identity. The caller runs batch `target + 1`, so every version up to `target` is
committed (Spark runs batch N only after N-1 committed), and everything durable above
`target` belongs to attempts that failed or to a run the user rolled back: never used.

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

import pyarrow.fs as pafs

from spark_statestore.checkpoint.changelog import Changelog, durable_changelog_id, follow_chain
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.names import changelog_name, list_changelogs, manifest_name, snapshot_versions
from spark_statestore.checkpoint.snapshots import read_manifest, restore_snapshot
from spark_statestore.errors import CorruptStateError, MissingStateError
from spark_statestore.faults import fault_point
from spark_statestore.partition.layout import Layout
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.metadata import EMPTY, PartitionMetadata, VersionId
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.txn.database import TransactionalDatabase

log = logging.getLogger("spark_statestore.partition")


_LISTINGS = 4


class StaleCopy(Exception):
    """The local copy cannot be brought to the wanted version (it is rebuilt instead)."""


class Vanished(StaleCopy):
    """A file listed a moment ago is gone (retention ran): list again and start over."""


class Recovery:
    """Loads the state of one partition at a version (see module docstring)."""

    def __init__(
        self,
        durable: DurableDir,
        local: LocalPartitionDir,
        partition: int,
        layout: Layout,
        location: str,
        open_db: Callable[[], TransactionalDatabase],
        metrics: PartitionMetrics,
        *,
        every_batch: bool = True,
        chunk_bytes: int,
        kept: tuple[TransactionalDatabase, VersionId | None] | None = None,
    ) -> None:
        self.durable = durable
        self.local = local
        self.partition = partition
        self.layout = layout
        self.location = location
        self._open_db = open_db
        self.metrics = metrics
        self.every_batch = every_batch
        self.chunk_bytes = chunk_bytes
        self._kept = kept  # an open database and the version its open transaction prepared
        self._changelogs: dict[int, pafs.FileInfo] = {}
        self._snapshots: list[int] = []
        self._ids: dict[int, int] = {}  # durable changelog ids read so far
        self._chosen: dict[int, tuple[str, int]] = {}  # versions whose set-aside file is on the chain

    def load(self, target: int) -> tuple[TransactionalDatabase, VersionId]:
        """The database at version `target` (-1: the empty state) and its identity."""
        for listing in range(_LISTINGS):
            self._list(target)
            try:
                return self._load(target)
            except Vanished as e:
                if listing == _LISTINGS - 1:
                    raise MissingStateError(
                        f"cannot restore version {target} of partition {self.partition} from {self.durable}: "
                        f"files kept disappearing while it was read ({e})"
                    ) from e
                log.info("partition %d: listing %s again: %s", self.partition, self.durable, e)
        raise AssertionError("unreachable")

    def _list(self, target: int) -> None:
        self._changelogs, asides = list_changelogs(self.durable)
        self._snapshots = snapshot_versions(self.durable)
        self._ids = {}
        self._chosen = follow_chain(self.durable, self._changelogs, asides, target)
        for version, (_, ident) in self._chosen.items():
            self._ids[version] = ident
        fault_point("recovery:after-listing")

    def _load(self, target: int) -> tuple[TransactionalDatabase, VersionId]:
        kept, self._kept = self._kept, None
        if kept is None and not os.path.exists(os.path.join(self.local.db_path, "CURRENT")):
            return self._restore(target)  # a new executor: no local copy
        db = None
        try:
            db, pending = kept if kept is not None else (self._open_db(), None)
            meta = PartitionMetadata(db)
            self._check_layout(meta, f"the local copy {self.local.db_path}")
            committed = meta.committed
            if committed.version > target:
                raise StaleCopy(f"the local copy is at version {committed.version}, ahead of {target}")
            if pending is not None:
                committed = self._commit_pending(db, committed, pending, target)
            self._check_ahead(meta.ahead, committed, target)
            self._check_prepared(meta.prepared, target)
            committed = self._catch_up(db, committed, target)
            self._check_reached(committed, target)
        except Vanished:
            db.close()
            raise
        except (CorruptStateError, StaleCopy) as reason:
            log.info("partition %d: restoring from %s: %s", self.partition, self.durable, reason)
            if db is not None:
                db.close()
            return self._restore(target)
        except BaseException:
            if db is not None:
                db.close()
            raise
        return db, committed

    # -- checks -------------------------------------------------------------------------

    def _check_layout(self, meta: PartitionMetadata, where: str) -> None:
        recorded = meta.layout()
        if recorded is not None:
            self.layout.check_against(recorded, self.location, where)

    def _check_ahead(self, ahead: VersionId | None, committed: VersionId, target: int) -> None:
        """A copy that was applying a version ahead of Spark's commit when it crashed may
        hold some of that version's writes under the metadata of the version before: it
        is usable only to re-apply that very version (the next one, on the durable history,
        wanted now)."""
        if ahead is None or ahead.version <= committed.version:
            return
        if (
            ahead.version != committed.version + 1
            or ahead.version > target
            or ahead.version not in self._changelogs
            or self._durable_id(ahead.version) != ahead.id
        ):
            raise StaleCopy(
                f"the local copy may hold writes of version {ahead}, applied ahead of the commit, which is "
                f"not the version {committed.version + 1} of the durable history wanted now (target {target})"
            )

    def _check_prepared(self, prepared: VersionId | None, target: int) -> None:
        """A version this copy's owner published must not have vanished from durable state."""
        if prepared is None or prepared.version > target or prepared.version in self._changelogs:
            return
        if any(prepared.version <= v <= target for v in self._snapshots):
            return  # retention may remove a changelog that a snapshot covers
        raise MissingStateError(
            f"changelog {self.durable.uri(changelog_name(prepared.version))} (version {prepared.version}) "
            f"of partition {self.partition} was published but is missing from the durable state"
        )

    def _check_reached(self, committed: VersionId, target: int) -> None:
        """After catching up: the copy is at `target`, or no durable version says otherwise."""
        if committed.version == target:
            self._check_identity(committed, "the local copy")
            return
        newer = [v for v in self._snapshots if committed.version < v <= target]
        if newer:
            raise StaleCopy(f"the local copy is at version {committed.version}; snapshot {newer[-1]} is newer")
        if self.every_batch:
            raise MissingStateError(self._missing_message(committed.version, target))

    def _missing_message(self, reached: int, target: int) -> str:
        return (
            f"version {target} of partition {self.partition} is not in {self.durable}: the state reaches "
            f"version {reached}, and changelog {self.durable.uri(changelog_name(target))} is missing "
            f"(every committed batch writes one)"
        )

    def _check_identity(self, committed: VersionId, what: str) -> None:
        """A copy at a version the durable state also has must be that very version."""
        version = committed.version
        if version < 0:
            return
        if version in self._changelogs:
            durable_id = self._durable_id(version)
        elif version in self._snapshots:
            durable_id = int(read_manifest(self.durable, version).get("version_id", 0))
        else:
            return
        if durable_id != committed.id:
            raise StaleCopy(
                f"{what} holds version {version} with id {committed.id:x}, but the durable history's version "
                f"{version} has id {durable_id:x} (another attempt's, or a run that was rolled back)"
            )

    def _name(self, version: int) -> str:
        """The durable file of `version` on the chain (normally `N.changelog`)."""
        chosen = self._chosen.get(version)
        return changelog_name(version) if chosen is None else chosen[0]

    def _durable_id(self, version: int) -> int:
        """The id of the durable changelog of `version` (from its trailer: one small read)."""
        ident = self._ids.get(version)
        if ident is None:
            name = changelog_name(version)
            try:
                ident = durable_changelog_id(self.durable, name, version, self._changelogs[version].size)
            except FileNotFoundError as e:
                raise Vanished(f"changelog {self.durable.uri(name)} disappeared") from e
            self._ids[version] = ident
        return ident

    # -- catching up --------------------------------------------------------------------

    def _commit_pending(
        self, db: TransactionalDatabase, committed: VersionId, pending: VersionId, target: int
    ) -> VersionId:
        """Commit the kept copy's open transaction if it is the next version on the durable
        history (the changelog it prepared is the one that committed); else drop it."""
        version = pending.version
        if version == committed.version + 1 and version <= target and version in self._changelogs:
            if self._durable_id(version) == pending.id:
                started = time.perf_counter()
                db.commit(PartitionMetadata.committed_offsets(pending))
                fault_point("open:after-apply")
                self.metrics.changelogs_applied += 1
                self.metrics.apply_seconds += time.perf_counter() - started
                return pending
        db.rollback()
        return committed

    def _catch_up(self, db: TransactionalDatabase, committed: VersionId, target: int) -> VersionId:
        """Apply the durable changelogs after `committed` up to `target`, in order."""
        for version in sorted(v for v in self._changelogs if committed.version < v <= target):
            if self.every_batch and version > committed.version + 1:
                raise StaleCopy(
                    f"changelog {self.durable.uri(changelog_name(committed.version + 1))} (version "
                    f"{committed.version + 1}) is missing: the state is at version {committed.version} "
                    f"and the next durable changelog is version {version}"
                )
            changelog = self._changelog(version)
            where = f"changelog {self.durable.uri(self._name(version))}"
            recorded = changelog.header.layout
            declared = set(self.layout.names)
            if recorded is not None:
                recorded_layout = Layout.from_dict(recorded, where)
                self.layout.check_against(recorded_layout, self.location, where)
                declared.update(recorded_layout.names)  # a store the query no longer declares keeps its data
            undeclared = sorted(set(changelog.stores) - declared)
            if undeclared:
                raise CorruptStateError(
                    f"{where} (version {version}) writes to stores {undeclared} that neither {self.location} "
                    f"nor the changelog's own layout declares (declared: {sorted(declared)})"
                )
            if (changelog.base_version, changelog.base_id) != tuple(committed):
                raise StaleCopy(
                    f"{where} (version {version}) builds on version {changelog.base_version}, but the state "
                    f"is at version {committed.version} (identities {changelog.base_id:x} and {committed.id:x})"
                )
            applied = VersionId(version, changelog.id)
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
            committed = applied
            self.metrics.changelogs_applied += 1
            self.metrics.apply_seconds += time.perf_counter() - started
        return committed

    def _changelog(self, version: int) -> Changelog:
        """A verified changelog of `version`: the local copy when it is the file that was
        published, else a fresh download. A damaged durable copy raises `CorruptStateError`."""
        path = self.local.changelog(version)
        name = self._name(version)
        durable_id = self._durable_id(version)
        try:
            local = Changelog(path, version, self.partition)
            if local.id == durable_id:
                return local
        except CorruptStateError:
            pass
        os.makedirs(self.local.changelog_dir, exist_ok=True)
        try:
            self.durable.download(name, path)
        except FileNotFoundError as e:
            raise Vanished(f"changelog {self.durable.uri(name)} disappeared") from e
        self.metrics.changelogs_downloaded += 1
        try:
            changelog = Changelog(path, version, self.partition)
        except CorruptStateError as e:
            os.remove(path)
            raise CorruptStateError(f"changelog {self.durable.uri(name)} (version {version}) is damaged: {e}") from e
        if changelog.id != durable_id:  # replaced between the two reads: read it again next time
            self._ids[version] = changelog.id
        return changelog

    # -- rebuilding ---------------------------------------------------------------------

    def _restore(self, target: int) -> tuple[TransactionalDatabase, VersionId]:
        """Rebuild the local copy: newest usable snapshot at or below `target`, then changelogs."""
        started = time.perf_counter()
        self.local.wipe_db()
        problems: list[str] = []
        db = None
        committed = EMPTY
        for version in reversed([v for v in self._snapshots if v <= target]):
            try:
                db, committed = self._from_snapshot(version)
                break
            except Vanished:
                raise
            except (CorruptStateError, MissingStateError, StaleCopy) as e:
                self.local.wipe_db()
                if not self.durable.exists(manifest_name(version)):
                    raise Vanished(f"snapshot {version} was deleted while it was restored") from e
                problems.append(str(e))
        if db is None:
            self._check_history_starts_empty(target, problems)
            db = self._open_db()
        try:
            committed = self._catch_up(db, committed, target)
            if committed.version < target and self.every_batch:
                raise StaleCopy(self._missing_message(committed.version, target))
        except Vanished:
            db.close()
            raise
        except (StaleCopy, CorruptStateError) as e:
            db.close()
            self.local.wipe_db()  # nothing half-restored is left for the next open to trust
            detail = f"; snapshots that could not serve: {problems}" if problems else ""
            raise MissingStateError(
                f"cannot restore version {target} of partition {self.partition} from {self.durable}: {e}{detail}"
            ) from e
        except BaseException:
            db.close()
            raise
        self.metrics.restored = True
        self.metrics.restore_seconds = time.perf_counter() - started
        return db, committed

    def _from_snapshot(self, version: int) -> tuple[TransactionalDatabase, VersionId]:
        restore_snapshot(self.durable, version, self.local.db_path, self.partition)
        db = self._open_db()
        try:
            meta = PartitionMetadata(db)
            self._check_layout(meta, f"snapshot {version}")
            committed = meta.committed
            if committed.version != version:
                raise CorruptStateError(f"snapshot {version} of {self.durable} holds version {committed.version}")
            self._check_identity(committed, f"snapshot {version}")  # not of a run the user rolled back
        except BaseException:
            db.close()
            raise
        return db, committed

    def _check_history_starts_empty(self, target: int, problems: list[str]) -> None:
        """Rebuilding from nothing is right only if the durable history starts from nothing:
        the oldest changelog builds on version -1. Otherwise the versions before the oldest
        snapshot were removed by retention (or lost), and `target` cannot be restored."""
        if not self._changelogs:
            return
        oldest = min(self._changelogs)
        changelog = self._changelog(oldest)
        if changelog.base_version != -1:
            raise MissingStateError(
                f"version {target} of partition {self.partition} cannot be restored from {self.durable}: "
                f"the oldest changelog ({oldest}) builds on version {changelog.base_version} and there is "
                f"no usable snapshot at or below {target} (snapshots: {self._snapshots}"
                + (f"; could not serve: {problems}" if problems else "")
                + "). Versions older than min_batches_to_retain are not kept."
            )
