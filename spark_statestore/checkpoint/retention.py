"""Retention of a partition's durable state.

Retention keeps `min_batches_to_retain` versions restorable: it finds the newest snapshot
at or below the oldest version to keep, and deletes older snapshots, the changelogs
before that snapshot (with their set-aside copies and the attempts' metrics records), and SST files no kept snapshot refers
to. The changelog of the snapshot's own version stays: a restore checks the snapshot's
identity against it. It deletes manifests before files, so a crash in the middle leaves
extra files, never a snapshot with missing ones.
"""

from __future__ import annotations

import logging
import time

from spark_statestore.checkpoint.changelog import durable_changelog_id
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.names import (
    SHARED,
    aside_name,
    changelog_name,
    list_changelogs,
    metrics_name,
    metrics_version_and_id,
    manifest_name,
    snapshot_dir,
    snapshot_file_name,
    snapshot_versions,
)
from spark_statestore.checkpoint.snapshots import read_manifest
from spark_statestore.errors import CorruptStateError, MissingStateError
from spark_statestore.faults import fault_point

log = logging.getLogger("spark_statestore.checkpoint")


def _complete(durable: DurableDir, version: int, shared: dict[str, int], changelogs: dict) -> dict | None:
    """The manifest of `version` if every file it lists exists with its size and it holds
    the very version the durable changelog of `version` produced (not one of a run the
    user rolled back), else None."""
    try:
        manifest = read_manifest(durable, version)
    except (MissingStateError, CorruptStateError):
        return None
    own = {snapshot_file_name(version, info.base_name): info.size for info in durable.list(snapshot_dir(version))}
    for entry in manifest["files"]:
        size = shared.get(entry["durable"], own.get(entry["durable"]))
        if size != entry["size"]:
            return None
    info = changelogs.get(version)
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
    (another task may still be uploading the snapshot that will refer to them)."""
    oldest_kept = latest - min_batches_to_retain + 1
    shared_infos = durable.list(SHARED)
    shared = {f"{SHARED}/{info.base_name}": info.size for info in shared_infos}
    snapshots = snapshot_versions(durable)
    changelogs, asides = list_changelogs(durable)
    base = None
    for version in reversed([v for v in snapshots if v <= oldest_kept]):
        if _complete(durable, version, shared, changelogs) is not None:
            base = version
            break
    if base is None:
        return {"snapshots": 0, "changelogs": 0, "shared": 0}
    old = [v for v in snapshots if v < base]
    durable.delete(manifest_name(v) for v in old)
    fault_point("retention:after-manifests")
    for version in old:
        durable.delete_dir(snapshot_dir(version))
    covered = [v for v in changelogs if v < base]
    durable.delete(changelog_name(v) for v in covered)
    durable.delete(aside_name(v, ident) for v, idents in asides.items() if v < base for ident in idents)
    records = (metrics_version_and_id(info.base_name) for info in durable.list())
    durable.delete(metrics_name(*key) for key in records if key is not None and key[0] < base)
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
        f"{SHARED}/{info.base_name}"
        for info in shared_infos
        if f"{SHARED}/{info.base_name}" not in referenced
        and (info.mtime is None or now - info.mtime.timestamp() >= grace_seconds)
    ]
    durable.delete(unused)
    durable.delete_stale_temporaries()
    return {"snapshots": len(old), "changelogs": len(covered), "shared": len(unused)}
