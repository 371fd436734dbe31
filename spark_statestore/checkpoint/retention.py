"""Retention of a partition's durable state.

Retention keeps `min_batches_to_retain` versions restorable: it finds the newest snapshot
at or below the oldest version to keep, and deletes what `files.KINDS` says: the files of
versions before that snapshot (older snapshots, changelogs with their set-aside copies and
the attempts' metrics records), SST files no kept snapshot refers to, and stale
temporaries. The changelog of the snapshot's own version stays: a restore checks the
snapshot's identity against it. It deletes manifests before files, so a crash in the middle leaves
extra files, never a snapshot with missing ones.
"""

from __future__ import annotations

import logging
import time

from spark_statestore.checkpoint.changelog import durable_changelog_id
from spark_statestore.checkpoint.files import (
    CHANGELOG,
    KINDS,
    MANIFEST,
    PartitionFiles,
    Retention,
    snapshot_versions,
)
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.names import changelog_name, snapshot_dir
from spark_statestore.checkpoint.snapshots import read_manifest
from spark_statestore.errors import CorruptStateError, MissingStateError
from spark_statestore.faults import fault_point

log = logging.getLogger("spark_statestore.checkpoint")


def _complete(files: PartitionFiles, version: int) -> dict | None:
    """The manifest of `version` if every file it lists exists with its size and it holds
    the very version the durable changelog of `version` produced (not one of a run the
    user rolled back), else None."""
    durable = files.durable
    try:
        manifest = read_manifest(durable, version)
    except (MissingStateError, CorruptStateError):
        return None
    shared, own = files.shared, files.own_files(version)
    for entry in manifest["files"]:
        info = shared.get(entry["durable"], own.get(entry["durable"]))
        if info is None or info.size != entry["size"]:
            return None
    info = files.changelogs.get(version)
    if info is not None:
        try:
            if durable_changelog_id(durable, changelog_name(version), version, info.size) != manifest.get("version_id"):
                return None
        except (FileNotFoundError, CorruptStateError):
            return None
    return manifest


def retain(
    durable: DurableDir, latest: int, min_batches_to_retain: int, grace_seconds: float = 600.0
) -> dict[str, int]:
    """Delete what no version in [latest - min_batches_to_retain + 1, latest] needs.

    Only a snapshot whose files are all present can stand in for older versions, and
    shared files nobody refers to are deleted only once they are `grace_seconds` old
    (another task may still be uploading the snapshot that will refer to them). The
    partition's files are listed once (`PartitionFiles`); `snapshots/` is listed again
    before shared files are deleted, for the snapshots uploaded since."""
    oldest_kept = latest - min_batches_to_retain + 1
    files = PartitionFiles.read(durable)
    snapshots = files.snapshots
    base = None
    for version in reversed([v for v in snapshots if v <= oldest_kept]):
        if _complete(files, version) is not None:
            base = version
            break
    if base is None:
        return {"snapshots": 0, "changelogs": 0, "shared": 0}
    old = [v for v in snapshots if v < base]
    durable.delete(files.below(base, MANIFEST))  # first: a snapshot without its manifest does not exist
    fault_point("retention:after-manifests")
    for version in old:
        durable.delete_dir(snapshot_dir(version))
    covered = files.below(base, CHANGELOG)
    for kind in KINDS:  # changelogs, then their set-aside copies and metrics records
        if kind.retention is Retention.BELOW_BASE and kind.folder == "":
            durable.delete(files.below(base, kind))
    fault_point("retention:after-changelogs")
    referenced = set()
    for version in snapshot_versions(durable):
        try:
            referenced.update(f["durable"] for f in read_manifest(durable, version)["files"])
        except (MissingStateError, CorruptStateError):
            log.warning("retention keeps shared files: snapshot %d of %s is unreadable", version, durable)
            return {"snapshots": len(old), "changelogs": len(covered), "shared": 0}
    now = time.time()
    unused = [
        name
        for name, info in files.shared.items()
        if name not in referenced and (info.mtime is None or now - info.mtime.timestamp() >= grace_seconds)
    ]
    durable.delete(unused)
    durable.delete_stale_temporaries(files.temporaries)
    return {"snapshots": len(old), "changelogs": len(covered), "shared": len(unused)}
