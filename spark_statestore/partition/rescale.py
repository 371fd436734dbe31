"""Moving a stopped query's state to another partition count (`rescale`).

Every store's entries move to the partition Spark's `HashPartitioning` will send their
key to (`key_mapping.py`). The moved state is a new generation (`generations.py`):

1. check that the query is stopped (`check_stopped`) and the input (partition count,
   key mappings) before anything is written;
2. read each partition of the current generation at the newest committed batch `base`
   (rebuilt privately from the durable files, as any reader does), and write its entries
   into one local RocksDB database per new partition;
3. publish each new partition as the snapshot of version `base` in the new generation's
   directories (`statestore/_g<k>/`), which nothing reads yet: the staging place;
4. switch: publish the query's layout file with the new generation (one atomic write).

A kill before step 4 leaves the state exactly as it was (the staged files are unused and
replaced by the next attempt); after it, the rescale is done. Old generations are kept,
so time travel to batches before the rescale reads the partitions they ran on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from typing import Any, Mapping

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import generation_dir, partition_dir
from spark_statestore.checkpoint.snapshots import upload_snapshot
from spark_statestore.errors import StateStoreError
from spark_statestore.faults import fault_point
from spark_statestore.partition.generations import Generation
from spark_statestore.partition.key_mapping import KeyMapping, Router, every_partition, mapping_for
from spark_statestore.partition.layout import Layout, publish_query_layout
from spark_statestore.partition.metadata import PartitionMetadata, VersionId
from spark_statestore.partition.reading import StateLocation, VersionReader
from spark_statestore.partition.spark_log import check_stopped, newest_version_at_or_below
from spark_statestore.stores.rocksdb import verify_database
from spark_statestore.txn.database import TransactionalDatabase
from spark_statestore.validation import check_int

_CHUNK = 50_000  # raw entries routed at a time


class RescaleError(StateStoreError, ValueError):
    """The state cannot be rescaled now (the message says why and what to do)."""


@dataclass(frozen=True)
class RescaleResult:
    """What a rescale did: from and to how many partitions, at which version, into which
    generation, and how many entries of each store moved."""

    location: str
    old_partitions: int
    partitions: int
    base: int
    generation: int
    entries: dict[str, int]


def rescale(
    checkpoint_location: str,
    partitions: int,
    key_mapping: KeyMapping | Mapping[str, KeyMapping] | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    workdir: str | None = None,
) -> RescaleResult:
    """Move the state of the stopped query at `checkpoint_location` to `partitions`
    partitions (see module docstring). `key_mapping`: how store keys map to grouping keys
    (`key_mapping.py`), one function or a dict by store; `workdir`: where the local
    databases are built (default: the system's temporary directory)."""
    partitions = check_int(partitions, "partitions", 1)
    if isinstance(key_mapping, Mapping):
        _check_store_names(key_mapping, checkpoint_location, filesystem)
    state = StateLocation.open(checkpoint_location, filesystem)
    layout = state.layout
    base = check_stopped(state)
    old = state.at_batch(base + 1)  # the generation the next batch would run in
    old_count = layout.generation.partitions or (max(old.partitions, default=-1) + 1)
    if partitions == old_count:
        raise RescaleError(f"the state under {checkpoint_location} already has {partitions} partitions: nothing to move")
    routers = [Router(spec, mapping_for(spec, key_mapping), partitions) for spec in layout.stores]
    generation = Generation(layout.generation.number + 1, partitions, base)
    fs, root = resolve_location(checkpoint_location, filesystem)
    staging = generation_dir(root, generation.number)
    fs.delete_dir_contents(staging, missing_dir_ok=True)  # an interrupted attempt's: never referenced
    scratch = tempfile.mkdtemp(prefix="statestore-rescale-", dir=workdir)
    try:
        targets = [_open_target(scratch, p) for p in range(partitions)]
        try:
            entries = _move(old, base, routers, targets, scratch)
            for p, db in enumerate(targets):
                _publish(db, DurableDir(fs, partition_dir(root, p, generation.number)), scratch, p, generation, layout)
                fault_point("rescale:after-partition")
        finally:
            for db in targets:
                db.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    fault_point("rescale:before-switch")
    current = layout.generation  # its count recorded too (a query that never fixed it: as found)
    history = layout.history[:-1] + (replace(current, partitions=old_count), generation)
    publish_query_layout(checkpoint_location, Layout(layout.stores, partitions, history), filesystem)
    fault_point("rescale:after-switch")
    return RescaleResult(checkpoint_location, old_count, partitions, base, generation.number, entries)


def _check_store_names(key_mapping: Mapping[str, Any], location: str, filesystem: pafs.FileSystem | None) -> None:
    names = StateLocation.open(location, filesystem).layout.names
    unknown = sorted(set(key_mapping) - set(names))
    if unknown:
        raise ValueError(f"key_mapping names stores {unknown} that the state under {location} does not have ({names})")


def _open_target(scratch: str, partition: int) -> TransactionalDatabase:
    return TransactionalDatabase(os.path.join(scratch, str(partition)), wal=False, replayable=True)


def _move(
    old: StateLocation, base: int, routers: list[Router], targets: list[TransactionalDatabase], scratch: str
) -> dict[str, int]:
    """Copy every raw entry of every store of the old partitions at `base` to its target."""
    moved = {router.spec.name: 0 for router in routers}
    for db in targets:
        for router in routers:
            db.open_store(router.spec)  # every store exists in every new partition, empty or not
    for partition in old.partitions:
        version = newest_version_at_or_below(old, partition, base)
        if version is None:
            continue  # never written: nothing to move
        with VersionReader(old, partition, version, base, workdir=scratch) as reader:
            source = reader.db
            assert source is not None  # loaded by __enter__
            for router in routers:
                source.open_store(router.spec)
                family = source.db.column_family(router.spec.name)
                chunk: list[tuple[bytes, bytes]] = []
                for pair in source.db.scan(family, None, None, False):
                    chunk.append(pair)
                    if len(chunk) >= _CHUNK:
                        moved[router.spec.name] += _route(router, chunk, targets)
                        chunk = []
                moved[router.spec.name] += _route(router, chunk, targets)
        fault_point("rescale:after-read")
    return moved


def _route(router: Router, chunk: list[tuple[bytes, bytes]], targets: list[TransactionalDatabase]) -> int:
    """Write a chunk of raw entries to their new partitions; returns the user entries."""
    if not chunk:
        return 0
    per_target: list[list[tuple[str, bytes, bytes]]] = [[] for _ in targets]
    name = router.spec.name
    count = 0
    for (key, value), target in zip(chunk, router.route([key for key, _ in chunk])):
        if every_partition(target):
            for entries in per_target:  # the store's bookkeeping (a window store's stream time)
                entries.append((name, key, value))
        else:
            per_target[target].append((name, key, value))
            count += 1
    for db, entries in zip(targets, per_target):
        if entries:
            db.replay({}, entries, {})
    return count


def _publish(
    db: TransactionalDatabase, durable: DurableDir, scratch: str, partition: int, generation: Generation, layout: Layout
) -> None:
    """Record the new partition as version `base` and publish it as that version's snapshot."""
    ident = _version_id(generation, partition)
    db.replay({}, [], PartitionMetadata.committed_offsets(VersionId(generation.base, ident)))
    meta = PartitionMetadata(db)
    meta.record_layout(Layout(layout.stores, generation.partitions))
    meta.record_snapshot(generation.base)
    checkpoint = os.path.join(scratch, f"snapshot-{partition}")
    db.checkpoint(checkpoint)
    upload_snapshot(durable, checkpoint, generation.base, partition, ident, verify_database)
    shutil.rmtree(checkpoint, ignore_errors=True)


def _version_id(generation: Generation, partition: int) -> int:
    """The identity of a new partition's first version: never 0 (the empty state) and
    never a changelog's id of another generation (it names this one)."""
    text = f"rescale generation {generation.number} partition {partition} base {generation.base}"
    return (int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & ((1 << 63) - 1)) | 1
