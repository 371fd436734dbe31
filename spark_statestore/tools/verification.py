"""What `python -m spark_statestore verify` checks: every durable file of a checkpoint's
state against its own checksums (changelogs, set-aside changelogs, snapshot manifests and
their files), and that each partition's committed version can be rebuilt along the
chain of identities, as a restore would. Nothing is written to the checkpoint."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

from spark_statestore.checkpoint.changelog import Changelog
from spark_statestore.checkpoint.names import aside_name, changelog_name, list_changelogs, snapshot_versions
from spark_statestore.checkpoint.snapshots import restore_snapshot
from spark_statestore.errors import StateStoreError
from spark_statestore.partition.reading import NoStateError, StateLocation, VersionReader


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
    with tempfile.TemporaryDirectory(prefix="statestore-verify-") as scratch:
        for partition in sorted(partitions):
            report.partitions += 1
            _verify_partition(state, partition, report, scratch)
    return report


def _verify_partition(state: StateLocation, partition: int, report: Verification, scratch: str) -> None:
    durable = state.durable(partition)
    changelogs, asides = list_changelogs(durable)
    names = [(v, changelog_name(v)) for v in sorted(changelogs)]
    names += [(v, aside_name(v, i)) for v in sorted(asides) for i in sorted(asides[v])]
    for version, name in names:
        report.changelogs += 1
        path = os.path.join(scratch, "changelog")
        try:
            durable.download(name, path)
            Changelog(path, version, partition, source=durable.uri(name))
        except (StateStoreError, OSError) as e:
            report.problems.append(Problem(partition, f"changelog {durable.uri(name)}", str(e)))
        finally:
            if os.path.exists(path):
                os.remove(path)
    for version in snapshot_versions(durable):
        report.snapshots += 1
        try:
            restore_snapshot(durable, version, os.path.join(scratch, "snapshot"), partition)
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
