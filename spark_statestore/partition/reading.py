"""Reading a query's state from outside the query, from the durable files alone.

Nothing here takes the writer's lock or touches its local copy: a version is rebuilt in a
private directory (`Recovery` on a `LocalPartitionDir` of the reader's own: the newest
usable snapshot at or below it, then changelogs), and changes are read from the durable
changelogs. Spark's commit log (`<checkpointLocation>/commits/`, one file per committed
batch) says which version is committed; a prepared changelog above it belongs to a batch
that has not committed (yet).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow.fs as pafs

from spark_statestore.checkpoint.changelog import Changelog, durable_changelog_trailer, follow_chain
from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import (
    changelog_name,
    changelog_versions,
    commits_dir,
    list_changelogs,
    number_of,
    partition_dir,
    snapshot_versions,
    statestore_dir,
)
from spark_statestore.errors import MissingStateError, StateStoreError
from spark_statestore.partition.layout import Layout, read_query_layout
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.metadata import VersionId
from spark_statestore.partition.recovery import Recovery
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.serde import unescape
from spark_statestore.stores.window_layout import start_of
from spark_statestore.txn.apply import DEFAULT_CHUNK_BYTES
from spark_statestore.txn.database import TransactionalDatabase


class NoStateError(StateStoreError):
    """There is no spark_statestore state where a reader looked."""


@dataclass(frozen=True)
class StateLocation:
    """The state of one query: its checkpoint location and layout; its partitions are
    listed each time they are asked for (a writer's partition publishes its directory
    with its first changelog, possibly after a reader started)."""

    location: str
    layout: Layout
    filesystem: pafs.FileSystem | None = None

    @staticmethod
    def open(location: str, filesystem: pafs.FileSystem | None = None) -> "StateLocation":
        """The state under `location`; `NoStateError` naming it when there is none."""
        layout = read_query_layout(location, filesystem)
        if layout is None:
            _, root = resolve_location(location, filesystem)
            raise NoStateError(f"there is no spark_statestore state under {location} (no {statestore_dir(root)}/_layout)")
        return StateLocation(location, layout, filesystem)

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions with durable state now, ascending (one listing per call: list
        after reading the commit log, so every partition of a committed batch is seen)."""
        fs, root = resolve_location(self.location, self.filesystem)
        selector = pafs.FileSelector(statestore_dir(root), allow_not_found=True)
        return tuple(
            sorted(
                int(info.base_name)
                for info in fs.get_file_info(selector)
                if info.type == pafs.FileType.Directory and number_of(info.base_name) is not None
            )
        )

    def store(self, name: str) -> StoreSpec:
        for spec in self.layout.stores:
            if spec.name == name:
                return spec
        raise KeyError(f"the state under {self.location} has no store {name!r}; it has {self.layout.names}")

    def durable(self, partition: int) -> DurableDir:
        fs, root = resolve_location(self.location, self.filesystem)
        return DurableDir(fs, partition_dir(root, partition))

    def committed_batch(self) -> int | None:
        """The newest batch Spark's commit log holds (None: nothing committed yet)."""
        fs, root = resolve_location(self.location, self.filesystem)
        selector = pafs.FileSelector(commits_dir(root), allow_not_found=True)
        batches = [int(i.base_name) for i in fs.get_file_info(selector) if number_of(i.base_name) is not None]
        return max(batches, default=None)

    def versions(self, partition: int) -> tuple[list[int], list[int]]:
        """The durable changelog versions and snapshot versions of a partition."""
        durable = self.durable(partition)
        return sorted(changelog_versions(durable)), snapshot_versions(durable)


def change_count(state: StateLocation, version: int) -> int:
    """How many records the changelogs of `version` hold, over every partition (from their
    trailers: one small read each)."""
    total = 0
    for partition in state.partitions:
        try:
            total += durable_changelog_trailer(state.durable(partition), changelog_name(version), version)[0]
        except FileNotFoundError:
            pass
    return total


def uncommitted_version(state: StateLocation, partition: int, committed: int) -> int:
    """The version a READ_UNCOMMITTED reader sees: the prepared changelog of the batch after
    the committed one, if there is one."""
    changelogs, _ = state.versions(partition)
    return committed + 1 if committed + 1 in changelogs else committed


