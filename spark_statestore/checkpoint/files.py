"""The kinds of durable file in a partition's directory, in one table (`KINDS`), and one
listing of that directory (`PartitionFiles`) that history, retention, inspection and
verification share.

    kind                 name                      retention       inspect's total  verify
    changelog            <V>.changelog             below the base  changelog        checked
    set-aside changelog  <V>.<id>.changelog        below the base  changelog        checked
    metrics record       <V>.<id>.metrics          below the base  metrics          -
    snapshot manifest    snapshots/<V>.manifest    below the base  snapshot         restored
    snapshot columns     snapshots/<V>/COLUMNS.arrow below the base snapshot        read whole
    snapshot file        snapshots/<V>/<file>      below the base  snapshot         restored
    shared SST file      sst/<sha256>-<size>.sst   unreferenced    snapshot         restored
    temporary            .tmp-<uuid>-<name>        stale           -                -

"Below the base": deleted once a complete snapshot above its version stands in for it
(`retention.py`); "unreferenced": deleted once no kept snapshot lists it and it is older
than the grace period; "stale": a crashed publish's, deleted once an hour old. In the root
and `snapshots/`, a name of a kind that `verify` checks, on anything but a regular file, is
`NotAFileError` (never taken for a missing file; a restore refuses one in `sst/` or a
snapshot's folder when it reads it). A metrics record is read leniently (`partition.task_records`: a bad
one is skipped and named), so `verify` leaves it alone. A new kind of file is a row here: retention, `inspect` and `verify`
take it from the table.

A listing reads the partition's root; `snapshots/`, `sst/` and a snapshot's own folder are
read when first asked for, once each (an open whose local copy the root's changelogs bring
to the wanted version never lists `snapshots/`: on an object store a LIST per batch saved).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow.fs as pafs

from spark_statestore.checkpoint import names
from spark_statestore.checkpoint.filesystem import TEMP_PREFIX, DurableDir, NotAFileError, not_a_file


class Retention(enum.Enum):
    """When retention deletes a kind of file (see module docstring)."""

    BELOW_BASE = "below the base"
    UNREFERENCED = "unreferenced"
    STALE = "stale"


@dataclass(frozen=True)
class FileKind:
    """One kind of durable file: the folder it is in, its name's pattern and what a name
    gives (`key`: the version, or the version and the changelog id), when retention deletes
    it, which of `inspect`'s byte totals counts it, and whether `verify` checks it."""

    name: str
    folder: str  # "" (the partition's root), names.SNAPSHOTS, a snapshot's own folder, names.SHARED
    pattern: re.Pattern[str]
    key: Callable[[re.Match[str]], Any]
    retention: Retention
    total: str | None
    checked: bool

    def parse(self, base_name: str) -> Any:
        """The key of a file of this kind's name (None for any other name)."""
        match = self.pattern.match(base_name)
        return None if match is None else self.key(match)


def _version(match: re.Match[str]) -> int:
    return int(match.group(1))


def _version_and_id(match: re.Match[str]) -> tuple[int, int]:
    return int(match.group(1)), int(match.group(2), 16)


def _whole(match: re.Match[str]) -> str:
    return match.group(0)


_BELOW, _UNREFERENCED, _STALE = Retention.BELOW_BASE, Retention.UNREFERENCED, Retention.STALE
_TEMPORARY = re.compile(rf"^{re.escape(TEMP_PREFIX)}.*", re.S)
_OWN = f"{names.SNAPSHOTS}/<V>"

