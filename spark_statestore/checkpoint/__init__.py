"""Durable partition state in the query's checkpoint location: changelogs, snapshots,
retention, and the `PartitionState` protocol the Spark adapters drive."""

from spark_statestore.checkpoint.changelog import Changelog, ChangelogWriter
from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.partition import PartitionMetrics, PartitionState, StoreSpec

__all__ = [
    "Changelog",
    "ChangelogWriter",
    "DurableDir",
    "PartitionMetrics",
    "PartitionState",
    "StoreSpec",
    "resolve_location",
]
