"""What a partition keeps about itself inside its database, as a small typed view.

* the committed version and its identity (`VersionId`): written in the same batch as the
  last changelog applied, so data and version never disagree;
* the version the last snapshot was taken at (a restored snapshot says it was taken);
* the version this executor prepared last (so a durable changelog that disappears is
  noticed even where the durable listing alone cannot tell);
* the version last applied ahead of Spark's commit (`OpenCopies`), on disk before any of
  its writes: a crash may leave those writes under the metadata of the version before;
* the layout the state was built with (see `layout.py`).

A version is identified by its number *and* the id of the changelog that produced it
(a hash of the changelog's content, base included: see `checkpoint/changelog.py`): two
attempts of one batch that wrote different changes produce two different version-N
states, and everything kept across batches (a local copy, a record
cache) is used only at the identity it was built at.
"""

from __future__ import annotations

from typing import NamedTuple

from spark_statestore.partition.layout import Layout
from spark_statestore.txn.database import TransactionalDatabase

_VERSION = "partition.version"
_VERSION_ID = "partition.version_id"
_SNAPSHOT = "partition.snapshot_version"
_PREPARED = "partition.prepared"
_AHEAD = "partition.ahead"
_LAYOUT = "partition.layout"


class VersionId(NamedTuple):
    """A version of a partition's state: its number and the id of the changelog that made it."""

    version: int
    id: int

    def __str__(self) -> str:
        return f"{self.version}.{self.id:x}"


EMPTY = VersionId(-1, 0)


class PartitionMetadata:
    """The partition's records in its database (see module docstring)."""

    def __init__(self, db: TransactionalDatabase) -> None:
        self._db = db

    @property
    def committed(self) -> VersionId:
        version = self._db.committed_offset(_VERSION)
        if version is None:
            return EMPTY
        return VersionId(version, self._db.committed_offset(_VERSION_ID) or 0)

    @staticmethod
    def committed_offsets(version: VersionId) -> dict[str, int]:
        """The offsets that record `version` as committed (replayed with its changes)."""
        return {_VERSION: version.version, _VERSION_ID: version.id}

    @property
    def snapshot_version(self) -> int:
        raw = self._db.get_property(_SNAPSHOT)
        return -1 if raw is None else int(raw)

    def record_snapshot(self, version: int) -> None:
        self._db.set_properties({_SNAPSHOT: str(version)})

    @property
    def prepared(self) -> VersionId | None:
        """The version this copy's owner prepared last (it may not have committed)."""
        return self._version_property(_PREPARED)

    def record_prepared(self, version: VersionId) -> None:
        self._db.set_properties({_PREPARED: str(version)})

    @property
    def ahead(self) -> VersionId | None:
        """The version last applied ahead of Spark's commit (None: never)."""
        return self._version_property(_AHEAD)

    def record_ahead(self, version: VersionId) -> None:
        self._db.set_properties({_AHEAD: str(version)})

    def _version_property(self, name: str) -> VersionId | None:
        raw = self._db.get_property(name)
        if raw is None:
            return None
        version, _, ident = raw.partition(".")
        return VersionId(int(version), int(ident, 16))

    def layout(self) -> Layout | None:
        raw = self._db.get_property(_LAYOUT)
        return None if raw is None else Layout.from_json(raw, f"the database {self._db.path}")

    def record_layout(self, layout: Layout) -> None:
        self._db.set_properties({_LAYOUT: layout.to_json()})