class VersionReader:
    """One partition's state at one version, rebuilt privately (a context manager: the
    private copy is deleted on exit)."""

    def __init__(
        self,
        state: StateLocation,
        partition: int,
        version: int,
        committed: int | None = None,
        workdir: str | None = None,
    ) -> None:
        self.state = state
        self.partition = partition
        self.version = version
        self.committed = committed  # the newest committed version (Recovery.load)
        self._workdir = tempfile.mkdtemp(prefix="statestore-reader-", dir=workdir)
        self.db: TransactionalDatabase | None = None
        self.loaded: VersionId | None = None

    def __enter__(self) -> "VersionReader":
        local = LocalPartitionDir(self._workdir, self.state.location, self.partition)
        recovery = Recovery(
            self.state.durable(self.partition),
            local,
            self.partition,
            Layout(self.state.layout.stores, None),
            self.state.location,
            lambda: TransactionalDatabase(local.db_path, wal=False, uncommitted_max_bytes=-1, replayable=True),
            PartitionMetrics(),
            chunk_bytes=DEFAULT_CHUNK_BYTES,
        )
        try:
            self.db, self.loaded = recovery.load(self.version, self.committed)
        except MissingStateError as e:
            changelogs, snapshots = self.state.versions(self.partition)
            raise MissingStateError(
                f"version {self.version} of partition {self.partition} of {self.state.location} cannot be read "
                f"(changelogs kept: {_span(changelogs)}, snapshots: {snapshots}): {e}"
            ) from e
        except BaseException:
            self.__exit__()
            raise
        return self

    def records(self, spec: StoreSpec) -> Iterator[tuple[Any, ...]]:
        """`(key bytes, value bytes)` of a key-value store, or `(key, value, window_start)`
        of a window store (live windows only, as the store serves them)."""
        db = self.db
        if db is None:
            raise StateStoreError("the version is not loaded (use VersionReader as a context manager)")
        store = db.open_store(spec)
        if spec.window_spec is None:
            yield from store.all()
            return
        for windowed, value in store.all():
            yield windowed.key, value, windowed.window.start

    def __exit__(self, *exc: object) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
        shutil.rmtree(self._workdir, ignore_errors=True)


def _span(versions: list[int]) -> str:
    return f"{versions[0]}..{versions[-1]}" if versions else "none"


@dataclass(frozen=True)
class ChangeRecord:
    """One change of a store in one batch: `put` (a final value), `delete`, or `expire`
    (window stores: every window starting before `window_start` was dropped)."""

    batch_id: int
    change: str
    key: bytes | None
    value: bytes | None
    window_start: int | None


def changes(
    state: StateLocation, partition: int, spec: StoreSpec, start: int, end: int, workdir: str | None = None
) -> Iterator[ChangeRecord]:
    """The changes of store `spec` in batches `start`..`end` of a partition, from the
    durable changelogs (each verified before a record is read). Where a batch has
    set-aside changelogs, the one the next committed batch built on is read; durable
    versions above Spark's newest commit (a rolled-back run's) decide nothing (without a
    commit log: the newest durable version decides)."""
    durable = state.durable(partition)
    available, asides = list_changelogs(durable)
    committed = state.committed_batch()
    head = max(available, default=end) if committed is None else max(end, committed)
    chain = follow_chain(durable, available, asides, head)
    scratch = tempfile.mkdtemp(prefix="statestore-changes-", dir=workdir)
    try:
        for version in range(start, end + 1):
            if version not in available:
                kept = sorted(available)
                raise MissingStateError(
                    f"the changes of batch {version} of partition {partition} of {state.location} are not kept "
                    f"(changelogs kept: {_span(kept)}; retention removes older ones)"
                )
            path = os.path.join(scratch, changelog_name(version))
            name = chain.get(version, (changelog_name(version), 0))[0]
            durable.download(name, path)
            changelog = Changelog(path, version, partition, source=f"{durable.uri(name)} of partition {partition}")
            yield from _changes_of(changelog, spec, version)
            os.remove(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _changes_of(changelog: Changelog, spec: StoreSpec, version: int) -> Iterator[ChangeRecord]:
    window = spec.window_spec
    for lo, hi in changelog.ranges().get(spec.name, ()):
        if window is not None and lo == b"":  # expiry: one range deletion below a window start
            yield ChangeRecord(version, "expire", None, None, start_of(hi))
    for store, key, value in changelog.entries():
        if store != spec.name:
            continue
        change = "delete" if value is None else "put"
        if window is None:
            yield ChangeRecord(version, change, key, value, None)
        elif key[:1] < b"\x80":  # window records; keys from 0xff on are the store's own bookkeeping
            user_key = unescape(key, 8)[0] if window.retain_duplicates else key[8:]
            yield ChangeRecord(version, change, user_key, value, start_of(key))


__all__ = [
    "ChangeRecord",
    "NoStateError",
    "StateLocation",
    "VersionReader",
    "change_count",
    "changes",
    "uncommitted_version",
]
