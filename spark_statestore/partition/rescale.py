"""Moving a stopped query's state to another partition count (`rescale`).

Every store's entries move to the partition Spark's `HashPartitioning` will send their
key to (`key_mapping.py`). The moved state is a new generation (`generations.py`):

1. claim the checkpoint (`rescale_claim.py`: one rescale at a time, also on object
   stores), then check that the query is stopped (`check_stopped`) and the input
   (partition count, key mappings) before anything is written;
2. read each partition of the current generation at exactly the newest committed batch
   `base` (rebuilt privately from the durable files along the chain of identities, as a
   restore would: a missing or damaged file is refused, never read around), and write its
   entries into one local RocksDB database per new partition;
3. publish each new partition as the snapshot of version `base` in the new generation's
   directories (`statestore/_g<k>/`), which nothing reads yet: the staging place;
4. switch, after checking again that the claim is held, the layout unchanged and the
   query still stopped at `base`: publish the query's layout file with the new generation
   (one atomic write).

A kill before step 4 leaves the state exactly as it was (the staged files are unused and
replaced by the next attempt, which also removes the killed one's claim and local scratch
copy); after it, the rescale is done. Old generations are kept,
so time travel to batches before the rescale reads the partitions they ran on.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import tempfile
from dataclasses import dataclass, replace
from typing import Any, Mapping

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import generation_dir, partition_dir
from spark_statestore.checkpoint.snapshot_columns import verify_and_write_columns
from spark_statestore.checkpoint.snapshots import upload_snapshot
from spark_statestore.errors import StateStoreError
from spark_statestore.faults import fault_point
from spark_statestore.partition.generations import Generation, check_partitions
from spark_statestore.partition.key_mapping import KeyMapping, Router, every_partition, mapping_for
from spark_statestore.partition.layout import Layout, publish_query_layout
from spark_statestore.partition.metadata import PartitionMetadata, VersionId
from spark_statestore.partition.reading import StateLocation, VersionReader
from spark_statestore.partition.rescale_claim import RescaleClaim, process_alive
from spark_statestore.partition.spark_log import QueryMayBeRunningError, newest_planned_batch, spark_partitions
from spark_statestore.txn.database import TransactionalDatabase

_CHUNK = 50_000  # raw entries routed at a time
_SCRATCH_PREFIX = "statestore-rescale-"  # + the rescale's process id: a dead one's is removed
_FILES_PER_TARGET = 16  # open files a new partition's local database may hold (measured: 9, then SSTs)


class RescaleError(StateStoreError, ValueError):
    """The state cannot be rescaled now (the message says why and what to do)."""


def check_stopped(state: StateLocation) -> int:
    """The newest committed batch, after checking that nothing is in flight above it (a
    query that may still be running would change the state under a rescale): Spark's offset
    log plans no uncommitted batch, and no partition of the generation the next batch runs
    in has a prepared changelog above the commit. `QueryMayBeRunningError` naming what was
    found otherwise."""
    committed = state.committed_batch()
    if committed is None:
        raise QueryMayBeRunningError(
            f"no batch of the query at {state.location} is committed (commits/ is empty): there is no state to move"
        )
    planned = newest_planned_batch(state.location, state.filesystem)
    if planned is not None and planned > committed:
        raise QueryMayBeRunningError(
            f"batch {planned} of the query at {state.location} is planned (offsets/{planned}) but not committed "
            f"(newest commit: {committed}): the query is running, or stopped before that batch finished; run it "
            f"until the batch commits, stop it, then rescale"
        )
    current = state.at_batch(committed + 1)
    for partition in current.partitions:
        changelogs, _ = current.versions(partition)
        above = [v for v in changelogs if v > committed]
        if above:
            raise QueryMayBeRunningError(
                f"partition {partition} of the state at {state.location} has prepared version {max(above)}, above "
                f"Spark's newest commit {committed}: a batch is in flight (the query may be running); stop the "
                f"query and let its last batch commit, then rescale"
            )
    return committed


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
    partitions = check_partitions(partitions)
    _check_open_files(partitions)
    if isinstance(key_mapping, Mapping):
        _check_store_names(key_mapping, checkpoint_location, filesystem)
    fs, root = resolve_location(checkpoint_location, filesystem)
    _remove_dead_scratch(workdir)
    with RescaleClaim(fs, root, checkpoint_location, f"rescale to {partitions} partitions") as claim:
        state = StateLocation.open(checkpoint_location, filesystem)
        layout = state.layout
        if not layout.stores:
            raise RescaleError(f"the layout of the state under {checkpoint_location} lists no stores: nothing to move")
        base = check_stopped(state)
        old = state.at_batch(base + 1)  # the generation the next batch would run in
        version, sources = _sources(old, base)
        old_count = layout.generation.partitions or (max(sources) + 1)
        if partitions == old_count:
            raise RescaleError(
                f"the state under {checkpoint_location} already has {partitions} partitions: nothing to move"
            )
        routers = [Router(spec, mapping_for(spec, key_mapping), partitions) for spec in layout.stores]
        generation = Generation(layout.generation.number + 1, partitions, base)
        staging = generation_dir(root, generation.number)
        fs.delete_dir_contents(staging, missing_dir_ok=True)  # an interrupted attempt's: never referenced
        scratch = tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", dir=workdir)
        try:
            targets = [_open_target(scratch, p) for p in range(partitions)]
            try:
                entries = _move(old, sources, version, base, routers, targets, scratch)
                for p, db in enumerate(targets):
                    durable = DurableDir(fs, partition_dir(root, p, generation.number))
                    _publish(db, durable, scratch, p, generation, layout)
                    fault_point("rescale:after-partition")
            finally:
                for db in targets:
                    db.close()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        fault_point("rescale:before-switch")
        _check_unchanged(checkpoint_location, filesystem, layout, base, claim)
        current = layout.generation  # its count recorded too (a query that never fixed it: as found)
        history = layout.history[:-1] + (replace(current, partitions=old_count), generation)
        publish_query_layout(checkpoint_location, Layout(layout.stores, partitions, history), filesystem)
        fault_point("rescale:after-switch")
    return RescaleResult(checkpoint_location, old_count, partitions, base, generation.number, entries)


def _check_unchanged(
    location: str, filesystem: pafs.FileSystem | None, layout: Layout, base: int, claim: RescaleClaim
) -> None:
    """Under the switch: the claim is still this rescale's, the layout is the one it
    started from, and the query is still stopped at `base` (a query started while the
    state was staged would have committed on the old partitions)."""
    claim.check_held()
    state = StateLocation.open(location, filesystem)
    if state.layout.to_json() != layout.to_json():
        raise RescaleError(
            f"the layout of the state under {location} changed while the rescale ran (a query started, or another "
            f"rescale switched): this rescale does not switch; the state stays as it now is"
        )
    try:
        now = check_stopped(state)
    except QueryMayBeRunningError as e:
        raise RescaleError(f"the query started while the rescale ran: it does not switch ({e})") from None
    if now != base:
        raise RescaleError(
            f"batch {now} of the query at {location} committed while the rescale moved the state of batch {base} "
            f"(the query ran meanwhile): the rescale does not switch; the state stays as it now is: stop the query "
            f"and rescale again"
        )


def _check_open_files(partitions: int) -> None:
    """Refuse a count whose local databases (all open at once) exceed the open-file limit."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit != resource.RLIM_INFINITY and partitions * _FILES_PER_TARGET > limit:
        raise RescaleError(
            f"partitions {partitions} needs about {partitions * _FILES_PER_TARGET} open files (one local database "
            f"per new partition), above this process's limit of {limit} (ulimit -n): raise the limit or choose "
            f"at most {limit // _FILES_PER_TARGET} partitions"
        )


