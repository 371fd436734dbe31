"""What `python -m spark_statestore verify` checks: every durable file of a checkpoint's
state against its own checksums (changelogs, set-aside changelogs, snapshot manifests and
their files), and that each partition's committed version can be rebuilt along the
chain of identities, as a restore would. Nothing is written to the checkpoint."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

from spark_statestore.checkpoint.changelog import Changelog
from spark_statestore.checkpoint.filesystem import DurableDir, NotAFileError, resolve_location
from spark_statestore.checkpoint.files import PartitionFiles
from spark_statestore.checkpoint.names import QUERY_LAYOUT, statestore_dir
from spark_statestore.checkpoint.snapshot_columns import columns_entry, read_snapshot_columns
from spark_statestore.checkpoint.snapshots import read_manifest, restore_snapshot
from spark_statestore.errors import StateStoreError
from spark_statestore.partition.reading import NoStateError, StateLocation, VersionReader
from spark_statestore.partition.spark_log import newest_planned_batch, spark_partitions


@dataclass(frozen=True)
class Problem:
    """A durable file (or a partition's history) that failed a check, and why."""

    partition: int | None  # None: the state as a whole (its layout)
    what: str
    message: str


@dataclass
class Verification:
    """What was checked, and every problem found."""

    location: str
    committed_batch: int | None = None
    partitions: int = 0
    changelogs: int = 0
    snapshots: int = 0
    versions_rebuilt: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        committed = "none" if self.committed_batch is None else str(self.committed_batch)
        lines = [
            f"checkpoint: {self.location}",
            f"checked: {self.partitions} partitions, {self.changelogs} changelogs, {self.snapshots} snapshots, "
            f"{self.versions_rebuilt} committed versions rebuilt (committed batch: {committed})",
        ]
        lines += [
            f"PROBLEM {'' if p.partition is None else f'partition {p.partition}: '}{p.what}: {p.message}"
            for p in self.problems
        ]
        lines.append("OK" if self.ok else f"{len(self.problems)} problem(s) found")
        return "\n".join(lines)


def verify_state(location: str) -> Verification:
    """Check the state under `location` (`NoStateError` when there is none)."""
    try:
        state = StateLocation.open(location)
    except NoStateError:
        raise
    except (StateStoreError, ValueError, TypeError, OSError) as e:
        return Verification(location, problems=[Problem(None, "the state's layout", str(e))])
    report = Verification(location, state.committed_batch())
    # with a batch committed, every partition of the recorded count must rebuild (one whose
    # files are gone is a problem, not a partition fewer)
    partitions = set(state.partitions) | set(state.committed_partitions if report.committed_batch is not None else ())
    counts: dict[int, set[str]] = {}  # partition counts the changelogs were written with -> where
    with tempfile.TemporaryDirectory(prefix="statestore-verify-") as scratch:
        for partition in sorted(partitions):
            report.partitions += 1
            _verify_partition(state, partition, report, scratch, counts)
    _verify_partition_count(state, counts, report)
    return report


def _verify_partition_count(state: StateLocation, counts: dict[int, set[str]], report: Verification) -> None:
    """The partition count `_layout` records for the generation written now agrees with the
    partitions that have state, with the count each changelog was written with and with
    Spark's in its offset log (a count edited by hand would send a rescale or a reader
    astray)."""
    count = state.layout.generation.partitions
    if count is None:
        return
    fs, root = resolve_location(state.location, state.filesystem)
    where = f"{DurableDir(fs, statestore_dir(root)).uri(QUERY_LAYOUT)} records {count} partitions"
    beyond = [p for p in state.partitions if p >= count]
    if beyond:
        report.problems.append(Problem(None, "the state's partition count", f"{where}, but partitions {beyond} have state"))
    for other, files in sorted(counts.items()):
        if other != count:
            some = sorted(files)
            report.problems.append(Problem(
                None, "the state's partition count",
                f"{where}, but {len(some)} changelogs were written with {other} ({', '.join(some[:3])}"
                f"{', ...' if len(some) > 3 else ''})",
            ))
    try:
        planned = newest_planned_batch(state.location, state.filesystem) if state.generation_number == 0 else None
        spark = None if planned is None else spark_partitions(state.location, planned, state.filesystem)
    except (StateStoreError, OSError) as e:
        report.problems.append(Problem(None, "Spark's offset log", str(e)))
        return
    if spark is not None and spark != count:
        report.problems.append(Problem(
            None, "the state's partition count", f"{where}, but Spark's offset log runs batch {planned} on {spark}"
        ))


def _verify_partition(
    state: StateLocation, partition: int, report: Verification, scratch: str, counts: dict[int, set[str]]
) -> None:
    durable = state.durable(partition)
    try:
        files = PartitionFiles.read(durable)
    except NotAFileError as e:  # nothing more of the partition is read: its history is not what it says
        report.problems.append(Problem(partition, f"the durable files under {durable.uri('')}", str(e)))
        return
    for version, name in files.checked():
        report.changelogs += 1
        path = os.path.join(scratch, "changelog")
        try:
            durable.download(name, path)
            layout = Changelog(path, version, partition, source=durable.uri(name)).header.layout
            if isinstance(layout, dict) and type(layout.get("partitions")) is int:
                counts.setdefault(layout["partitions"], set()).add(durable.uri(name))
        except (StateStoreError, OSError) as e:
            report.problems.append(Problem(partition, f"changelog {durable.uri(name)}", str(e)))
        finally:
            if os.path.exists(path):
                os.remove(path)
    for version in files.snapshots:
        report.snapshots += 1
        try:
            restore_snapshot(durable, version, os.path.join(scratch, "snapshot"), partition)
            entry = columns_entry(read_manifest(durable, version))  # not restored: RocksDB does not need it
            if entry is not None:
                read_snapshot_columns(durable, entry)
        except (StateStoreError, OSError) as e:
            report.problems.append(Problem(partition, f"snapshot of version {version}", str(e)))
    committed = report.committed_batch
    if committed is None:
        return
    try:
        with VersionReader(state, partition, committed, committed, workdir=scratch):
            report.versions_rebuilt += 1
    except (StateStoreError, OSError) as e:
        report.problems.append(Problem(partition, f"committed version {committed}", str(e)))
