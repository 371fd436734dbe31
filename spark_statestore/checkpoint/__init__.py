"""Durable files of the partition state in the query's checkpoint location, through
`pyarrow.fs`: the filesystem layer, every durable name and its pattern (`names`), the
kinds of a partition's files in one table with one listing of a partition that history,
retention, `inspect` and `verify` share (`files`), the changelog format and its header,
snapshots and retention."""

from spark_statestore.checkpoint.changelog import Changelog, ChangelogWriter
from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location

__all__ = ["Changelog", "ChangelogWriter", "DurableDir", "resolve_location"]
