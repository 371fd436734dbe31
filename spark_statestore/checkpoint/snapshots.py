"""Durable snapshots of a partition's RocksDB copy, and their restore.

A snapshot of version V is a RocksDB checkpoint uploaded as:

* SST files under `sst/<sha256 prefix>-<size>.sst` (names: see `names.py`): content-addressed, so a file shared by
  several snapshots is uploaded once (and a restored database that reuses file numbers
  can never be confused with another one's files);
* the other, small files under `snapshots/<V>/`;
* `snapshots/<V>.manifest` (every file with its size and SHA-256), written last: a
  snapshot without a manifest does not exist.

The manifest also records the identity (`version_id`) of the version it holds. Names in a
manifest are data, never paths: a restore refuses any entry that is not a plain file
name of the forms this module writes, so a crafted manifest cannot write outside the
destination.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Callable

from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.snapshot_columns import COLUMNS_FILE
from spark_statestore.checkpoint.names import (
    SHARED,
    is_shared_file,
    is_snapshot_file,
    manifest_name,
    shared_file_name,
    snapshot_file_name,
)
from spark_statestore.errors import CorruptStateError, MissingStateError
from spark_statestore.faults import fault_point


CURRENT = "CURRENT"  # the file that names a RocksDB database's manifest


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def upload_snapshot(
    durable: DurableDir,
    checkpoint_dir: str,
    version: int,
    partition: int,
    version_id: int = 0,
    verify: Callable[[str], None] | None = None,
) -> dict:
    """Upload a local RocksDB checkpoint as the snapshot of `version` (whose identity is
    `version_id`); `verify(checkpoint_dir)` runs first and raises if RocksDB cannot read
    every file, so a damaged local file never becomes durable."""
    if verify is not None:
        verify(checkpoint_dir)
    shared = {info.base_name for info in durable.list(SHARED)}
    files = []
    uploaded = 0
    for name in sorted(os.listdir(checkpoint_dir)):
        path = os.path.join(checkpoint_dir, name)
        size = os.path.getsize(path)
        sha = _sha256(path)
        if name.endswith(".sst"):
            durable_name = shared_file_name(sha, size)
            if durable_name.rsplit("/", 1)[1] not in shared:
                durable.publish_file(durable_name, path)
                uploaded += 1
        else:
            durable_name = snapshot_file_name(version, name)
            durable.publish_file(durable_name, path)
            uploaded += 1
        files.append({"name": name, "durable": durable_name, "size": size, "sha256": sha})
        fault_point("snapshot:after-file")
    manifest = {"format": 1, "version": version, "version_id": version_id, "partition": partition, "files": files}
    durable.publish_bytes(manifest_name(version), json.dumps(manifest, indent=1).encode("utf-8"))
    fault_point("snapshot:after-manifest")
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
    if not isinstance(manifest, dict) or manifest.get("version") != version or not isinstance(manifest.get("files"), list):
        raise CorruptStateError(f"snapshot manifest {durable.uri(name)} does not describe version {version}")
    for entry in manifest["files"]:
        _check_entry(entry, version, durable.uri(name))
    if CURRENT not in {entry["name"] for entry in manifest["files"]}:  # every RocksDB checkpoint has one
        listed = "no files" if not manifest["files"] else f"no {CURRENT} file"
        raise CorruptStateError(
            f"snapshot manifest {durable.uri(name)} (version {version}) lists {listed}: it is not a snapshot"
        )
    return manifest


def _check_entry(entry: object, version: int, where: str) -> None:
    """A manifest entry names a plain local file and a durable file of this snapshot's
    forms, with a size and a SHA-256; anything else (a path, `..`, an absolute name)
    is refused before a byte is written."""
    if not isinstance(entry, dict):
        raise CorruptStateError(f"snapshot manifest {where} holds an entry that is not an object: {entry!r}")
    name, durable_name = entry.get("name"), entry.get("durable")
    if not is_snapshot_file(name):
        raise CorruptStateError(f"snapshot manifest {where} names a file {name!r} that is not a plain file name")
    own = snapshot_file_name(version, name)
    shared = is_shared_file(durable_name) and name.endswith(".sst")
    if durable_name != own and not shared:
        raise CorruptStateError(
            f"snapshot manifest {where} points file {name!r} at {durable_name!r}, which is not a file of this snapshot"
        )
    if type(entry.get("size")) is not int or entry["size"] < 0 or not isinstance(entry.get("sha256"), str):
        raise CorruptStateError(f"snapshot manifest {where} gives file {name!r} no valid size and SHA-256")


def restore_snapshot(durable: DurableDir, version: int, destination: str, partition: int | None = None) -> None:
    """Download and verify the snapshot of `version` (of `partition`, when given) into
    `destination` (a new directory)."""
    manifest = read_manifest(durable, version)
    if partition is not None and manifest.get("partition") != partition:
        raise CorruptStateError(
            f"snapshot manifest {durable.uri(manifest_name(version))} belongs to partition "
            f"{manifest.get('partition')!r}, not to partition {partition}"
        )
    shutil.rmtree(destination, ignore_errors=True)
    os.makedirs(destination)
    for entry in manifest["files"]:
        if entry["name"] == COLUMNS_FILE:  # for readers of every record (snapshot_columns), not for RocksDB
            continue
        local = os.path.join(destination, entry["name"])  # a plain name: checked by read_manifest
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


