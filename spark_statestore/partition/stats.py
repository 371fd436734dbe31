"""`PartitionMetrics`: what one open/prepare cycle of a partition did."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class PartitionMetrics:
    """Seconds, counts and bytes of one open/prepare cycle."""

    open_seconds: float = 0.0
    kept_open: bool = False  # the copy was still open from this process's previous use
    restored: bool = False
    restore_seconds: float = 0.0
    changelogs_applied: int = 0
    apply_seconds: float = 0.0  # applying changelogs (or committing the kept copy's pending batch)
    changelogs_downloaded: int = 0
    prepare_seconds: float = 0.0
    changelog_bytes: int = 0
    changelog_records: int = 0
    uncommitted_bytes_peak: int = 0
    spills: int = 0
    snapshot_version: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)