def _remove_dead_scratch(workdir: str | None) -> None:
    """Delete the local scratch copies that killed rescales on this host left behind."""
    where = workdir or tempfile.gettempdir()
    try:
        names = os.listdir(where)
    except OSError:
        return
    for name in names:
        pid = name[len(_SCRATCH_PREFIX) :].split("-", 1)[0] if name.startswith(_SCRATCH_PREFIX) else ""
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(os.path.join(where, name), ignore_errors=True)


def _check_store_names(key_mapping: Mapping[str, Any], location: str, filesystem: pafs.FileSystem | None) -> None:
    names = StateLocation.open(location, filesystem).layout.names
    unknown = sorted(set(key_mapping) - set(names))
    if unknown:
        raise ValueError(f"key_mapping names stores {unknown} that the state under {location} does not have ({names})")


def _open_target(scratch: str, partition: int) -> TransactionalDatabase:
    return TransactionalDatabase(os.path.join(scratch, str(partition)), wal=False, replayable=True)


def _sources(old: StateLocation, base: int) -> tuple[int, list[int]]:
    """The version the state of committed batch `base` is (the newest any partition has
    at or below it: batches Spark's own repartition wrote have none of ours), and every
    partition that must hold it: each of the count it was written on (the generation's,
    or Spark's offset log's for that batch), and any other with durable state."""
    listed = old.partitions
    newest = [v for p in listed for v in sum(old.versions(p), []) if v <= base]
    if not newest:
        raise RescaleError(
            f"the state under {old.location} has no durable version at or below its newest committed batch {base} "
            f"(partitions found: {list(listed)}): its files are gone; nothing was changed"
        )
    version = max(newest)
    count = old.layout.history[old.generation_number].partitions
    if count is None and old.generation_number == 0:
        count = spark_partitions(old.location, version, old.filesystem)
    return version, sorted(set(range(count or 0)) | set(listed))


