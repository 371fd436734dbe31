"""What `python -m spark_statestore inspect` reports: a checkpoint's state as its
durable files show it (stores, partitions, versions, sizes), read without Spark and
without touching a writer's files."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir
from spark_statestore.checkpoint.names import SHARED, SNAPSHOTS, aside_name, list_changelogs, snapshot_versions
from spark_statestore.partition.reading import StateLocation
from spark_statestore.stores.kinds import kind_named


@dataclass(frozen=True)
class PartitionFacts:
    """One partition's durable versions and the bytes they take."""

    partition: int
    changelogs: list[int]
    set_aside: int
    snapshots: list[int]
    changelog_bytes: int
    snapshot_bytes: int

    @property
    def span(self) -> str:
        found = self.changelogs
        return f"{found[0]}..{found[-1]} ({len(found)})" if found else "none"


@dataclass(frozen=True)
class StateFacts:
    """A checkpoint's state: its stores, the newest committed batch and each partition."""

    location: str
    stores: dict[str, dict]
    partition_count: int | None
    committed_batch: int | None
    partitions: list[PartitionFacts]

    def as_dict(self) -> dict:
        return asdict(self)


def partition_facts(state: StateLocation, partition: int) -> PartitionFacts:
    durable = state.durable(partition)
    changelogs, asides = list_changelogs(durable)
    aside_names = {aside_name(v, i) for v, ids in asides.items() for i in ids}
    changelog_bytes = sum(info.size for info in changelogs.values())
    changelog_bytes += sum(info.size for info in durable.list() if info.base_name in aside_names)
    snapshot_bytes = sum(info.size or 0 for sub in (SNAPSHOTS, SHARED) for info in _files(durable, sub))
    return PartitionFacts(
        partition,
        sorted(changelogs),
        sum(len(ids) for ids in asides.values()),
        snapshot_versions(durable),
        changelog_bytes,
        snapshot_bytes,
    )


def _files(durable: DurableDir, subdir: str) -> list[pafs.FileInfo]:
    """Every file under `subdir` of `durable`, recursively."""
    selector = pafs.FileSelector(durable.path(subdir), allow_not_found=True, recursive=True)
    return [info for info in durable.fs.get_file_info(selector) if info.type == pafs.FileType.File]


def inspect_state(location: str) -> StateFacts:
    """The facts of the state under `location` (`NoStateError` when there is none)."""
    state = StateLocation.open(location)
    return StateFacts(
        location,
        {spec.name: {**spec.as_dict(), "cached": spec.cached} for spec in state.layout.stores},
        state.layout.partitions,
        state.committed_batch(),
        [partition_facts(state, p) for p in state.partitions],
    )


def render(facts: StateFacts) -> str:
    """The facts as a short text report."""
    lines = [f"checkpoint: {facts.location}", "stores:"]
    for name, spec in facts.stores.items():
        serdes = f"key {spec['key_serde']}, value {spec['value_serde']}"
        shape = kind_named(spec["kind"], name).describe(spec)
        lines.append(f"  {name}: {shape}; {serdes}{'' if spec['cached'] else '; uncached'}")
    count = "not recorded" if facts.partition_count is None else str(facts.partition_count)
    committed = "none" if facts.committed_batch is None else str(facts.committed_batch)
    lines.append(f"partitions: {len(facts.partitions)} with state (partition count: {count})")
    lines.append(f"committed batch: {committed} (Spark's commit log)")
    header = ("partition", "changelogs", "set aside", "snapshots", "changelog bytes", "snapshot bytes")
    rows = [
        (str(p.partition), p.span, str(p.set_aside), ",".join(map(str, p.snapshots)) or "none",
         str(p.changelog_bytes), str(p.snapshot_bytes))
        for p in facts.partitions
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)
