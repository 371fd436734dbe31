"""`DurableHistory`: a partition's durable versions as one listing shows them.

A load lists the partition's durable directory once (`files.PartitionFiles`; again only
when files vanish under it): the changelogs by version, the snapshot versions, and, for versions that a late
attempt published over, which file the next version builds on (`follow_chain`). The ids
of durable changelogs are read from their trailers as they are needed, once each, and a
version's changelog is served verified (`changelog`: the local copy when it is the very
file that was published, else a download).

It is the `plan.History` that plans are made from. `Vanished` (a `plan.StaleCopy`) says a
file listed a moment ago is gone (list again and start over).
"""

from __future__ import annotations

import os

import pyarrow.fs as pafs

from spark_statestore.checkpoint.changelog import (
    Changelog,
    durable_changelog_header,
    durable_changelog_id,
    follow_chain,
)
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.files import PartitionFiles
from spark_statestore.checkpoint.names import changelog_name
from spark_statestore.checkpoint.snapshots import read_manifest
from spark_statestore.errors import CorruptStateError
from spark_statestore.partition.metadata import VersionId
from spark_statestore.partition.plan import StaleCopy


class Vanished(StaleCopy):
    """A file listed a moment ago is gone (retention ran): list again and start over."""


class DurableHistory:
    """The durable changelogs and snapshots of a partition, as listed once (see module docstring)."""

    def __init__(self, files: PartitionFiles, partition: int, chosen: dict[int, tuple[str, int]]) -> None:
        self.files = files  # the listing
        self.durable = files.durable
        self.partition = partition
        self.changelogs: dict[int, pafs.FileInfo] = files.changelogs  # version -> file info
        self._chosen = chosen  # versions whose set-aside file is on the chain
        self._ids = {version: ident for version, (_, ident) in chosen.items()}  # durable ids read so far

    @staticmethod
    def read(durable: DurableDir, partition: int, head: int) -> DurableHistory:
        """List `durable` (of `partition`), following the chain of identities down from version `head`."""
        files = PartitionFiles.read(durable)
        return DurableHistory(files, partition, follow_chain(durable, files.changelogs, files.asides, head))

    def name(self, version: int) -> str:
        """The durable file of `version` on the chain (normally `N.changelog`)."""
        chosen = self._chosen.get(version)
        return changelog_name(version) if chosen is None else chosen[0]

    def changelog_uri(self, version: int) -> str:
        """Where `N.changelog` is (or should be), for messages."""
        return self.durable.uri(changelog_name(version))

    def durable_id(self, version: int) -> int:
        """The id of the durable changelog of `version` (from its trailer: one small read)."""
        ident = self._ids.get(version)
        if ident is None:
            name = changelog_name(version)
            try:
                ident = durable_changelog_id(self.durable, name, version, self.changelogs[version].size)
            except FileNotFoundError as e:
                raise Vanished(f"changelog {self.durable.uri(name)} disappeared") from e
            self._ids[version] = ident
        return ident

    def changelog(self, version: int, path: str) -> tuple[Changelog, bool]:
        """The verified changelog of `version` on the chain, at the local `path`: the file
        there when it is the very one that was published (same id), else a fresh download
        (True: downloaded). `Vanished` if it is gone; `CorruptStateError` naming it if the
        durable copy is damaged (nothing is left at `path` then)."""
        name, durable_id = self.name(version), self.durable_id(version)
        try:
            local = Changelog(path, version, self.partition)
            if local.id == durable_id:
                return local, False
        except CorruptStateError:
            pass
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            self.durable.download(name, path)
        except FileNotFoundError as e:
            raise Vanished(f"changelog {self.durable.uri(name)} disappeared") from e
        try:
            changelog = Changelog(path, version, self.partition, source=self.durable.uri(name))
        except CorruptStateError as e:
            os.remove(path)
            raise CorruptStateError(f"the durable changelog of partition {self.partition} is damaged: {e}") from e
        self._ids[version] = changelog.id  # replaced since its trailer was read: this id is the durable one now
        return changelog, True

    def identity(self, version: int) -> int | None:
        """The id the durable history gives `version` (its changelog's, else its snapshot's;
        None when it has neither)."""
        if version in self.changelogs:
            return self.durable_id(version)
        if version in self.snapshots:
            return int(read_manifest(self.durable, version).get("version_id", 0))
        return None

    @property
    def snapshots(self) -> list[int]:
        """Snapshot versions, ascending (`snapshots/` is listed on first use)."""
        return self.files.snapshots

    def snapshots_between(self, low: int, high: int) -> list[int]:
        """Snapshot versions in (low, high], ascending."""
        return [v for v in self.snapshots if low < v <= high]

    def base(self, version: int) -> VersionId:
        """The version and identity the changelog of `version` on the chain builds on (from
        its header: two small reads)."""
        name = self.name(version)
        try:
            header = durable_changelog_header(self.durable, name, version, self.partition)
        except FileNotFoundError as e:
            raise Vanished(f"changelog {self.durable.uri(name)} disappeared") from e
        return VersionId(header.base_version, header.base_id)

    def check_chain(self, state: VersionId, head: int) -> None:
        """`state` (a version and its identity) is on the chain of identities up to `head`
        (the newest committed version): each changelog above it, up to `head`, builds on
        the version below it, the first on `state` itself. A version read from files that
        later committed versions did not build on (a crafted or stray file that still
        verifies) raises `CorruptStateError` naming the changelog that breaks the chain."""
        below = state
        for version in range(state.version + 1, head + 1):
            if version not in self.changelogs:
                return  # nothing durable above to hold it against
            base = self.base(version)
            if base != below:
                name = self.name(version)
                raise CorruptStateError(
                    f"version {below.version} of partition {self.partition} (identity {below.id:x}) is not the one "
                    f"the committed history builds on: changelog {self.durable.uri(name)} (version {version}) "
                    f"builds on version {base.version} with identity {base.id:x}"
                )
            below = VersionId(version, self.durable_id(version))