def _move(
    old: StateLocation,
    sources: list[int],
    version: int,
    base: int,
    routers: list[Router],
    targets: list[TransactionalDatabase],
    scratch: str,
) -> dict[str, int]:
    """Copy every raw entry of every store of the old partitions at `version` (the state
    of committed batch `base`) to its target. Each partition is rebuilt at exactly that
    version along its chain of identities, as a restore would: a missing or damaged file
    is refused, naming it, never read around."""
    moved = {router.spec.name: 0 for router in routers}
    for db in targets:
        for router in routers:
            db.open_store(router.spec)  # every store exists in every new partition, empty or not
    for partition in sources:
        try:
            with VersionReader(old, partition, version, base, workdir=scratch) as reader:
                source = reader.db
                assert source is not None  # loaded by __enter__
                for router in routers:
                    moved[router.spec.name] += _move_store(source, router, targets)
        except (StateStoreError, OSError) as e:
            raise RescaleError(
                f"partition {partition} of the state under {old.location} cannot be read at batch {base}: {e}; "
                f"nothing was changed (python -m spark_statestore verify {old.location} lists every problem)"
            ) from e
        fault_point("rescale:after-read")
    return moved


def _move_store(source: TransactionalDatabase, router: Router, targets: list[TransactionalDatabase]) -> int:
    """Route one store's raw entries of a source partition; returns the user entries."""
    source.open_store(router.spec)
    family = source.db.column_family(router.spec.name)
    count = 0
    chunk: list[tuple[bytes, bytes]] = []
    for pair in source.db.scan(family, None, None, False):
        chunk.append(pair)
        if len(chunk) >= _CHUNK:
            count += _route(router, chunk, targets)
            chunk = []
    return count + _route(router, chunk, targets)


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
    upload_snapshot(durable, checkpoint, generation.base, partition, ident, verify_and_write_columns)
    shutil.rmtree(checkpoint, ignore_errors=True)


def _version_id(generation: Generation, partition: int) -> int:
    """The identity of a new partition's first version: never 0 (the empty state) and
    never a changelog's id of another generation (it names this one)."""
    text = f"rescale generation {generation.number} partition {partition} base {generation.base}"
    return (int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & ((1 << 63) - 1)) | 1
