"""The names of the state's durable files, how each is made and how a listing is read back.

Under the query's checkpoint location::

    commits/<N>                         Spark's commit log: batch N committed
    statestore/_layout                  the stores, partition count and generations
    statestore/<partition>/             one partition's durable state (`partition_dir`):
        <V>.changelog                   the changelog that produced version V
        <V>.<id, 16 hex>.changelog      one set aside by a later attempt of batch V
        <V>.<id, 16 hex>.metrics        the metrics record of the attempt that published the
                                        changelog of V with that id (`metrics_name`)
        snapshots/<V>.manifest          the snapshot of version V (written last)
        snapshots/<V>/<file>            its small files
        sst/<sha256 prefix>-<size>.sst  its SST files, shared between snapshots
    statestore/_batches/<N>.json        the driver's facts of batch N (`batch_facts_name`),
                                        written by the JVM shim's listener

After a rescale, generation k's partitions are in `statestore/_g<k>/<partition>/`.
The local copy of a partition keeps its prepared changelogs under the same names.
Parsing is strict: a version is a decimal without leading zeros, so a name this package
does not write (`007.changelog`, `².changelog`, `notes.txt`) is never taken for one.
"""

from __future__ import annotations

import re

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, NotAFileError, not_a_file

STATESTORE = "statestore"
COMMITS = "commits"
SNAPSHOTS = "snapshots"
SHARED = "sst"
QUERY_LAYOUT = "_layout"  # in the state's directory: the stores and partition count of the query
BATCHES = "_batches"  # in the state's directory: per-batch facts of the driver
GENERATION_PREFIX = "_g"  # statestore/_g<k>/: the partitions of generation k (a rescale's)

_VERSION = r"(0|[1-9][0-9]{0,18})"
_NUMBER = re.compile(rf"^{_VERSION}$")
_CHANGELOG = re.compile(rf"^{_VERSION}\.changelog$")
_ASIDE = re.compile(rf"^{_VERSION}\.([0-9a-f]{{16}})\.changelog$")
_METRICS = re.compile(rf"^{_VERSION}\.([0-9a-f]{{16}})\.metrics$")
_BATCH_FACTS = re.compile(rf"^{_VERSION}\.json$")
_MANIFEST = re.compile(rf"^{_VERSION}\.manifest$")
_SNAPSHOT_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_SHARED_FILE = re.compile(rf"^{SHARED}/[0-9a-f]{{32}}-[0-9]{{1,15}}\.sst$")


def statestore_dir(root: str) -> str:
    """The state's directory under the checkpoint location `root` (a directory per partition)."""
    return f"{root}/{STATESTORE}"


def generation_dir(root: str, generation: int) -> str:
    """The directory of the partition directories of `generation` (0: the state's own)."""
    if generation == 0:
        return statestore_dir(root)
    return f"{statestore_dir(root)}/{GENERATION_PREFIX}{generation}"


def partition_dir(root: str, partition: int, generation: int = 0) -> str:
    """The durable directory of `partition` (of `generation`) under the checkpoint location `root`."""
    return f"{generation_dir(root, generation)}/{partition}"


def commits_dir(root: str) -> str:
    """Spark's commit log under the checkpoint location `root` (`commit_name` files)."""
    return f"{root}/{COMMITS}"


def commit_name(batch: int) -> str:
    """The commit log's file for `batch` (it exists once the driver committed the batch)."""
    return str(batch)


def changelog_name(version: int) -> str:
    return f"{version}.changelog"


def aside_name(version: int, ident: int) -> str:
    """Where a durable changelog of `version` with id `ident` is kept when another attempt
    of the same batch publishes over it (see `changelog.publish_changelog`)."""
    return f"{version}.{ident:016x}.changelog"


def metrics_name(version: int, ident: int) -> str:
    """The metrics record of the attempt whose changelog of `version` has id `ident`."""
    return f"{version}.{ident:016x}.metrics"


def metrics_version_and_id(name: str) -> tuple[int, int] | None:
    """The version and changelog id of a metrics record's name (None for any other name)."""
    match = _METRICS.match(name)
    return None if match is None else (int(match.group(1)), int(match.group(2), 16))