# the table: name, folder, pattern, key, retention, inspect's total, checked by verify
CHANGELOG = FileKind("changelog", "", names.CHANGELOG, _version, _BELOW, "changelog", True)
ASIDE = FileKind("set-aside changelog", "", names.ASIDE, _version_and_id, _BELOW, "changelog", True)
METRICS = FileKind("metrics record", "", names.METRICS, _version_and_id, _BELOW, "metrics", False)
MANIFEST = FileKind("snapshot manifest", names.SNAPSHOTS, names.MANIFEST, _version, _BELOW, "snapshot", True)
COLUMNS = FileKind("snapshot columns", _OWN, names.COLUMNS, _whole, _BELOW, "snapshot", True)
SNAPSHOT_FILE = FileKind("snapshot file", _OWN, names.SNAPSHOT_FILE, _whole, _BELOW, "snapshot", True)
SHARED = FileKind("shared SST file", names.SHARED, names.SHARED_BASE, _whole, _UNREFERENCED, "snapshot", True)
TEMPORARY = FileKind("temporary", "", _TEMPORARY, _whole, _STALE, None, False)

KINDS = (CHANGELOG, ASIDE, METRICS, MANIFEST, COLUMNS, SNAPSHOT_FILE, SHARED, TEMPORARY)
TOTALS = tuple(dict.fromkeys(kind.total for kind in KINDS if kind.total is not None))  # inspect's byte totals


Found = dict[FileKind, dict[Any, pafs.FileInfo]]


def _scan(
    durable: DurableDir, folder: str, kinds: tuple[FileKind, ...], refuse: bool = True
) -> tuple[Found, list[str]]:
    """One listing of `folder`: its files of `kinds` by key (other names are ignored), and
    the names of its folders. With `refuse`, a name of a checked kind on anything but a
    regular file is `NotAFileError` naming each."""
    files, others = durable.scan(folder, temporaries=TEMPORARY in kinds)
    odd = [
        not_a_file(durable.uri(f"{folder}/{name}" if folder else name), what)
        for name, what in sorted(others.items())
        if refuse and any(kind.checked and kind.parse(name) is not None for kind in kinds)
    ]
    if odd:
        raise NotAFileError("; ".join(odd))
    found: Found = {kind: {} for kind in kinds}
    for info in files:
        for kind in kinds:
            key = kind.parse(info.base_name)
            if key is not None:
                found[kind][key] = info
                break
    return found, sorted(name for name, what in others.items() if what == "a directory")


_ROOT = (CHANGELOG, ASIDE, METRICS, TEMPORARY)
_OWN_KINDS = (COLUMNS, SNAPSHOT_FILE)  # a snapshot's folder: the columns file first (any plain name is a file)


def _version_of(key: Any) -> int:
    return key[0] if isinstance(key, tuple) else key


