"""Durable snapshots of a partition's RocksDB copy, restore, and retention.

A snapshot of version V is a RocksDB checkpoint uploaded as:

* SST files under `sst/<sha256 prefix>-<size>.sst`: content-addressed, so a file shared by
  several snapshots is uploaded once (and a restored database that reuses file numbers
  can never be confused with another one's files);
* the other, small files under `snapshots/<V>/`;
* `snapshots/<V>.manifest` (every file with its size and SHA-256), written last: a
  snapshot without a manifest does not exist.

Retention keeps `min_batches_to_retain` versions restorable: it finds the newest snapshot
at or below the oldest version to keep, and deletes older snapshots, the changelogs that
snapshot covers, and SST files no kept snapshot refers to. It deletes manifests before
files, so a crash in the middle leaves extra files, never a snapshot with missing ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time

from spark_statestore import faults
from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.errors import CorruptStateError, MissingStateError

log = logging.getLogger("spark_statestore.checkpoint")

SNAPSHOTS = "snapshots"
SHARED = "sst"
_MANIFEST = ".manifest"


def manifest_name(version: int) -> str:
    return f"{SNAPSHOTS}/{version}{_MANIFEST}"


def changelog_name(version: int) -> str:
    return f"{version}.changelog"


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(4 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def snapshot_versions(durable: DurableDir) -> list[int]:
    """Versions that have a (complete) snapshot, ascending."""
    versions = []
    for info in durable.list(SNAPSHOTS):
        name = info.base_name
        if name.endswith(_MANIFEST) and name[: -len(_MANIFEST)].isdigit():
            versions.append(int(name[: -len(_MANIFEST)]))
    return sorted(versions)


def changelog_versions(durable: DurableDir) -> dict[int, object]:
    """Durable changelogs by version, with their file info."""
    out = {}
    for info in durable.list():
        name = info.base_name
        if name.endswith(".changelog") and name[: -len(".changelog")].isdigit():
            out[int(name[: -len(".changelog")])] = info
    return out


def upload_snapshot(durable: DurableDir, checkpoint_dir: str, version: int, partition: int) -> dict:
    """Upload a local RocksDB checkpoint as the snapshot of `version`."""
    shared = {info.base_name for info in durable.list(SHARED)}
    files = []
    uploaded = 0
    for name in sorted(os.listdir(checkpoint_dir)):
        path = os.path.join(checkpoint_dir, name)
        size = os.path.getsize(path)
        sha = _sha256(path)
        if name.endswith(".sst"):
            durable_name = f"{SHARED}/{sha[:32]}-{size}.sst"
            if durable_name.rsplit("/", 1)[1] not in shared:
                durable.publish_file(durable_name, path)
                uploaded += 1
        else:
            durable_name = f"{SNAPSHOTS}/{version}/{name}"
            durable.publish_file(durable_name, path)
            uploaded += 1
        files.append({"name": name, "durable": durable_name, "size": size, "sha256": sha})
        faults.point("snapshot:after-file")
    manifest = {"format": 1, "version": version, "partition": partition, "files": files}
    durable.publish_bytes(manifest_name(version), json.dumps(manifest, indent=1).encode("utf-8"))
    faults.point("snapshot:after-manifest")
    manifest["uploaded_files"] = uploaded
    return manifest


def read_manifest(durable: DurableDir, version: int) -> dict:
    name = manifest_name(version)
    try:
        manifest = json.loads(durable.read_bytes(name))
    except FileNotFoundError as e:
        raise MissingStateError(f"snapshot manifest {durable.uri(name)} (version {version}) is missing") from e
    except ValueError as e:
        raise CorruptStateError(f"snapshot manifest {durable.uri(name)} (version {version}) is unreadable: {e}") from e
    if manifest.get("version") != version or not isinstance(manifest.get("files"), list):
        raise CorruptStateError(f"snapshot manifest {durable.uri(name)} does not describe version {version}")
    return manifest


def restore_snapshot(durable: DurableDir, version: int, destination: str) -> None:
    """Download and verify the snapshot of `version` into `destination` (a new directory)."""
    manifest = read_manifest(durable, version)
    shutil.rmtree(destination, ignore_errors=True)
    os.makedirs(destination)
    for entry in manifest["files"]:
        local = os.path.join(destination, entry["name"])
        try:
            durable.download(entry["durable"], local)
        except FileNotFoundError as e:
            raise MissingStateError(
                f"snapshot file {durable.uri(entry['durable'])} (version {version}) is missing"
            ) from e
        if os.path.getsize(local) != entry["size"] or _sha256(local) != entry["sha256"]:
            raise CorruptStateError(
                f"snapshot file {durable.uri(entry['durable'])} (version {version}) fails its checksum"
            )


def _complete(durable: DurableDir, version: int, shared: dict[str, int]) -> dict | None:
    """The manifest of `version` if every file it lists exists with its size, else None."""
    try:
        manifest = read_manifest(durable, version)
    except (MissingStateError, CorruptStateError):
        return None
    own = {f"{SNAPSHOTS}/{version}/{info.base_name}": info.size for info in durable.list(f"{SNAPSHOTS}/{version}")}
    for entry in manifest["files"]:
        size = shared.get(entry["durable"], own.get(entry["durable"]))
        if size != entry["size"]:
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
    base = None
    for version in reversed([v for v in snapshots if v <= oldest_kept]):
        if _complete(durable, version, shared) is not None:
            base = version
            break
    if base is None:
        return {"snapshots": 0, "changelogs": 0, "shared": 0}
    old = [v for v in snapshots if v < base]
    durable.delete(manifest_name(v) for v in old)
    faults.point("retention:after-manifests")
    for version in old:
        durable.delete_dir(f"{SNAPSHOTS}/{version}")
    changelogs = [v for v in changelog_versions(durable) if v <= base]
    durable.delete(changelog_name(v) for v in changelogs)
    faults.point("retention:after-changelogs")
    referenced = set()
    for version in snapshot_versions(durable):
        try:
            referenced.update(f["durable"] for f in read_manifest(durable, version)["files"])
        except (MissingStateError, CorruptStateError):
            log.warning("retention keeps shared files: snapshot %d of %s is unreadable", version, durable)
            return {"snapshots": len(old), "changelogs": len(changelogs), "shared": 0}
    now = time.time()
    unused = [
        f"{SHARED}/{info.base_name}"
        for info in shared_infos
        if f"{SHARED}/{info.base_name}" not in referenced
        and (info.mtime is None or now - info.mtime.timestamp() >= grace_seconds)
    ]
    durable.delete(unused)
    durable.delete_stale_temporaries()
    return {"snapshots": len(old), "changelogs": len(changelogs), "shared": len(unused)}