def batch_facts_name(batch: int) -> str:
    """The driver's facts of `batch`, relative to the state's directory (`statestore_dir`)."""
    return f"{BATCHES}/{batch}.json"


def batch_facts_batch(name: str) -> int | None:
    """The batch of a facts file's base name (None for names the shim does not write)."""
    match = _BATCH_FACTS.match(name)
    return None if match is None else int(match.group(1))


def manifest_name(version: int) -> str:
    return f"{SNAPSHOTS}/{version}.manifest"


def snapshot_dir(version: int) -> str:
    """The directory of the snapshot of `version`'s own (not shared) files."""
    return f"{SNAPSHOTS}/{version}"


def snapshot_file_name(version: int, name: str) -> str:
    return f"{snapshot_dir(version)}/{name}"


def shared_file_name(sha256: str, size: int) -> str:
    """The content-addressed name of an SST file (its SHA-256 hex digest and size)."""
    return f"{SHARED}/{sha256[:32]}-{size}.sst"


def number_of(name: str) -> int | None:
    """The number that names a commit log file (a batch) or a partition's directory (None
    for any other name)."""
    match = _NUMBER.match(name)
    return None if match is None else int(match.group(1))


def changelog_version(name: str) -> int | None:
    """The version of a changelog file name (None for names this package does not write)."""
    match = _CHANGELOG.match(name)
    return None if match is None else int(match.group(1))


def aside_version_and_id(name: str) -> tuple[int, int] | None:
    """The version and id of a set-aside changelog's name (None for any other name)."""
    match = _ASIDE.match(name)
    return None if match is None else (int(match.group(1)), int(match.group(2), 16))


def manifest_version(name: str) -> int | None:
    """The version of a manifest's base name (None for names this package does not write)."""
    match = _MANIFEST.match(name)
    return None if match is None else int(match.group(1))


def is_snapshot_file(name: object) -> bool:
    """Whether a manifest's local file name is a plain file name (never a path or `..`)."""
    return isinstance(name, str) and _SNAPSHOT_FILE.match(name) is not None and ".." not in name


def is_shared_file(name: object) -> bool:
    """Whether a manifest's durable name is a shared SST file's (`shared_file_name`)."""
    return isinstance(name, str) and _SHARED_FILE.match(name) is not None


def _refuse_others(durable: DurableDir, subdir: str, others: dict[str, str], *patterns: re.Pattern) -> None:
    """`NotAFileError` naming every entry of `others` (base names under `subdir`, with what
    each is) that has the name of a durable file (one of `patterns`)."""
    found = [
        not_a_file(durable.uri(f"{subdir}/{name}" if subdir else name), what)
        for name, what in sorted(others.items())
        if any(pattern.match(name) for pattern in patterns)
    ]
    if found:
        raise NotAFileError("; ".join(found))


def snapshot_versions(durable: DurableDir) -> list[int]:
    """Versions that have a snapshot manifest, ascending (other names are ignored; a
    manifest's name on anything but a regular file is `NotAFileError`)."""
    files, others = durable.scan(SNAPSHOTS)
    _refuse_others(durable, SNAPSHOTS, others, _MANIFEST)
    versions = (manifest_version(info.base_name) for info in files)
    return sorted(v for v in versions if v is not None)


def changelog_versions(durable: DurableDir) -> dict[int, pafs.FileInfo]:
    """Durable changelogs by version, with their file info (other names are ignored)."""
    return list_changelogs(durable)[0]


def list_changelogs(durable: DurableDir) -> tuple[dict[int, pafs.FileInfo], dict[int, set[int]]]:
    """Durable changelogs by version with their file info, and the ids of the set-aside
    changelogs of each version (`aside_name`); other names are ignored, and a changelog's
    name on anything but a regular file is `NotAFileError` (never a changelog not kept)."""
    out: dict[int, pafs.FileInfo] = {}
    asides: dict[int, set[int]] = {}
    files, others = durable.scan()
    _refuse_others(durable, "", others, _CHANGELOG, _ASIDE)
    for info in files:
        version = changelog_version(info.base_name)
        if version is not None:
            out[version] = info
            continue
        aside = aside_version_and_id(info.base_name)
        if aside is not None:
            asides.setdefault(aside[0], set()).add(aside[1])
    return out, asides