@dataclass
class PartitionFiles:
    """The durable files of one partition as one listing shows them (see module docstring)."""

    durable: DurableDir
    root: Found  # the root's kinds, by kind and key
    _manifests: tuple[Found, list[int]] | None = field(default=None, repr=False)
    _shared: dict[str, pafs.FileInfo] | None = field(default=None, repr=False)
    _own: dict[int, Found] = field(default_factory=dict, repr=False)

    @staticmethod
    def read(durable: DurableDir) -> PartitionFiles:
        """List the partition's root (`snapshots/`: on first use)."""
        return PartitionFiles(durable, _scan(durable, "", _ROOT)[0])

    def _snapshots_listed(self) -> tuple[Found, list[int]]:
        if self._manifests is None:
            found, folders = _scan(self.durable, names.SNAPSHOTS, (MANIFEST,))
            dirs = (names.number_of(name) for name in folders)
            self._manifests = found, sorted(v for v in dirs if v is not None)
        return self._manifests

    @property
    def found(self) -> Found:
        """The root's kinds and the manifests, by kind and key (`snapshots/` listed)."""
        return {**self.root, **self._snapshots_listed()[0]}

    @property
    def snapshot_dirs(self) -> list[int]:
        """Versions with a folder of their own files (a manifest's, or a torn upload's)."""
        return self._snapshots_listed()[1]

    @property
    def changelogs(self) -> dict[int, pafs.FileInfo]:
        """The changelogs by version."""
        return self.root[CHANGELOG]

    @property
    def asides(self) -> dict[int, dict[int, pafs.FileInfo]]:
        """The set-aside changelogs by version, then by changelog id."""
        out: dict[int, dict[int, pafs.FileInfo]] = {}
        for (version, ident), info in sorted(self.root[ASIDE].items()):
            out.setdefault(version, {})[ident] = info
        return out

    @property
    def records(self) -> dict[tuple[int, int], pafs.FileInfo]:
        """The metrics records by (version, changelog id)."""
        return self.root[METRICS]

    @property
    def snapshots(self) -> list[int]:
        """Versions that have a snapshot manifest, ascending."""
        return sorted(self._snapshots_listed()[0][MANIFEST])

    @property
    def temporaries(self) -> list[pafs.FileInfo]:
        """What crashed publishes left (`filesystem.TEMP_PREFIX`)."""
        return list(self.root[TEMPORARY].values())

    @property
    def shared(self) -> dict[str, pafs.FileInfo]:
        """The shared SST files by durable name (`sst/` is listed on first use)."""
        if self._shared is None:
            found = _scan(self.durable, names.SHARED, (SHARED,), refuse=False)[0][SHARED]
            self._shared = {f"{names.SHARED}/{name}": info for name, info in found.items()}
        return self._shared

    def own_files(self, version: int) -> dict[str, pafs.FileInfo]:
        """The snapshot of `version`'s own files (its columns file too) by durable name."""
        return {name: info for found in self._own_kinds(version).values() for name, info in found.items()}

    def _own_kinds(self, version: int) -> Found:
        """The snapshot of `version`'s own files by kind, then durable name (listed on first use)."""
        if version not in self._own:
            folder = names.snapshot_dir(version)
            found = _scan(self.durable, folder, _OWN_KINDS, refuse=False)[0]
            self._own[version] = {
                kind: {f"{folder}/{name}": info for name, info in files.items()} for kind, files in found.items()
            }
        return self._own[version]

    def below(self, base: int, kind: FileKind) -> list[str]:
        """The durable names of the listed files of `kind` (a kind retention deletes below
        the base) whose version is below `base`."""
        if kind.retention is not Retention.BELOW_BASE:
            raise ValueError(f"retention does not delete {kind.name}s by version")
        folder = f"{kind.folder}/" if kind.folder else ""
        return [folder + info.base_name for key, info in sorted(self.found[kind].items()) if _version_of(key) < base]

    def checked(self) -> list[tuple[int, str]]:
        """`(version, name)` of the root's files that `verify` reads against their own
        checksums (the changelogs, then the set-aside ones; snapshots: by a restore), each
        kind in version order."""
        kinds = [kind for kind in KINDS if kind.checked and kind.folder == ""]
        return [(_version_of(key), info.base_name) for kind in kinds for key, info in sorted(self.found[kind].items())]

    def totals(self) -> dict[str, int]:
        """Bytes per `inspect` total (`TOTALS`), over every file of a kind it counts (each
        snapshot folder and `sst/` are listed for it)."""
        out = dict.fromkeys(TOTALS, 0)
        for kind, files in self._by_kind().items():
            if kind.total is not None:
                out[kind.total] += sum(info.size or 0 for info in files)
        return out

    def _by_kind(self) -> dict[FileKind, list[pafs.FileInfo]]:
        listed = {kind: list(found.values()) for kind, found in self.found.items()}
        for kind in _OWN_KINDS:
            listed[kind] = [info for v in self.snapshot_dirs for info in self._own_kinds(v)[kind].values()]
        listed[SHARED] = list(self.shared.values())
        return listed


def snapshot_versions(durable: DurableDir) -> list[int]:
    """Versions that have a snapshot manifest, ascending (`snapshots/` alone listed)."""
    return sorted(_scan(durable, names.SNAPSHOTS, (MANIFEST,))[0][MANIFEST])
