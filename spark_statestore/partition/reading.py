"""Reading a query's state from outside the query, from the durable files alone.

Nothing here takes the writer's lock or touches its local copy: a version is rebuilt in a
private directory (`Recovery` on a `LocalPartitionDir` of the reader's own: the newest
usable snapshot at or below it, then changelogs), and changes are read from the durable
changelogs. Spark's commit log (`<checkpointLocation>/commits/`, one file per committed
batch) says which version is committed; a prepared changelog above it belongs to a batch
that has not committed (yet).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from typing import Any, Iterator, cast

import pyarrow.fs as pafs

from spark_statestore.checkpoint.changelog import Changelog, durable_changelog_trailer
from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.files import PartitionFiles
from spark_statestore.checkpoint.snapshot_columns import columns_entry, read_snapshot_columns
from spark_statestore.checkpoint.snapshots import read_manifest
from spark_statestore.checkpoint.names import (
    changelog_name,
    commits_dir,
    generation_dir,
    number_of,
    partition_dir,
    statestore_dir,
)
from spark_statestore.errors import CorruptStateError, MissingStateError, StateStoreError
from spark_statestore.kinds.build import build_store
from spark_statestore.partition.columns_copy import ColumnsCopy, NeedsCopy
from spark_statestore.partition.columnar import CHUNK, ChangeColumns, StoreColumns, changelog_columns, store_columns
from spark_statestore.partition.generations import serving
from spark_statestore.partition.layout import Layout, query_layout_of_run
from spark_statestore.partition.local import LocalPartitionDir
from spark_statestore.partition.metadata import EMPTY, VersionId
from spark_statestore.partition.place import PartitionPlace
from spark_statestore.partition.history import DurableHistory
from spark_statestore.partition.plan import RestorePlan
from spark_statestore.partition.recovery import Recovery, check_changelog_layout
from spark_statestore.partition.spark_log import newest_planned_batch, spark_partitions
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.txn.apply import DEFAULT_CHUNK_BYTES
from spark_statestore.txn.database import TransactionalDatabase

log = logging.getLogger(__name__)


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
    generation: int | None = None  # None: the one written now (see `generations.py`)

    @property
    def generation_number(self) -> int:
        return self.layout.generation.number if self.generation is None else self.generation

    def at_batch(self, batch: int) -> "StateLocation":
        """The state as batch `batch` ran: in the generation that served it."""
        return replace(self, generation=serving(self.layout.history, batch).number)

    @staticmethod
    def open(location: str, filesystem: pafs.FileSystem | None = None, run: str | None = None) -> "StateLocation":
        """The state under `location`; `NoStateError` naming it when there is none. `run`:
        the query run it is read for (its layout is read once per run: `query_layout_of_run`)."""
        layout = query_layout_of_run(location, run, filesystem)
        if layout is None:
            _, root = resolve_location(location, filesystem)
            raise NoStateError(f"there is no spark_statestore state under {location} (no {statestore_dir(root)}/_layout)")
        return StateLocation(location, layout, filesystem)

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions with durable state now, ascending (one listing per call: list
        after reading the commit log, so every partition of a committed batch is seen)."""
        fs, root = resolve_location(self.location, self.filesystem)
        selector = pafs.FileSelector(generation_dir(root, self.generation_number), allow_not_found=True)
        return tuple(
            sorted(
                int(info.base_name)
                for info in fs.get_file_info(selector)
                if info.type == pafs.FileType.Directory and number_of(info.base_name) is not None
            )
        )

    @property
    def committed_partitions(self) -> tuple[int, ...]:
        """The partitions each committed batch of this generation wrote a changelog for: all
        of its partition count (one whose files are gone is still read, and fails naming
        what is missing, instead of being left out). The count is the layout's, or where the
        layout has none (the operators Spark shuffles into its state partitions record
        none), Spark's state partition count in its offset log; without either, the
        partitions with durable state now."""
        counts = [g.partitions for g in self.layout.history if g.number == self.generation_number]
        count = counts[0] if counts else None
        if count is None and self.generation_number == 0:
            planned = newest_planned_batch(self.location, self.filesystem)
            count = None if planned is None else spark_partitions(self.location, planned, self.filesystem)
        listed = self.partitions
        if count is None or count < 1:
            return listed
        return tuple(sorted(set(range(count)) | set(listed)))  # a partition beyond the count is read too

    def store(self, name: str) -> StoreSpec:
        for spec in self.layout.stores:
            if spec.name == name:
                return spec
        raise KeyError(f"the state under {self.location} has no store {name!r}; it has {self.layout.names}")

    def durable(self, partition: int) -> DurableDir:
        fs, root = resolve_location(self.location, self.filesystem)
        return DurableDir(fs, partition_dir(root, partition, self.generation_number))

    def committed_batch(self) -> int | None:
        """The newest batch Spark's commit log holds (None: nothing committed yet)."""
        fs, root = resolve_location(self.location, self.filesystem)
        selector = pafs.FileSelector(commits_dir(root), allow_not_found=True)
        batches = [int(i.base_name) for i in fs.get_file_info(selector) if number_of(i.base_name) is not None]
        return max(batches, default=None)

    def versions(self, partition: int) -> tuple[list[int], list[int]]:
        """The durable changelog versions and snapshot versions of a partition."""
        files = PartitionFiles.read(self.durable(partition))
        return sorted(files.changelogs), files.snapshots


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
    the committed one, if it builds on the committed version (one that does not is a
    leftover of a run the user rolled back: the committed version is what there is)."""
    history = DurableHistory.read(state.durable(partition), partition, committed)
    if committed + 1 not in history.changelogs:
        return committed
    ident = history.identity(committed) if committed >= 0 else EMPTY.id
    return committed + 1 if history.base(committed + 1) == VersionId(committed, ident) else committed


MERGE_RECORDS = 1 << 20  # changelog records a bulk read merges in memory (beyond: written to its copy)
# a snapshot's columns file is read whole into memory (every column family, decompressed:
# a few times its size); a larger one is not used, the snapshot is restored and scanned
COLUMNS_READ_BYTES = 64 << 20


class _KeepChangelogs(Recovery):
    """A `Recovery` that verifies the changelogs after its base (the same plan and checks)
    and keeps up to `limit` of their records aside instead of writing them; past that it
    writes what it kept, in order, and every later changelog (memory stays bounded).
    With `columns`, a snapshot with a columns file is not restored: the file is read
    into memory and stands in for the copy (`ColumnsCopy`, checked the same way; a
    read that must write raises `NeedsCopy`)."""

    def __init__(self, *args: Any, limit: int, columns: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit = limit
        self.columns = columns
        self.kept: list[tuple[Changelog, VersionId, str]] = []
        self.kept_records = 0
        self.writing = False

    def _from_snapshot(self, history: DurableHistory, version: int) -> tuple[Any, VersionId]:
        durable, partition = self.place.durable, self.place.partition
        manifest = read_manifest(durable, version) if self.columns else None
        entry = None if manifest is None else columns_entry(manifest)
        if entry is None or entry["size"] > COLUMNS_READ_BYTES or manifest.get("partition") != partition:  # type: ignore[union-attr]
            return super()._from_snapshot(history, version)  # (which names a manifest of another partition)
        try:
            copy = ColumnsCopy(read_snapshot_columns(durable, entry))
            return copy, self._check_snapshot(history, version, copy)
        except (CorruptStateError, MissingStateError) as e:  # the snapshot's RocksDB files may serve
            log.warning(
                "partition %d: the columns file %s of snapshot %d cannot serve, its RocksDB files are read: %s",
                partition, durable.uri(entry["durable"]), version, e,
            )
            return super()._from_snapshot(history, version)

    def _apply(self, history: DurableHistory, db: TransactionalDatabase, plan: RestorePlan) -> VersionId:
        self.kept, self.kept_records, self.writing = [], 0, False  # a listing again starts over
        return super()._apply(history, db, plan)

    def _write_changelog(
        self, db: TransactionalDatabase, changelog: Changelog, applied: VersionId, where: str
    ) -> None:
        if self.limit and not self.writing and self.kept_records + changelog.records <= self.limit:
            self.kept.append((changelog, applied, where))
            self.kept_records += changelog.records
            return
        if isinstance(db, ColumnsCopy):
            raise NeedsCopy(f"{where}: more changelog records than a read merges ({self.limit}) follow {db.path}")
        self.writing = True
        for kept in self.kept:
            super()._write_changelog(db, *kept)
        self.kept = []
        super()._write_changelog(db, changelog, applied, where)


class VersionReader:
    """One partition's state at one version, rebuilt privately (a context manager: the
    private copy is deleted on exit). With `merge_records`, up to that many records of the
    changelogs after the snapshot the version is built from are not written into the copy
    but merged by `columns` in bulk (verified the same way; no RocksDB writes, flushes or
    compactions for them); `records` needs them written (`merge_records=0`)."""

    def __init__(
        self,
        state: StateLocation,
        partition: int,
        version: int,
        committed: int | None = None,
        workdir: str | None = None,
        merge_records: int = 0,
    ) -> None:
        self.state = state
        self.partition = partition
        self.version = version
        self.committed = committed  # the newest committed version (Recovery.load)
        self._workdir = tempfile.mkdtemp(prefix="statestore-reader-", dir=workdir)
        self.db: TransactionalDatabase | ColumnsCopy | None = None  # ColumnsCopy: a snapshot's, unchanged
        self.loaded: VersionId | None = None
        self.merge_records = merge_records
        self.pending: list[Changelog] = []  # verified changelogs not written to `db`, in order
        self._history: DurableHistory | None = None

    def __enter__(self) -> "VersionReader":
        try:
            try:
                self._load(self.merge_records > 0)
            except NeedsCopy:
                self._load(False)
            if self.committed is not None and self.committed > self.version:  # time travel
                cast(DurableHistory, self._history).check_chain(self.loaded, self.committed)
        except MissingStateError as e:
            self.__exit__()
            changelogs, snapshots = self.state.versions(self.partition)
            raise MissingStateError(
                f"version {self.version} of partition {self.partition} of {self.state.location} cannot be read "
                f"(changelogs kept: {_span(changelogs)}, snapshots: {snapshots}): {e}"
            ) from e
        except BaseException:
            self.__exit__()
            raise
        return self

    def _load(self, columns: bool) -> None:
        """Rebuild the version (from a snapshot's columns file where `columns` and it has one)."""
        local = LocalPartitionDir(self._workdir, self.state.location, self.partition)
        layout = Layout(self.state.layout.stores, None)
        place = PartitionPlace(self.state.location, self.partition, layout, self.state.durable(self.partition), local)
        recovery = _KeepChangelogs(
            place,
            lambda: TransactionalDatabase(local.db_path, wal=False, uncommitted_max_bytes=-1, replayable=True),
            PartitionMetrics(),
            chunk_bytes=DEFAULT_CHUNK_BYTES,
            limit=self.merge_records,
            columns=columns,
        )
        self.db, self.loaded = recovery.load(self.version, self.committed)
        self.pending = [changelog for changelog, _, _ in recovery.kept]
        self._history = recovery.history

    def records(self, spec: StoreSpec) -> Iterator[tuple[Any, ...]]:
        """`(key bytes, value bytes)` of a key-value store, or `(key, value, window_start)`
        of a window store (live windows only, as the store serves them)."""
        if self.pending or isinstance(self.db, ColumnsCopy):
            raise StateStoreError("records() reads a restored copy with its changelogs written (merge_records=0)")
        store = build_store(spec, self._loaded())  # TTL: live entries, on the version's clock
        yield from spec.store_kind.records(store)

    def columns(
        self, spec: StoreSpec, chunk: int = CHUNK, keys: tuple[bytes | None, bytes | None] = (None, None)
    ) -> Iterator[StoreColumns]:
        """The same records as `records`, in the same order, as Arrow columns `chunk`
        records at a time, read in bulk (see `columnar`; `keys`: `store_columns`' range)."""
        db = self._loaded()
        snapshot = db.columns if isinstance(db, ColumnsCopy) else None
        return store_columns(db, spec, chunk, self.pending, keys, snapshot)

    def _loaded(self) -> Any:
        if self.db is None:
            raise StateStoreError("the version is not loaded (use VersionReader as a context manager)")
        return self.db

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
    (window stores: every window starting before the window start in `parts` was dropped;
    TTL key-value stores: the entry `key` had expired and was deleted in this batch).
    `parts`: what the store's key schema carries beside the key (a window start)."""

    batch_id: int
    change: str
    key: bytes | None
    value: bytes | None
    parts: tuple[Any, ...] = ()


def change_columns(
    state: StateLocation, partition: int, spec: StoreSpec, start: int, end: int, workdir: str | None = None
) -> Iterator[ChangeColumns]:
    """The changes of store `spec` in batches `start`..`end` of a partition as Arrow
    columns, from the durable changelogs (each verified before a record is read). Where a
    batch has set-aside changelogs, the one the next committed batch built on is read;
    durable versions above Spark's newest commit (a rolled-back run's) decide nothing
    (without a commit log: the newest durable version decides)."""
    state = state.at_batch(start)
    rescaled = state.at_batch(end).generation_number
    if rescaled != state.generation_number:
        base = state.layout.history[rescaled].base
        raise MissingStateError(
            f"batches {start}..{end} of {state.location} span a rescale (after batch {base} the state moved to "
            f"{state.layout.history[rescaled].partitions} partitions): read {start}..{base} and {base + 1}..{end} apart"
        )
    durable = state.durable(partition)
    committed = state.committed_batch()
    head = end if committed is None else max(end, committed)
    if committed is None:  # without a commit log: the newest durable version decides
        head = max(PartitionFiles.read(durable).changelogs, default=end)
    history = DurableHistory.read(durable, partition, head)
    layout = Layout(state.layout.stores, None)
    below: VersionId | None = VersionId(-1, EMPTY.id) if start == 0 else None  # what `start` builds on
    if below is None and (start - 1 in history.changelogs or start - 1 in history.snapshots):
        below = VersionId(start - 1, cast(int, history.identity(start - 1)))
    if below is not None:  # before any row: every batch read is one the committed history built on
        history.check_chain(below, head)
    elif start in history.changelogs:  # the oldest kept: nothing below to hold it against
        history.check_chain(VersionId(start, history.durable_id(start)), head)
    scratch = tempfile.mkdtemp(prefix="statestore-changes-", dir=workdir)
    try:
        for version in range(start, end + 1):
            if version not in history.changelogs:
                kept = sorted(history.changelogs)
                raise MissingStateError(
                    f"the changes of batch {version} of partition {partition} of {state.location} are not kept "
                    f"(changelogs kept: {_span(kept)}; retention removes older ones)"
                )
            name = history.name(version)
            where = f"changelog {durable.uri(name)} of partition {partition}"
            path = os.path.join(scratch, changelog_name(version))
            durable.download(name, path)
            changelog = Changelog(path, version, partition, source=f"{durable.uri(name)} of partition {partition}")
            check_changelog_layout(layout, changelog, state.location, f"{where} (version {version})")
            base = VersionId(changelog.base_version, changelog.base_id)
            if below is not None and base != below:
                raise CorruptStateError(
                    f"{where} (version {version}) builds on version {base.version} with identity {base.id:x}, "
                    f"not on version {below.version} of the committed history (identity {below.id:x})"
                )
            if changelog.id != history.durable_id(version):
                raise CorruptStateError(f"{where} (version {version}) was replaced while it was read: read again")
            below = VersionId(version, changelog.id)
            yield from changelog_columns(changelog, spec, version)
            os.remove(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def changes(
    state: StateLocation, partition: int, spec: StoreSpec, start: int, end: int, workdir: str | None = None
) -> Iterator[ChangeRecord]:
    """`change_columns` one record at a time."""
    for chunk in change_columns(state, partition, spec, start, end, workdir):
        parts = zip(*(part.to_pylist() for part in chunk.parts)) if chunk.parts else [()] * len(chunk)
        for change, key, value, parts_ in zip(
            chunk.change.to_pylist(), chunk.keys.to_pylist(), chunk.values.to_pylist(), parts
        ):
            yield ChangeRecord(chunk.batch_id, change, key, value, parts_)


__all__ = [
    "ChangeRecord",
    "NoStateError",
    "StateLocation",
    "VersionReader",
    "change_columns",
    "change_count",
    "changes",
    "uncommitted_version",
]
