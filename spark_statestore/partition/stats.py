"""`PartitionMetrics`: what one open/prepare cycle of a partition did.

Each metric says, in its field's metadata, how the metrics of a batch's tasks combine
into the batch's (`SUM`, `MAX`, or `None`: per task only); `combined_fields(cls, how)`
lists them, so a record type that extends this one (the Spark task's) is summarized by
the same rule without naming its metrics again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

SUM, MAX = "sum", "max"
COMBINE = "combine"  # the metadata key


def metric(default: Any, combine: str | None) -> Any:
    """A metric field: its default and how it combines over a batch's tasks."""
    if combine not in (SUM, MAX, None):
        raise ValueError(f"combine must be {SUM!r}, {MAX!r} or None, got {combine!r}")
    return field(default=default, metadata={COMBINE: combine})


def combined_fields(record_type: type, how: str) -> tuple[str, ...]:
    """The names of `record_type`'s metrics that combine by `how`, in field order."""
    return tuple(f.name for f in fields(record_type) if f.metadata.get(COMBINE) == how)


@dataclass
class PartitionMetrics:
    """Seconds, counts and bytes of one open/prepare cycle."""

    open_seconds: float = metric(0.0, MAX)
    kept_open: bool = metric(False, SUM)  # the copy was still open from this process's previous use
    restored: bool = metric(False, SUM)
    restore_seconds: float = metric(0.0, MAX)
    changelogs_applied: int = metric(0, SUM)
    apply_seconds: float = metric(0.0, MAX)  # applying changelogs (or committing the kept copy's pending batch)
    changelogs_downloaded: int = metric(0, None)
    prepare_seconds: float = metric(0.0, MAX)
    changelog_bytes: int = metric(0, SUM)
    rows_written: int = metric(0, SUM)  # records in the batch's changelog
    uncommitted_bytes_peak: int = metric(0, MAX)
    spills: int = metric(0, SUM)
    snapshot_version: int | None = metric(None, None)
    rows_expired: int = metric(0, SUM)  # expired entries of TTL stores deleted (advance_clocks)
    expiry_seconds: float = metric(0.0, MAX)

    def as_dict(self) -> dict:
        return asdict(self)
